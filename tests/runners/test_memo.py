"""The memo runner as the host launches it (`python -m mcphost_runners.memo`), reading host facts from the real
facts server over HTTP: real stores on a SQLite file and runs admitted with real grants."""

from __future__ import annotations

import sys
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path

import pytest

from mcphost.facts.providers import KnowledgeChunk
from mcphost.plugins.process import PluginSpec, PluginSupervisor
from mcphost.protocol import AgentRunContext, JSONObject, MCPAccess
from mcphost.stores import Stores, open_stores
from mcphost_runners.memo import MemoRunner, quote, search_words
from tests.mcphost.facts._helpers import RunHandle, Served, serve_facts
from tests.plugins.support import FAST, REPO, collect

MEMO = "plugin:mcphost/memo/default"
PERMISSIONS: JSONObject = MemoRunner.permissions.model_dump(mode="json")


class Docs:
    """A fake knowledge retriever with one passage about tea."""

    async def retrieve(
        self, kb_id: str, query: str, *, top_k: int, filters: JSONObject | None
    ) -> Sequence[KnowledgeChunk]:
        if "tea" not in query:
            return []
        return [
            KnowledgeChunk(
                chunk_id="c1", document="drinks.md", text="Green tea steeps at 80 °C.", score=1.0, metadata={}
            )
        ]


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncGenerator[Stores]:
    async with open_stores(f"sqlite+aiosqlite:///{tmp_path / 'db' / 'mcphost.db'}", tmp_path / "data") as s:
        yield s


@pytest.fixture(scope="module")
async def memo() -> AsyncGenerator[PluginSupervisor]:
    """One memo plugin process for the module: it serves many runs, like the host's."""
    spec = PluginSpec("memo", [sys.executable, "-m", "mcphost_runners.memo"], {}, REPO)
    async with PluginSupervisor([spec], timings=FAST) as supervisor:
        yield supervisor


async def turn(
    served: Served, memo: PluginSupervisor, text: str, **options: object
) -> tuple[str, list[JSONObject], RunHandle]:
    """One run of memo on `text`: (status, results, run)."""
    run = await served.start_run(runner=MEMO, permissions=PERMISSIONS, text=text, **options)  # pyright: ignore[reportArgumentType]
    status, results = await collect(memo.plugins[0], run.context)
    await served.finish(run)
    return status, [r.obj for r in results], run


def reply(results: list[JSONObject]) -> str:
    [message] = [r for r in results if r["type"] == "message.completed"]
    return str(message["data"]["message"]["content"])


async def test_memo_counts_turns_and_quotes_what_was_said_earlier(
    stores: Stores, memo: PluginSupervisor
) -> None:
    async with serve_facts(stores) as served:
        status1, first, run1 = await turn(served, memo, "hello")
        status2, second, _ = await turn(served, memo, "tea or coffee?")
        status3, third, _ = await turn(served, memo, "green tea")
        status4, fourth, run4 = await turn(served, memo, "more tea please")
    assert {status1, status2, status3, status4} == {"completed"}

    assert reply(first).startswith("Turn 1. I heard “hello”. Nothing earlier in this conversation yet")
    assert reply(second).startswith("Turn 2. I heard “tea or coffee?”. You said “hello” earlier.\n")
    # The line already quoted as said earlier is not repeated as a match.
    assert reply(third).startswith("Turn 3. I heard “green tea”. You said “tea or coffee?” earlier.\n")
    assert reply(fourth).startswith(
        "Turn 4. I heard “more tea please”. You said “green tea” earlier. "
        "“tea” came up before: “tea or coffee?”.\n"
    )
    assert "over MCP with state_get, history_page, history_search, state_set" in reply(fourth)

    # Streamed part by part: the deltas add up to the message, then the run completes.
    types = [r["type"] for r in fourth]
    assert types[-2:] == ["message.completed", "run.completed"]
    assert set(types[:-2]) == {"message.delta"}
    assert "".join(r["data"]["chunk"]["content"] for r in fourth[:-2]) == reply(fourth)

    # Every fact came over MCP, and the host audited each call.
    assert [r.tool for r in await served.audit(run1)] == [
        "state_get",
        "history_page",
        "history_search",
        "knowledge_retrieve",
        "state_set",
    ]
    assert {r.outcome for r in await served.audit(run4)} == {"ok", "error"}  # knowledge: not_found
    value = await stores.state.get(
        "conversation", run4.grant.state_scope_id("conversation") or (), "memo.turns"
    )
    assert value is not None
    assert value.value == 4


async def test_memo_quotes_a_knowledge_hit_when_a_base_is_granted(
    stores: Stores, memo: PluginSupervisor
) -> None:
    async with serve_facts(stores, knowledge=Docs()) as served:
        status, results, _ = await turn(served, memo, "how hot for green tea")
    assert status == "completed"
    assert "From Docs: “Green tea steeps at 80 °C.”." in reply(results)
    assert "knowledge_retrieve" in reply(results)


async def test_memo_leaves_out_what_the_grant_refuses(stores: Stores, memo: PluginSupervisor) -> None:
    read_only = {"state": {"scopes": ["conversation"], "write": False}, "resources": {}}
    async with serve_facts(stores) as served:
        _, first, _ = await turn(served, memo, "hello", agent=read_only)
        status, second, run = await turn(served, memo, "hello again", agent=read_only)
    assert status == "completed"
    assert reply(first).startswith("Turn 1.")
    assert reply(second).startswith("Turn 1. I heard “hello again”. You said “hello” earlier.")  # not saved
    assert "state_set" not in reply(second)
    assert ("state_set", "refused", "unauthorized") in [
        (r.tool, r.outcome, r.code) for r in await served.audit(run)
    ]


async def test_memo_does_not_stream_where_the_surface_cannot(stores: Stores, memo: PluginSupervisor) -> None:
    async with serve_facts(stores) as served:
        status, results, _ = await turn(served, memo, "plain", agent={"delivery": {"streaming": False}})
    assert status == "completed"
    assert [r["type"] for r in results] == ["message.completed", "run.completed"]


async def test_memo_fails_with_mcp_unavailable_when_the_server_cannot_be_reached(
    stores: Stores, memo: PluginSupervisor
) -> None:
    async with serve_facts(stores) as served:
        run = await served.start_run(runner=MEMO, permissions=PERMISSIONS, text="hello")
    mcp = run.context.context.mcp
    assert mcp is not None
    gone = mcp.model_copy(update={"url": "http://127.0.0.1:9/runs/x/mcp"})
    ctx: AgentRunContext = run.context.model_copy(
        update={"context": run.context.context.model_copy(update={"mcp": gone})}
    )
    status, results = await collect(memo.plugins[0], ctx)
    assert status == "failed"
    [failed] = [r.obj for r in results]
    assert failed["type"] == "run.failed"
    assert failed["data"]["code"] == "runner.mcp_unavailable"
    assert failed["data"]["retryable"] is True
    assert run.token not in str(failed)
    assert isinstance(gone, MCPAccess)


def test_quotes_are_one_line_and_short() -> None:
    assert quote("a\n  b") == "“a b”"
    assert quote("x" * 200) == "“" + "x" * 79 + "…”"
    assert search_words("Tea, TEA and me, green-tea!") == ["tea", "green-tea"]


def test_memo_declares_what_it_reads() -> None:
    manifest = MemoRunner().manifest(author="mcphost", plugin="memo")
    assert manifest.id == MEMO
    assert manifest.permissions.history == ["page", "search"]
    assert manifest.permissions.state == ["read", "write"]
    assert manifest.permissions.knowledge == ["list", "retrieve"]
