"""`RunAPI` against the real facts server over real HTTP: real stores on a SQLite file, runs admitted with
real grants (`tests/mcphost/facts/_helpers.py`), and a fake upstream host tool provider."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from pathlib import Path

import anyio
import mcp_types as types
import pytest

from mcphost.models import RunGrant
from mcphost.protocol import JSONObject, MCPAccess
from mcphost.stores import Stores, open_stores
from mcphost_runners.sdk import RunAPI, RunAPIError
from tests._json import obj
from tests.mcphost.facts._helpers import RunHandle, Served, serve_facts

MODES = ["legacy", "2026-07-28"]


class SearchTools:
    """A fake upstream MCP server exposed as host tools `search__find` and `search__broken`."""

    def __init__(self) -> None:
        self.release = anyio.Event()

    async def list_tools(self, grant: RunGrant) -> Sequence[types.Tool]:
        schema: JSONObject = {"type": "object", "properties": {"q": {"type": "string"}}}
        return [
            types.Tool(name="search__find", description="Find documents.", input_schema=schema),
            types.Tool(name="search__broken", description="Always fails.", input_schema=schema),
            types.Tool(name="search__slow", description="Waits.", input_schema=schema),
        ]

    async def call_tool(self, grant: RunGrant, name: str, arguments: JSONObject) -> types.CallToolResult:
        if name == "search__broken":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text="index offline")], is_error=True
            )
        if name == "search__slow":
            await self.release.wait()
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"found {arguments.get('q')}")],
            structured_content={"hits": [arguments.get("q")]},
        )


@pytest.fixture
async def sqlite_stores(tmp_path: Path) -> AsyncGenerator[Stores]:
    async with open_stores(f"sqlite+aiosqlite:///{tmp_path / 'db' / 'mcphost.db'}", tmp_path / "data") as s:
        yield s


@pytest.fixture
async def served(sqlite_stores: Stores) -> AsyncGenerator[Served]:
    async with serve_facts(sqlite_stores, host_tools=SearchTools()) as found:
        yield found


def access(run: RunHandle) -> MCPAccess:
    mcp = run.context.context.mcp
    assert mcp is not None
    return mcp


@pytest.mark.parametrize("mode", MODES)
async def test_every_method_answers_with_typed_results(served: Served, mode: str) -> None:
    transcript = served.stores.transcript
    await transcript.append(conversation_id="conv-1", role="user", content="I like apple pie")
    await transcript.append(conversation_id="conv-1", role="assistant", content="Apple pie is great")
    run = await served.start_run(text="what about apple tart?")
    async with RunAPI(access(run), mode=mode) as api:
        assert not api.connected  # lazily opened: nothing happens before the first call
        assert await served.audit(run) == []

        ctx = await api.run_context()
        assert ctx.run_id == run.run_id
        assert ctx.context.mcp is not None
        assert ctx.context.mcp.headers == {}
        assert api.connected

        earlier = await api.history_page(before_cursor=run.context.context.latest_cursor, limit=1)
        assert [(i.role, i.content) for i in earlier.items] == [("assistant", "Apple pie is great")]
        assert earlier.has_more
        assert earlier.next_cursor is not None
        older = await api.history_page(before_cursor=earlier.next_cursor)
        assert [i.content for i in older.items] == ["I like apple pie"]
        forward = await api.history_page(after_cursor=older.items[0].cursor, limit=5)
        assert [i.content for i in forward.items] == ["Apple pie is great", "what about apple tart?"]

        hits = (await api.history_search("apple pie", roles=["user"])).hits
        assert [h.item.content for h in hits] == ["I like apple pie", "what about apple tart?"]
        assert hits[0].score > hits[1].score
        assert "apple" in hits[0].snippet

        event = await api.events_get(run.event.event_id)
        assert event.event_type == "message.received"
        assert obj(event.data)["input"]["text"] == "what about apple tart?"
        events = await api.events_page(event_types=["message.received"])
        assert [e.event_id for e in events.items] == [run.event.event_id]

        created = await api.artifacts_create("notes.md", "text/markdown", text="# Notes ü")
        assert created.size == len("# Notes ü".encode())
        assert created.ref.artifact_id == created.artifact_id
        meta = await api.artifacts_metadata(created.artifact_id)
        assert (meta.name, meta.sha256) == ("notes.md", created.sha256)
        chunk = await api.artifacts_read(created.artifact_id)
        assert (chunk.encoding, chunk.data, chunk.eof) == ("utf-8", "# Notes ü", True)
        binary = await api.artifacts_create("b.bin", "application/octet-stream", content=b"\x00\x01\xff")
        part = await api.artifacts_read(binary.artifact_id, offset=1, length=1)
        assert (part.encoding, part.content(), part.eof) == ("base64", b"\x01", False)
        assert await api.artifacts_read_all(binary.artifact_id) == b"\x00\x01\xff"

        assert not (await api.state_get("conversation", "turns")).found
        written = await api.state_set("conversation", "turns", {"n": 2})
        assert written.size > 0
        got = await api.state_get("conversation", "turns")
        assert (got.found, got.value) == (True, {"n": 2})
        listed = await api.state_list("conversation", prefix="tu")
        assert [(i.key, i.value) for i in listed.items] == [("turns", {"n": 2})]
        assert (await api.state_delete("conversation", "turns")).deleted
        assert not (await api.state_delete("conversation", "turns")).deleted

        await api.storage_set("plugin", "cache", b"\x00blob")
        stored = await api.storage_get("plugin", "cache")
        assert (stored.found, stored.value()) == (True, b"\x00blob")
        keys = await api.storage_list("plugin")
        assert [(i.key, i.size) for i in keys.items] == [("cache", 5)]
        assert (await api.storage_delete("plugin", "cache")).deleted
        assert (await api.storage_get("plugin", "cache")).value() is None

        bases = await api.knowledge_list()
        assert [(b.kb_id, b.name) for b in bases] == [("kb-docs", "Docs")]

        tools = {t.name: t for t in await api.list_tools()}
        assert {"history_page", "state_set", "search__find"} <= set(tools)
        assert tools["history_page"].input_schema["properties"]["limit"]["maximum"] == 100
        found = await api.call_tool("search__find", {"q": "tart"})
        assert (found.text, found.structured_content) == ("found tart", {"hits": ["tart"]})
        facts = await api.call_tool("state_get", {"scope": "conversation", "key": "x"})
        assert facts.structured_content is not None
        assert facts.structured_content["found"] is False

    audit = await served.audit(run)
    assert {r.tool for r in audit} >= {"history_page", "knowledge_list", "search__find", "storage_set"}


async def test_tool_errors_surface_as_run_api_errors_with_their_code(served: Served) -> None:
    run = await served.start_run(agent={"state": {"scopes": ["conversation"], "write": True}})
    async with RunAPI(access(run)) as api:
        with pytest.raises(RunAPIError) as refused:
            await api.state_set("actor", "likes", "tea")
        assert (refused.value.code, refused.value.tool) == ("unauthorized", "state_set")
        assert "may not write 'actor' state" in refused.value.message
        assert not refused.value.retryable

        with pytest.raises(RunAPIError) as missing:
            await api.knowledge_retrieve("kb-docs", "pie")
        assert missing.value.code == "not_found"

        with pytest.raises(RunAPIError) as bad:
            await api.history_page(limit=1000)
        assert bad.value.code == "invalid_argument"
        assert str(bad.value).startswith("invalid_argument: ")

        with pytest.raises(RunAPIError) as upstream:
            await api.call_tool("search__broken", {"q": "x"})
        assert (upstream.value.code, upstream.value.message) == ("runtime_error", "index offline")

        # A failed call does not break the connection.
        assert (await api.state_get("conversation", "k")).found is False


@pytest.mark.parametrize("mode", MODES)
async def test_a_finished_runs_token_is_refused_as_unauthorized(served: Served, mode: str) -> None:
    run = await served.start_run()
    async with RunAPI(access(run), mode=mode) as api:
        await api.state_get("conversation", "k")
        await served.finish(run)
        with pytest.raises(RunAPIError) as refused:
            await api.state_get("conversation", "k")
    assert refused.value.code == "unauthorized"
    assert run.token not in str(refused.value)


async def test_a_run_that_never_started_connecting_after_its_end_is_unavailable(served: Served) -> None:
    run = await served.start_run()
    await served.finish(run)
    async with RunAPI(access(run), mode="legacy") as api:
        with pytest.raises(RunAPIError) as refused:
            await api.history_page()
    assert refused.value.code == "runner.mcp_unavailable"
    assert f"run {run.run_id} is not active" in refused.value.message
    assert run.token not in refused.value.message


async def test_an_unreachable_server_or_no_access_is_mcp_unavailable() -> None:
    gone = MCPAccess(url="http://127.0.0.1:9/runs/run_x/mcp", headers={"Authorization": "Bearer secret"})
    async with RunAPI(gone) as api:
        with pytest.raises(RunAPIError) as first:
            await api.state_get("conversation", "k")
        with pytest.raises(RunAPIError) as second:  # the failure is remembered, not retried
            await api.history_page()
    assert first.value.code == "runner.mcp_unavailable"
    assert first.value.retryable
    assert second.value is first.value
    assert "secret" not in str(first.value)
    async with RunAPI(None) as api:
        assert not api.available
        with pytest.raises(RunAPIError) as none:
            await api.list_tools()
    assert none.value.code == "runner.mcp_unavailable"


async def test_a_call_slower_than_the_timeout_is_deadline_exceeded(served: Served) -> None:
    run = await served.start_run()
    async with RunAPI(access(run), timeout_s=0.5) as api:
        with pytest.raises(RunAPIError) as slow:
            await api.call_tool("search__slow", {"q": "x"})
    assert (slow.value.code, slow.value.retryable) == ("deadline_exceeded", True)


async def test_the_connection_opened_from_a_child_task_closes_with_the_run(served: Served) -> None:
    run = await served.start_run()
    async with RunAPI(access(run), mode="legacy") as api:
        async with anyio.create_task_group() as tg:  # the first call comes from another task
            for key in ("a", "b", "c"):
                tg.start_soon(api.state_set, "conversation", key, key)
        assert served.facts.open_sessions(run.run_id) == 1  # one connection for the whole run
        assert len((await api.state_list("conversation")).items) == 3
    assert served.facts.open_sessions(run.run_id) == 0  # closed (DELETE) when the run's API ends
    with pytest.raises(RunAPIError) as closed:
        await api.state_get("conversation", "a")
    assert closed.value.code == "runner.mcp_unavailable"


async def test_an_exception_in_the_body_propagates_unwrapped(served: Served) -> None:
    run = await served.start_run()

    async def body() -> None:
        async with RunAPI(access(run)) as api:
            await api.state_get("conversation", "k")
            raise KeyError("boom")

    with pytest.raises(KeyError):
        await body()


async def test_artifacts_create_needs_exactly_one_content() -> None:
    async with RunAPI(None) as api:
        with pytest.raises(ValueError, match="exactly one"):
            await api.artifacts_create("a", "text/plain", text="x", content=b"x")
