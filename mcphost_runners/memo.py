"""`plugin:mcphost/memo/default`: the embedded default agent. No model: it answers from host facts it pulls
over the run's MCP server, so a person sees the whole loop in the quickstart.

One reply reads like `Turn 3. I heard “more tea”. You said “hello” earlier. “tea” came up before: “tea or
coffee?”.` and ends with the MCP tools it used. Where each part comes from:
- the turn number: `state_get` / `state_set` of `memo.turns` in `conversation` state;
- what the user said earlier: `history_page(before_cursor=ctx.context.latest_cursor)` (strictly earlier);
- matching earlier lines: `history_search` with the input's words, the current message left out;
- a knowledge hit, for each granted knowledge base: `knowledge_retrieve` (`not_found` — no index yet — is
  skipped quietly).

Owns only the wording. A facts call the grant refuses (`unauthorized`, or `invalid_argument` for a scope
the event lacks) leaves its part out; an unreachable MCP server fails the run with
`runner.mcp_unavailable` (the SDK reports the `RunAPIError`). Streams the reply part by part when the
delivery surface supports streaming; the deltas add up to the final message.
"""

from __future__ import annotations

import re

from mcphost_runners.sdk import (
    AgentRunContext,
    AgentRunner,
    Capabilities,
    ContextSupport,
    Permissions,
    RunAPI,
    RunAPIError,
    RunOutput,
    TranscriptItem,
    serve,
)

TURNS_KEY = "memo.turns"
QUOTE_CHARS = 80
SEARCH_WORDS = 8
_TOLERATED = frozenset({"unauthorized", "invalid_argument", "not_found"})
_WORD = re.compile(r"[\w'-]{3,}")
_COMMON = frozenset(
    [
        "the",
        "and",
        "you",
        "are",
        "how",
        "what",
        "for",
        "with",
        "this",
        "that",
        "was",
        "were",
        "but",
        "not",
        "have",
        "has",
        "had",
        "can",
        "our",
        "your",
        "its",
        "from",
        "they",
        "them",
        "his",
        "her",
        "she",
        "him",
        "who",
        "why",
        "when",
        "where",
        "which",
        "will",
        "would",
        "could",
        "should",
        "about",
        "there",
        "here",
        "then",
        "than",
        "also",
        "just",
        "too",
        "very",
        "all",
        "any",
        "out",
        "get",
        "got",
        "did",
        "does",
        "yes",
        "yet",
        "may",
        "let",
        "see",
        "please",
        "thanks",
    ]
)


def quote(text: str) -> str:
    """`text` on one line, cut to `QUOTE_CHARS`, in typographic quotes."""
    flat = " ".join(text.split())
    if len(flat) > QUOTE_CHARS:
        flat = flat[: QUOTE_CHARS - 1].rstrip() + "…"
    return f"“{flat}”"


def search_words(text: str) -> list[str]:
    """The distinct words of `text` worth searching for (3+ characters, not the most common), in order."""
    words: list[str] = []
    for word in _WORD.findall(text.lower()):
        if word not in words and word not in _COMMON:
            words.append(word)
    return words[:SEARCH_WORDS]


def shared_words(words: list[str], content: str) -> list[str]:
    """The words of `words` that `content` holds."""
    lowered = content.lower()
    return [word for word in words if word in lowered]


