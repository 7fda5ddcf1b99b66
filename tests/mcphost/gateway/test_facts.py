"""Host tools and knowledge through the real per-run MCP server: a real facts server, real runs and grants,
the SDK client, the gateway in front of real upstream servers (stdio and HTTP) and knowledge bases on
real files — on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import mcp_types as types
import pytest

from mcphost.config import KnowledgeBaseConfig, ToolServerConfig
from mcphost.gateway.host_tools import Gateway
from mcphost.knowledge.bases import KnowledgeBases
from mcphost.stores import Stores
from tests.mcphost.facts._helpers import RunHandle, Served, connect, fails, ok, serve_facts
from tests.mcphost.gateway.test_host_tools import TOKEN, UPSTREAM, HttpUpstream, free_port

GRANTED = ["up__echo", "up__huge", "up__hang", "up__crash", "up__pid", "up__forecast"]


@asynccontextmanager
async def host(
    stores: Stores, upstream: ToolServerConfig, kb_root: Path | None = None
) -> AsyncGenerator[tuple[Served, Gateway]]:
    gateway = Gateway(
        {"up": upstream},
        stores=stores,
        environ={"FAKE_TOKEN": TOKEN},
        backoff_initial_s=0.05,
        backoff_max_s=0.2,
    )
    knowledge = None
    if kb_root is not None:
        configs = {
            "kb-docs": KnowledgeBaseConfig(name="Docs", paths=["docs"]),
            "kb-secret": KnowledgeBaseConfig(name="Secret", paths=["secret"]),
        }
        knowledge = KnowledgeBases(stores.db, configs, base_dir=kb_root)
        await knowledge.ingest("kb-docs")
        await knowledge.ingest("kb-secret")
    async with gateway.running(), serve_facts(stores, host_tools=gateway, knowledge=knowledge) as served:
        yield served, gateway


UPSTREAM_TIMEOUT_S = 5.0
"""Per-call upstream timeout: long enough for a stdio upstream's lazy start on a loaded 2-core machine, short
enough that the hanging-upstream test stays quick."""
HTTP_SERVERS: dict[str, HttpUpstream] = {}
"""The running HTTP upstream of each URL the `upstream` fixture handed out (to restart it)."""


async def _run(served: Served, tools: list[str], knowledge_bases: list[str] | None = None) -> RunHandle:
    resources = {
        "tools": tools,
        "knowledge_bases": ["kb-docs"] if knowledge_bases is None else knowledge_bases,
    }
    return await served.start_run(agent={"resources": resources})


@pytest.fixture(params=["stdio", "http"])
async def upstream(request: pytest.FixtureRequest) -> AsyncGenerator[ToolServerConfig]:
    if request.param == "stdio":
        yield ToolServerConfig(command=[sys.executable, UPSTREAM, "stdio"], timeout_s=UPSTREAM_TIMEOUT_S)
        return
    server = HttpUpstream(free_port(), TOKEN)
    await server.start()
    HTTP_SERVERS[server.url] = server
    try:
        yield ToolServerConfig(
            url=server.url, headers={"x-token": "${FAKE_TOKEN}"}, timeout_s=UPSTREAM_TIMEOUT_S
        )
    finally:
        await server.stop()


async def test_only_granted_host_tools_are_listed_and_callable(
    stores: Stores, upstream: ToolServerConfig
) -> None:
    async with host(stores, upstream) as (served, _):
        run = await _run(served, GRANTED)
        async with connect(served, run) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {n for n in names if n.startswith("up__")} == set(GRANTED)
            assert "up__whoami" not in names
            result = await client.call_tool("up__echo", {"text": "through the host"})
            assert not result.is_error
            block = result.content[0]
            assert isinstance(block, types.TextContent)
            assert block.text == "through the host"
            refused = await fails(client, "up__whoami")
            assert refused["code"] == "unauthorized"
            unknown = await fails(client, "up__nothing_like_it")
            assert unknown["code"] in ("unauthorized", "not_found")
        audit = await served.audit(run)
        assert [(a.tool, a.outcome, a.code) for a in audit][-2:] == [
            ("up__whoami", "refused", "unauthorized"),
            ("up__nothing_like_it", "refused", "unauthorized"),
        ]


async def test_a_run_without_tool_globs_sees_no_host_tools(stores: Stores) -> None:
    upstream = ToolServerConfig(command=[sys.executable, UPSTREAM, "stdio"])
    async with host(stores, upstream) as (served, gateway):
        run = await _run(served, [])
        async with connect(served, run) as client:
            assert not [t for t in (await client.list_tools()).tools if "__" in t.name]
            assert (await fails(client, "up__echo", {"text": "x"}))["code"] == "unauthorized"
        assert gateway.upstreams["up"].connects == 0


async def test_a_huge_result_is_an_artifact_the_run_reads_back(
    stores: Stores, upstream: ToolServerConfig
) -> None:
    async with host(stores, upstream) as (served, _):
        run = await _run(served, GRANTED)
        async with connect(served, run) as client:
            result = await client.call_tool("up__huge", {"kilobytes": 300})
            assert not result.is_error
            assert result.structured_content is not None
            artifact_id = result.structured_content["artifact"]["artifact_id"]
            data = b""
            offset = 0
            while True:
                chunk = await ok(
                    client,
                    "artifacts_read",
                    {"artifact_id": artifact_id, "offset": offset, "length": 1 << 20},
                )
                data += (
                    chunk["data"].encode()
                    if chunk["encoding"] == "utf-8"
                    else base64.b64decode(chunk["data"])
                )
                offset += chunk["length"]
                if chunk["eof"]:
                    break
            assert len(data) == 300 * 1024
            assert data.startswith(b"The quick brown fox")


async def test_a_hanging_upstream_times_out_and_the_run_continues(
    stores: Stores, upstream: ToolServerConfig
) -> None:
    async with host(stores, upstream) as (served, _):
        run = await _run(served, GRANTED)
        async with connect(served, run) as client:
            await client.call_tool("up__echo", {"text": "warm up"})
            with anyio.fail_after(10):
                timed_out = await fails(client, "up__hang")
            assert timed_out["code"] == "deadline_exceeded"
            assert (await client.call_tool("up__echo", {"text": "still alive"})).is_error is False
            assert (await ok(client, "history_page", {"limit": 1}))["items"]


async def test_a_crashing_upstream_is_a_runtime_error_and_the_host_reconnects(
    stores: Stores, upstream: ToolServerConfig
) -> None:
    async with host(stores, upstream) as (served, _):
        run = await _run(served, GRANTED)
        async with connect(served, run) as client:
            first = (await client.call_tool("up__pid", {})).structured_content
            crashed = await fails(client, "up__crash")
            assert crashed["code"] == "runtime_error"
            assert crashed["retryable"] is True
            if upstream.url is not None:  # a crashed HTTP server is restarted by its operator
                server = HTTP_SERVERS[upstream.url]
                await server.stop()
                down = await fails(client, "up__pid")
                assert down["code"] == "runtime_error"
                await server.start()
            with anyio.fail_after(20):
                while True:
                    again = await client.call_tool("up__pid", {})
                    if not again.is_error:
                        break
                    await anyio.sleep(0.05)
            assert again.structured_content != first


# -- knowledge -----------------------------------------------------------------------------------------------


@pytest.fixture
def kb_root(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    (root / "docs").mkdir(parents=True)
    (root / "secret").mkdir()
    (root / "docs" / "tea.md").write_text("# Tea\n\nGreen tea steeps at 80 degrees for two minutes.\n")
    (root / "docs" / "coffee.md").write_text(
        "---\nroast: dark\n---\n# Coffee\n\nEspresso needs fine grounds.\n"
    )
    (root / "secret" / "plans.md").write_text("# Plans\n\nThe green tea launch is secret.\n")
    return root


async def test_knowledge_is_cut_by_the_grant(stores: Stores, kb_root: Path) -> None:
    upstream = ToolServerConfig(command=[sys.executable, UPSTREAM, "stdio"])
    async with host(stores, upstream, kb_root) as (served, _):
        run = await _run(served, [])
        async with connect(served, run) as client:
            listed = await ok(client, "knowledge_list")
            assert [kb["kb_id"] for kb in listed["knowledge_bases"]] == ["kb-docs"]
            found = await ok(
                client, "knowledge_retrieve", {"kb_id": "kb-docs", "query": "green tea temperature"}
            )
            chunk = found["chunks"][0]
            assert chunk["document"] == "docs/tea.md"
            assert "80 degrees" in chunk["text"]
            assert chunk["metadata"]["heading_path"] == ["Tea"]
            assert chunk["score"] > 0
            filtered = await ok(
                client,
                "knowledge_retrieve",
                {"kb_id": "kb-docs", "query": "espresso tea", "filters": {"metadata": {"roast": "dark"}}},
            )
            assert [c["document"] for c in filtered["chunks"]] == ["docs/coffee.md"]
            bad = await fails(
                client, "knowledge_retrieve", {"kb_id": "kb-docs", "query": "x", "filters": {"x": 1}}
            )
            assert bad["code"] == "invalid_argument"
            refused = await fails(client, "knowledge_retrieve", {"kb_id": "kb-secret", "query": "green tea"})
            assert refused["code"] == "unauthorized"
        none = await _run(served, [], knowledge_bases=[])
        async with connect(served, none) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert not names & {"knowledge_list", "knowledge_retrieve"}
            assert (await fails(client, "knowledge_retrieve", {"kb_id": "kb-docs", "query": "tea"}))[
                "code"
            ] == ("unauthorized")


async def test_history_search_goes_through_the_full_text_index(stores: Stores) -> None:
    upstream = ToolServerConfig(command=[sys.executable, UPSTREAM, "stdio"])
    for text in ("we talked about the marmot", "unrelated chatter", "marmots again, two marmots"):
        await stores.transcript.append(conversation_id="conv-1", role="user", content=text)
    await stores.transcript.append(conversation_id="conv-2", role="user", content="a marmot elsewhere")
    async with host(stores, upstream) as (served, _):
        run = await _run(served, [])
        async with connect(served, run) as client:
            hits = (await ok(client, "history_search", {"query": "marmot"}))["hits"]
            assert [h["item"]["content"] for h in hits] == [
                "marmots again, two marmots",
                "we talked about the marmot",
            ]
            assert "**marmot" in hits[0]["snippet"]
            around = await ok(client, "history_page", {"before_cursor": hits[1]["item"]["cursor"]})
            assert around["items"] == []
