"""A changed memo (`test/memovariant`): it searches earlier lines for its top 5 instead of 10.

Replayed against a recording of the bundled memo, its one changed MCP call (`history_search` with
`top_k` 5) has no recorded answer, so the replay answers it with a tool error; memo tolerates that and
leaves the "came up before" part out of its reply: one changed tool call, one changed message.
"""

from __future__ import annotations

from mcphost_runners.memo import MemoRunner
from mcphost_runners.sdk import AgentRunContext, RunAPI, RunAPIError, TranscriptItem, serve


class MemoVariant(MemoRunner):
    async def _matches(
        self, ctx: AgentRunContext, api: RunAPI, words: list[str], used: list[str]
    ) -> list[TranscriptItem]:
        try:
            found = await api.history_search(" ".join(words), top_k=5, roles=["user"])
        except RunAPIError:
            return []
        used.append("history_search")
        return [hit.item for hit in found.hits if hit.item.cursor != ctx.context.latest_cursor]


def main() -> None:
    serve(MemoVariant(), author="test", plugin="memovariant")


if __name__ == "__main__":
    main()