class MemoRunner(AgentRunner):
    """Replies with what the host remembers about the conversation, read through MCP."""

    name = "default"
    label = {"en": "Memo"}
    description = {
        "en": "Answers without a model from host facts read over MCP: the turn number, what you said "
        "earlier, matching earlier lines and knowledge hits."
    }
    capabilities = Capabilities(streaming=True, knowledge_retrieval=True)
    permissions = Permissions(
        history=["page", "search"], state=["read", "write"], knowledge=["list", "retrieve"]
    )
    context_support = ContextSupport(supports_history_search=True)
    calls_run_api = True

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        api = out.api
        used: list[str] = []
        text = (ctx.input.text or "").strip()
        parts: list[str] = []

        turn = await self._turn(ctx, api, used)
        if turn is not None:
            parts.append(f"Turn {turn}.")
        parts.append(f"I heard {quote(text)}." if text else "I heard nothing in words.")

        earlier = await self._earlier(ctx, api, used)
        said = next((item for item in earlier if item.role == "user"), None)
        if said is not None:
            parts.append(f"You said {quote(said.content)} earlier.")
        elif not earlier:
            parts.append(
                "Nothing earlier in this conversation yet — say something else and I will remember this."
            )

        words = search_words(text)
        if words:
            matches = await self._matches(ctx, api, words, used)
            if said is not None:  # already quoted above
                matches = [item for item in matches if item.cursor != said.cursor]
            if matches:
                best = matches[0]
                topic = quote(" ".join(shared_words(words, best.content)))
                more = f" (and {len(matches) - 1} more earlier lines)" if len(matches) > 1 else ""
                parts.append(f"{topic} came up before: {quote(best.content)}{more}.")
            for kb_name, passage in await self._knowledge(ctx, api, text, used):
                parts.append(f"From {kb_name}: {quote(passage)}.")

        if turn is not None:
            await self._save_turn(api, turn, used)
        body = " ".join(parts)
        footer = (
            f"\n\n(memo has no model: it read these host facts over MCP with {', '.join(used)}.)"
            if used
            else "\n\n(memo has no model, and this run had no host facts to read.)"
        )
        if ctx.delivery.supports_streaming:
            for index, part in enumerate(parts):
                await out.delta(part if index == 0 else " " + part)
            await out.delta(footer)
        await out.message(body + footer)
        await out.completed()

    async def _turn(self, ctx: AgentRunContext, api: RunAPI, used: list[str]) -> int | None:
        """This turn's number from conversation state, or None when the run may not read it."""
        if ctx.conversation is None:
            return None
        try:
            stored = await api.state_get("conversation", TURNS_KEY)
        except RunAPIError as exc:
            if exc.code not in _TOLERATED:
                raise
            return None
        _note(used, "state_get")
        value = stored.value
        previous = value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
        return previous + 1

    async def _save_turn(self, api: RunAPI, turn: int, used: list[str]) -> None:
        try:
            await api.state_set("conversation", TURNS_KEY, turn)
        except RunAPIError as exc:  # read-only state: the count just does not advance
            if exc.code not in _TOLERATED:
                raise
            return
        _note(used, "state_set")

    async def _earlier(self, ctx: AgentRunContext, api: RunAPI, used: list[str]) -> list[TranscriptItem]:
        """The newest items strictly before the current input, newest first."""
        cursor = ctx.context.latest_cursor
        if cursor is None:
            return []
        try:
            page = await api.history_page(before_cursor=cursor, limit=20)
        except RunAPIError as exc:
            if exc.code not in _TOLERATED:
                raise
            return []
        _note(used, "history_page")
        return page.items

    async def _matches(
        self, ctx: AgentRunContext, api: RunAPI, words: list[str], used: list[str]
    ) -> list[TranscriptItem]:
        """Earlier user lines holding some of `words`, best first (this input left out)."""
        try:
            found = await api.history_search(" ".join(words), top_k=10, roles=["user"])
        except RunAPIError as exc:
            if exc.code not in _TOLERATED:
                raise
            return []
        _note(used, "history_search")
        current = ctx.context.latest_cursor
        return [
            hit.item
            for hit in found.hits
            if hit.item.run_id != ctx.run_id
            and hit.item.cursor != current
            and shared_words(words, hit.item.content)
        ]

    async def _knowledge(
        self, ctx: AgentRunContext, api: RunAPI, query: str, used: list[str]
    ) -> list[tuple[str, str]]:
        """The best passage of each granted knowledge base, as (base name, passage)."""
        hits: list[tuple[str, str]] = []
        for kb in ctx.resources.knowledge_bases[:3]:
            try:
                chunks = await api.knowledge_retrieve(kb.kb_id, query[:2000], top_k=1)
            except RunAPIError as exc:
                if exc.code not in _TOLERATED:
                    raise
                continue
            _note(used, "knowledge_retrieve")
            if chunks:
                hits.append((kb.name, chunks[0].text))
        return hits


def _note(used: list[str], tool: str) -> None:
    if tool not in used:
        used.append(tool)


def main() -> None:
    serve(
        MemoRunner(),
        author="mcphost",
        plugin="memo",
    )


if __name__ == "__main__":
    main()
