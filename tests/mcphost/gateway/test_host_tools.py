"""The tool gateway against real upstream MCP servers: a stdio subprocess and a Streamable HTTP server.

Covers grant filtering, proxied results (text, structured, image, tool errors), a crashing upstream, a
hanging one, garbage, a huge result that becomes an artifact, reconnecting after the upstream restarts,
`${ENV}` headers that never reach the event log, and `tools/list_changed`.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from anyio.abc import Process

from mcphost.config import ToolServerConfig
from mcphost.errors import (
    ConfigError,
    DeadlineExceededError,
    HostError,
    InvalidArgumentError,
    NotFoundError,
    UnauthorizedError,
)
from mcphost.gateway.host_tools import (
    TELEMETRY_EVENT,
    Gateway,
    UpstreamError,
    UpstreamState,
    expand_env,
    host_name,
)
from mcphost.models import RunGrant, new_id
from mcphost.stores import Stores

FAKES = Path(__file__).resolve().parents[2] / "fakes"
UPSTREAM = str(FAKES / "upstream_tools.py")
GARBAGE = str(FAKES / "upstream_garbage.py")
TOKEN = "s3cret-token-value"


def grant(*globs: str, deadline_in: float = 300.0, conversation_id: str | None = "conv-1") -> RunGrant:
    return RunGrant(
        run_id=new_id("run"),
        runner_id="plugin:acme/bot/default",
        plugin="acme/bot",
        binding_id="agent",
        conversation_id=conversation_id,
        thread_id=None,
        actor_id=None,
        subject_type=None,
        subject_id=None,
        bot_id=None,
        workspace_id=None,
        tools=frozenset(),
        host_tool_globs=globs,
        deadline_at=time.time() + deadline_in,
        token_hash="0" * 64,
    )


def stdio(timeout_s: float = 10.0) -> ToolServerConfig:
    return ToolServerConfig(command=[sys.executable, UPSTREAM, "stdio"], timeout_s=timeout_s)


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@asynccontextmanager
async def gateway(
    servers: Mapping[str, ToolServerConfig],
    stores: Stores | None = None,
    environ: Mapping[str, str] | None = None,
    **options: float,
) -> AsyncGenerator[Gateway]:
    gw = Gateway(
        servers,
        stores=stores,
        environ=environ or {},
        backoff_initial_s=options.pop("backoff_initial_s", 0.05),
        backoff_max_s=options.pop("backoff_max_s", 0.2),
        **options,  # pyright: ignore[reportArgumentType]
    )
    async with gw.running():
        yield gw


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class HttpUpstream:
    port: int
    token: str | None
    process: Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self) -> None:
        args = [sys.executable, UPSTREAM, "http", str(self.port)] + ([self.token] if self.token else [])
        self.process = await anyio.open_process(args)
        with anyio.fail_after(20):
            while True:
                try:
                    stream = await anyio.connect_tcp("127.0.0.1", self.port)
                except OSError:
                    await anyio.sleep(0.05)
                    continue
                await stream.aclose()
                return

    async def stop(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):  # it may have exited by itself (the crash tool)
                self.process.kill()
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self.process.wait()
            for stream in (self.process.stdout, self.process.stderr, self.process.stdin):
                if stream is not None:
                    await stream.aclose()
            self.process = None


@pytest.fixture
async def http_upstream() -> AsyncIterator[HttpUpstream]:
    upstream = HttpUpstream(free_port(), TOKEN)
    await upstream.start()
    try:
        yield upstream
    finally:
        await upstream.stop()


def http(upstream: HttpUpstream, timeout_s: float = 10.0) -> ToolServerConfig:
    return ToolServerConfig(url=upstream.url, headers={"x-token": "${FAKE_TOKEN}"}, timeout_s=timeout_s)


# -- listing -------------------------------------------------------------------------------------------------


async def test_tools_are_exposed_as_server__tool_and_filtered_by_the_grant_globs() -> None:
    async with gateway({"fake": stdio(), "other": stdio()}) as gw:
        everything = {t.name for t in await gw.list_tools(grant("fake__*"))}
        assert {"fake__echo", "fake__forecast", "fake__get_time", "fake__hang"} <= everything
        assert not any(name.startswith("other__") for name in everything)
        assert gw.upstreams["other"].state is UpstreamState.IDLE  # never needed, never started
        assert [t.name for t in await gw.list_tools(grant("fake__echo", "fake__pi*"))] == [
            "fake__echo",
            "fake__picture",
            "fake__pid",
        ]
        assert await gw.list_tools(grant()) == []
        assert await gw.list_tools(grant("nothing__*")) == []
        echo = next(t for t in await gw.list_tools(grant("fake__echo")))
        assert echo.description == "Repeat the text back."
        assert echo.input_schema["properties"]["text"]["type"] == "string"
        forecast = (await gw.list_tools(grant("fake__forecast")))[0]
        assert forecast.output_schema is None


def test_host_names_replace_unsafe_characters() -> None:
    assert host_name("fs", "read.file") == "fs__read_file"
    assert host_name("fs", "a b/c") == "fs__a_b_c"


def test_server_names_cannot_hold_the_separator() -> None:
    with pytest.raises(ConfigError, match="single '_'"):
        Gateway({"bad__name": stdio()})
    with pytest.raises(ConfigError):
        Gateway({"trailing_": stdio()})


# -- calls ---------------------------------------------------------------------------------------------------


async def test_text_structured_image_and_error_results_pass_through() -> None:
    g = grant("fake__*")
    async with gateway({"fake": stdio()}) as gw:
        assert text_of(await gw.call_tool(g, "fake__echo", {"text": "hi"})) == "hi"
        assert text_of(await gw.call_tool(g, "fake__get_time", {})) == "12:00"
        forecast = await gw.call_tool(g, "fake__forecast", {"city": "Oslo"})
        assert forecast.structured_content == {
            "city": "Oslo",
            "temperature_c": 21.5,
            "summary": "Sunny in Oslo",
        }
        picture = await gw.call_tool(g, "fake__picture", {})
        image = picture.content[0]
        assert isinstance(image, types.ImageContent)
        assert image.mime_type == "image/png"
        failed = await gw.call_tool(g, "fake__fail", {"reason": "nope"})
        assert failed.is_error
        assert "nope" in text_of(failed)


async def test_calls_outside_the_grant_or_the_catalog_are_refused() -> None:
    async with gateway({"fake": stdio()}) as gw:
        with pytest.raises(UnauthorizedError):
            await gw.call_tool(grant("fake__echo"), "fake__pid", {})
        with pytest.raises(NotFoundError, match="no tool"):
            await gw.call_tool(grant("fake__*"), "fake__missing", {})
        with pytest.raises(NotFoundError, match="no tool server"):
            await gw.call_tool(grant("*"), "ghost__echo", {})
        bad = await gw.call_tool(grant("fake__*"), "fake__echo", {"text": {"not": "text"}})
        assert bad.is_error  # the upstream's own argument check, passed through


async def test_a_crashing_upstream_is_a_tool_error_and_the_next_call_reconnects() -> None:
    g = grant("fake__*")
    async with gateway({"fake": stdio()}) as gw:
        first = (await gw.call_tool(g, "fake__pid", {})).structured_content
        with pytest.raises(UpstreamError) as crashed:
            await gw.call_tool(g, "fake__crash", {})
        assert crashed.value.code == "runtime_error"
        assert "closed the connection" in crashed.value.message
        second = (await gw.call_tool(g, "fake__pid", {})).structured_content
        assert second != first
        assert gw.upstreams["fake"].connects == 2


async def test_a_hanging_upstream_times_out_and_other_calls_go_on() -> None:
    g = grant("fake__*")
    async with gateway({"fake": stdio(timeout_s=1.0)}) as gw:
        await gw.catalog()  # connected: the timing below is the call's alone
        started = time.monotonic()
        hung: list[BaseException] = []
        async with anyio.create_task_group() as tg:

            async def call_hang() -> None:
                try:
                    await gw.call_tool(g, "fake__hang", {})
                except DeadlineExceededError as exc:
                    hung.append(exc)

            tg.start_soon(call_hang)
            await anyio.sleep(0.2)
            assert text_of(await gw.call_tool(g, "fake__echo", {"text": "still here"})) == "still here"
        assert len(hung) == 1
        assert 0.9 < time.monotonic() - started < 5
        assert text_of(await gw.call_tool(g, "fake__echo", {"text": "after"})) == "after"


async def test_a_call_never_outlives_the_run_deadline() -> None:
    async with gateway({"fake": stdio(timeout_s=30.0)}) as gw:
        await gw.list_tools(grant("fake__*"))
        started = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            await gw.call_tool(grant("fake__*", deadline_in=0.5), "fake__hang", {})
        assert time.monotonic() - started < 3
        with pytest.raises(DeadlineExceededError, match="deadline"):
            await gw.call_tool(grant("fake__*", deadline_in=-1), "fake__echo", {"text": "x"})


async def test_garbage_from_an_upstream_is_a_tool_error() -> None:
    servers = {"junk": ToolServerConfig(command=[sys.executable, GARBAGE], timeout_s=1.0)}
    g = grant("junk__*")
    async with gateway(servers) as gw:
        assert sorted(t.name for t in await gw.list_tools(g)) == [
            "junk__abyss",
            "junk__deep",
            "junk__noise",
            "junk__silence",
            "junk__wrong_shape",
        ]
        for tool in ("junk__noise", "junk__wrong_shape", "junk__silence"):
            with pytest.raises(HostError) as failed:
                await gw.call_tool(g, tool, {})
            assert failed.value.code in ("runtime_error", "deadline_exceeded"), tool


async def test_a_result_nested_too_deep_is_refused_and_the_server_still_answers(stores: Stores) -> None:
    servers = {"junk": ToolServerConfig(command=[sys.executable, GARBAGE], timeout_s=2.0)}
    g = grant("junk__*")
    async with gateway(servers, stores=stores) as gw:
        with pytest.raises(InvalidArgumentError, match="nest more than 64 levels deep") as deep:
            await gw.call_tool(g, "junk__deep", {})
        assert deep.value.details == {"max_depth": 64}
        with pytest.raises(HostError) as abyss:
            await gw.call_tool(g, "junk__abyss", {})
        assert abyss.value.code in ("runtime_error", "deadline_exceeded", "invalid_argument")
        events = await stores.events.for_run(g.run_id, limit=10)
        assert [e.payload["outcome"] for e in events] == ["invalid_argument", abyss.value.code]
        # The server is still usable: a later call gets its (refused) answer again, not a hang.
        with pytest.raises(InvalidArgumentError):
            await gw.call_tool(g, "junk__deep", {})


async def test_a_server_that_is_down_is_left_out_and_calls_fail_fast() -> None:
    dead = ToolServerConfig(url=f"http://127.0.0.1:{free_port()}/mcp", timeout_s=60.0)
    servers = {"dead": dead, "fake": stdio(), "nocmd": ToolServerConfig(command=["/nonexistent/binary"])}
    async with gateway(servers, backoff_initial_s=30.0, backoff_max_s=60.0) as gw:
        names = {t.name for t in await gw.list_tools(grant("*"))}
        assert "fake__echo" in names
        assert not any(n.startswith(("dead__", "nocmd__")) for n in names)
        for server in ("dead", "nocmd"):
            started = time.monotonic()
            with pytest.raises(UpstreamError, match="unavailable") as down:
                await gw.call_tool(grant("*"), f"{server}__echo", {"text": "x"})
            assert time.monotonic() - started < 20  # not the 60 s call timeout: it does not wait
            assert down.value.code == "runtime_error"
            assert gw.upstreams[server].state is UpstreamState.BACKOFF
        statuses = {s.server: s for s in gw.status()}
        assert statuses["dead"].last_error
        assert statuses["fake"].state is UpstreamState.READY


# -- HTTP ----------------------------------------------------------------------------------------------------


async def test_http_upstream_with_env_headers(http_upstream: HttpUpstream) -> None:
    g = grant("web__*")
    async with gateway({"web": http(http_upstream)}, environ={"FAKE_TOKEN": TOKEN}) as gw:
        assert text_of(await gw.call_tool(g, "web__echo", {"text": "over http"})) == "over http"
        assert text_of(await gw.call_tool(g, "web__whoami", {})) == TOKEN
        forecast = await gw.call_tool(g, "web__forecast", {"city": "Rome"})
        assert forecast.structured_content is not None
        assert forecast.structured_content["city"] == "Rome"


async def test_a_missing_header_variable_names_the_variable_not_a_value(http_upstream: HttpUpstream) -> None:
    async with gateway({"web": http(http_upstream)}, environ={}) as gw:
        with pytest.raises(UpstreamError, match=r"\$\{FAKE_TOKEN\}, which is not set"):
            await gw.call_tool(grant("web__*"), "web__echo", {"text": "x"})
    async with gateway({"web": http(http_upstream)}, environ={"FAKE_TOKEN": "wrong"}) as gw:
        with pytest.raises(UpstreamError) as refused:
            await gw.call_tool(grant("web__*"), "web__echo", {"text": "x"})
        assert "wrong" not in refused.value.message


def test_env_references_expand_from_the_given_environment() -> None:
    assert expand_env("Bearer ${A}-${B_2}", {"A": "x", "B_2": "y"}, where="h") == "Bearer x-y"
    assert expand_env("no refs $A {B}", {}, where="h") == "no refs $A {B}"
    with pytest.raises(ConfigError, match=r"h references \$\{MISSING\}"):
        expand_env("${MISSING}", {}, where="h")


async def test_reconnect_after_the_http_upstream_restarts(http_upstream: HttpUpstream) -> None:
    g = grant("web__*")
    async with gateway({"web": http(http_upstream)}, environ={"FAKE_TOKEN": TOKEN}) as gw:
        before = (await gw.call_tool(g, "web__pid", {})).structured_content
        await http_upstream.stop()
        with pytest.raises(HostError) as down:
            await gw.call_tool(g, "web__pid", {})
        assert down.value.code == "runtime_error"
        await http_upstream.start()
        after = await _eventually(gw, g, "web__pid")
        assert after.structured_content != before


async def test_reconnect_after_the_stdio_upstream_is_killed() -> None:
    g = grant("fake__*")
    async with gateway({"fake": stdio()}) as gw:
        result = (await gw.call_tool(g, "fake__pid", {})).structured_content
        assert result is not None
        import os
        import signal

        os.kill(int(result["result"]), signal.SIGKILL)
        after = await _eventually(gw, g, "fake__pid")
        assert after.structured_content != result


async def _eventually(gw: Gateway, g: RunGrant, tool: str) -> types.CallToolResult:
    """Call until the gateway has reconnected (it backs off between attempts)."""
    with anyio.fail_after(20):
        while True:
            try:
                return await gw.call_tool(g, tool, {})
            except UpstreamError:
                await anyio.sleep(0.05)


async def test_a_tool_list_change_is_picked_up(http_upstream: HttpUpstream) -> None:
    g = grant("web__*")
    async with gateway({"web": http(http_upstream)}, environ={"FAKE_TOKEN": TOKEN}) as gw:
        assert "web__late" not in {t.name for t in await gw.list_tools(g)}
        await gw.call_tool(g, "web__grow", {"name": "late"})
        with anyio.fail_after(10):
            while "web__late" not in {t.name for t in await gw.list_tools(g)}:  # noqa: ASYNC110
                await anyio.sleep(0.05)  # the notification arrives on its own; there is nothing to wait on
        assert text_of(await gw.call_tool(g, "web__late", {})) == "I am late"


# -- artifacts and telemetry (on both databases) -------------------------------------------------------------


async def test_a_huge_result_becomes_an_artifact_of_the_run(stores: Stores) -> None:
    g = grant("fake__*")
    async with gateway({"fake": stdio()}, stores=stores) as gw:
        result = await gw.call_tool(g, "fake__huge", {"kilobytes": 200})
    assert not result.is_error
    structured = result.structured_content
    assert structured is not None
    artifact = structured["artifact"]
    assert structured["truncated"] is True
    assert structured["result_bytes"] > 200 * 1024
    record = await stores.artifacts.get(artifact["artifact_id"])
    assert record.owner_run_id == g.run_id
    assert record.size == 200 * 1024
    assert record.mime_type.startswith("text/plain")
    data = await stores.artifacts.read(artifact["artifact_id"])
    assert data.startswith(b"The quick brown fox")
    assert "artifacts_read" in text_of(result)
    assert len(result.model_dump_json()) < 16 * 1024
    link = result.content[1]
    assert isinstance(link, types.ResourceLink)
    assert str(link.uri) == f"mcphost://artifacts/{artifact['artifact_id']}"


async def test_every_call_leaves_a_telemetry_event_without_secrets(
    stores: Stores, http_upstream: HttpUpstream
) -> None:
    g = grant("web__*")
    async with gateway({"web": http(http_upstream)}, stores=stores, environ={"FAKE_TOKEN": TOKEN}) as gw:
        await gw.call_tool(g, "web__echo", {"text": "a"})
        await gw.call_tool(g, "web__fail", {})
        with pytest.raises(NotFoundError):
            await gw.call_tool(g, "web__missing", {})
    events = [e for e in await stores.events.for_run(g.run_id) if e.event_type == TELEMETRY_EVENT]
    assert [(e.payload["tool_name"], e.payload["outcome"]) for e in events] == [
        ("web__echo", "ok"),
        ("web__fail", "error"),
        ("web__missing", "not_found"),
    ]
    assert all(e.kind == "telemetry" and e.conversation_id == "conv-1" for e in events)
    assert all(isinstance(e.payload["upstream_ms"], float) for e in events)
    assert events[0].payload["server"] == "web"
    assert TOKEN not in json.dumps([e.payload for e in await stores.events.for_run(g.run_id)])


async def test_catalog_reports_status_and_tools_of_every_server() -> None:
    servers = {"fake": stdio(), "dead": ToolServerConfig(command=["/nonexistent/binary"])}
    async with gateway(servers) as gw:
        statuses = {s.server: s for s in await gw.catalog(timeout=10)}
    assert statuses["fake"].state is UpstreamState.READY
    assert {"fake__echo", "fake__get_time"} <= {t.name for t in statuses["fake"].tools}
    assert next(t for t in statuses["fake"].tools if t.name == "fake__get_time").tool == "get.time"
    assert statuses["dead"].state is UpstreamState.BACKOFF
    assert statuses["dead"].last_error
    assert statuses["dead"].transport == "stdio"
