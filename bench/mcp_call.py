"""mcp-call: one `history_page` call through a run's `/runs/{run_id}/mcp` versus a bare SDK server.

Subject: a real host (`bench_host` with the hold runner) serving its app the way `mcphost run` does
(`serve_locally`): a run of the hold runner is active in a conversation of 1,000 transcript items, and
the SDK's `Client` calls `history_page {limit: 50}` on the run's endpoint with its bearer token (Host
check, token check, grant check, rate limit, audit, the page, the result shape). Baseline: a bare
`mcp` `MCPServer` in this same process and event loop, under uvicorn on its own port, whose
`history_page` tool runs the same store query on a conversation of the same size and returns the same
answer model (`HistoryPage`), so it declares the same `outputSchema` and the SDK client validates the
same structured content against the same schema on both sides (a bare tool returning a plain dict
declares `{"type": "object"}`, and the client's schema check of 50 items alone then made up most of the
difference). Both protocol eras: the 2025-11-25 handshake era (a session) and the stateless 2026-07-28 era.

Bridge: the same call on the same run through `mcphost-bridge` (the stdio ⇄ HTTP relay a stdio MCP
client launches, started from the run context's `bridge` command) versus the SDK client over HTTP
directly.

Calls alternate one by one between baseline and subject (ABBA), in blocks: each block opens fresh
clients (untimed) on a fresh run, because a run may make 50 calls/s (bursts of 100), a policy the
benchmark stays under rather than measures. Each block starts with `WARMUP_CALLS` untimed calls per
side. Targets: host ≤ 1.3x the bare SDK; bridge ≤ 1.5x direct HTTP.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncGenerator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, cast

import anyio
import httpx2
import uvicorn
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult
from starlette.types import ASGIApp

from bench._alternate import Samples, interleave
from bench._bulk import TRANSCRIPT_COLUMNS, load, transcript_rows
from bench._config import BenchConfig
from bench._databases import Workspace, workspace
from bench._host import bench_host, message
from bench._stats import Row, Stat, judge
from mcphost.app import Host
from mcphost.protocol import AgentRunContext
from mcphost.protocol.facts import HistoryPage, TranscriptItem
from mcphost.stores import Stores, TranscriptRecord, open_stores

NAME = "mcp-call"
LEGACY = "legacy"
MODERN = "2026-07-28"
ERA_NAMES = {LEGACY: "2025-11-25 (session)", MODERN: "2026-07-28 (stateless)"}
HISTORY_ROWS = 1000
WARMUP_CALLS = 3
PAGE = 50
TARGET_SDK = 1.3
TARGET_BRIDGE = 1.5
HOLD_S = 600.0
BARE_CONVERSATION = "mcp-bare"


def _serve_available() -> str | None:
    """Why the host cannot serve its MCP endpoint in this build, or None when it can."""
    try:
        from mcphost import serving

        if not hasattr(serving, "serve_locally") or not hasattr(Host, "__dataclass_fields__"):
            return "mcphost.serving has no serve_locally"
        if "facts" not in Host.__dataclass_fields__:
            return "the host has no facts server"
    except ImportError as exc:
        return f"mcphost.serving does not import: {exc}"
    return None


def _item(record: TranscriptRecord) -> TranscriptItem:
    """What the facts tool returns per item, built the plain way."""
    return TranscriptItem(
        cursor=record.cursor,
        item_id=record.item_id,
        role=record.role,
        content=record.content[:4000],
        truncated=len(record.content) > 4000,
        contents=[c for c in record.contents if c.get("type") == "text"],
        contents_error=None,
        artifacts=[],
        artifact_count=len(record.artifacts),
        event_id=record.event_id,
        run_id=record.run_id,
        actor_id=record.actor_id,
        created_at=record.created_at,
    )


def bare_server(stores: Stores) -> MCPServer:
    """A bare SDK server with the same `history_page` query, answer model and output schema as the facts
    tool."""
    server = MCPServer("bare", log_level="WARNING")  # it configures root logging: keep it quiet

    @server.tool()
    async def history_page(  # pyright: ignore[reportUnusedFunction]  # registered by the decorator
        before_cursor: str | None = None,
        after_cursor: str | None = None,
        limit: int = PAGE,
        include_artifacts: bool = False,
    ) -> HistoryPage:
        """A page of the conversation's history, newest first."""
        page = await stores.transcript.page(
            BARE_CONVERSATION, before=before_cursor, after=after_cursor, limit=limit
        )
        return HistoryPage(
            items=[_item(r) for r in page.items],
            next_cursor=page.next_cursor,
            prev_cursor=page.prev_cursor,
            has_more=page.has_more,
        )

    return server


def _tcp_socket() -> socket.socket:
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP (see the report
    # on `bind_socket`, now `mcphost.serving.bind_socket`, in bench/README.md).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@asynccontextmanager
async def serve_asgi(app: ASGIApp, *, lifespan: bool) -> AsyncGenerator[str, None]:
    """`app` under uvicorn on a free loopback port in this event loop; yields its base URL."""
    sock = _tcp_socket()
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on" if lifespan else "off", ws="none")
    server = uvicorn.Server(config)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            with anyio.fail_after(10):
                while True:
                    if server.started:
                        break
                    await anyio.sleep(0.01)
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                server.should_exit = True
    finally:
        sock.close()


@asynccontextmanager
async def http_client(
    url: str, mode: str, headers: dict[str, str] | None = None
) -> AsyncGenerator[Client, None]:
    async with (
        httpx2.AsyncClient(headers=headers or {}, timeout=httpx2.Timeout(30, read=60)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


@asynccontextmanager
async def bridge_client(ctx: AgentRunContext, mode: str) -> AsyncGenerator[Client, None]:
    mcp = ctx.context.mcp
    assert mcp is not None
    command, *args = mcp.bridge.command
    params = StdioServerParameters(command=command, args=args, env=dict(mcp.bridge.env))
    async with Client(stdio_client(params), mode=mode) as client:
        yield client


async def call_page(client: Client) -> CallToolResult:
    result = await client.call_tool("history_page", {"limit": PAGE})
    structured: object = result.structured_content
    if result.is_error or not isinstance(structured, dict):
        raise RuntimeError(f"history_page failed: {result.content!r}")
    items = cast(dict[str, object], structured).get("items")
    if not isinstance(items, list) or len(cast(list[object], items)) != PAGE:
        raise RuntimeError(f"history_page returned {items!r:.200}")
    return result


@dataclass
class _Runs:
    """Hold runs, one per round, each in its own conversation of `HISTORY_ROWS` items."""

    host: Host
    conversations: Iterator[str]

    async def start(self) -> AgentRunContext:
        admission = await self.host.orchestrator.submit(
            message(str(HOLD_S), next(self.conversations), bot="hold")
        )
        run_id = admission.run.run_id
        with anyio.fail_after(30):
            while True:
                ctx = await self.host.orchestrator.context(run_id)
                if ctx is not None:
                    return ctx
                await anyio.sleep(0.005)

    async def end(self, ctx: AgentRunContext) -> None:
        await self.host.orchestrator.cancel(ctx.run_id, reason="benchmark round over")


def _conversation_names(count: int) -> list[str]:
    return [f"mcp-{i}" for i in range(count)]


async def _seed(ws: Workspace, conversations: list[str]) -> None:
    async with open_stores(ws.database_url, ws.data_dir):
        pass  # migrate

    def rows() -> Iterator[tuple[Any, ...]]:
        for i, conv in enumerate([BARE_CONVERSATION, *conversations]):
            yield from transcript_rows(conv, HISTORY_ROWS, prefix=f"m{i}")

    await load(ws.database_url, "transcript", TRANSCRIPT_COLUMNS, rows())


async def run(cfg: BenchConfig) -> list[Row]:
    reason = _serve_available()
    if reason is not None:
        cfg.skipped.append(f"mcp-call: {reason}")
        return []
    from mcphost.serving import serve_locally

    sizes = cfg.sizes
    rounds, calls = sizes.mcp_rounds, sizes.mcp_calls
    per_case = rounds
    cases = 5  # (facts, bridge) x (two eras), and the TCP_NODELAY diagnostic
    rows: list[Row] = []
    async with workspace("sqlite", cfg.tmp_root) as ws:
        names = _conversation_names(per_case * cases)
        await _seed(ws, names)
        async with (
            bench_host(ws, hold=True, max_concurrent_runs=16) as host,
            serve_locally(host),
            serve_asgi(bare_server(host.stores).streamable_http_app(), lifespan=True) as bare_url,
        ):
            runs = _Runs(host, iter(names))
            for mode in (LEGACY, MODERN):
                rows.append(await _versus_sdk(runs, bare_url, mode, rounds, calls))
            nodelay = await _nodelay_row(host, runs, bare_url, rounds, calls)
            if nodelay is not None:
                rows.append(nodelay)
            for mode in (LEGACY, MODERN):
                rows.append(await _bridge_versus_direct(runs, mode, rounds, calls))
    return rows


async def _versus_sdk(runs: _Runs, bare_url: str, mode: str, rounds: int, calls: int) -> Row:
    samples = Samples([], [], 0)
    for _ in range(rounds):
        ctx = await runs.start()
        mcp = ctx.context.mcp
        assert mcp is not None
        try:
            async with (
                http_client(f"{bare_url}/mcp", mode) as bare,
                http_client(mcp.url, mode, dict(mcp.headers)) as hosted,
            ):
                for _ in range(WARMUP_CALLS):  # connections open and caches warm before timing starts
                    await call_page(bare)
                    await call_page(hosted)
                await interleave(
                    lambda: call_page(bare),
                    lambda: call_page(hosted),
                    calls,
                    samples,
                )
        finally:
            await runs.end(ctx)
    row = Row(
        benchmark=NAME,
        case=f"history_page, {ERA_NAMES[mode]}",
        baseline_label="bare MCPServer, same query",
        subject_label="/runs/{id}/mcp on the host",
        baseline=Stat.of(samples.baseline, "ms"),
        subject=Stat.of(samples.subject, "ms"),
        target=f"≤ {TARGET_SDK:g}x bare SDK",
    )
    return _judged(row, TARGET_SDK)


async def _nodelay_row(host: Host, runs: _Runs, bare_url: str, rounds: int, calls: int) -> Row | None:
    """The 2026-07-28 row again with the host's app served on an `IPPROTO_TCP` socket (so asyncio sets
    TCP_NODELAY on its connections), when the host's own listening socket is not one: what fixing
    `mcphost.serving.bind_socket` would give. None when the host's socket is already fine."""
    from mcphost import app, serving

    probe = serving.bind_socket("127.0.0.1", 0)
    with probe:
        if probe.proto == socket.IPPROTO_TCP:
            return None
    sock = _tcp_socket()
    with sock:
        async with serving.serve_http(app.build_app(host), sock) as url:
            previous = host.orchestrator.public_url
            host.orchestrator.public_url = url
            try:
                row = await _versus_sdk(runs, bare_url, MODERN, rounds, calls)
            finally:
                host.orchestrator.public_url = previous
    return replace(
        row,
        case=f"{row.case}, host app on a TCP_NODELAY socket",
        extra={"note": "diagnostic: the host's app served on an IPPROTO_TCP socket (see README)"},
    )


async def _bridge_versus_direct(runs: _Runs, mode: str, rounds: int, calls: int) -> Row:
    samples = Samples([], [], 0)
    for _ in range(rounds):
        ctx = await runs.start()
        mcp = ctx.context.mcp
        assert mcp is not None
        try:
            async with (
                http_client(mcp.url, mode, dict(mcp.headers)) as direct,
                bridge_client(ctx, mode) as bridged,
            ):
                for _ in range(WARMUP_CALLS):
                    await call_page(direct)
                    await call_page(bridged)
                await interleave(
                    lambda: call_page(direct),
                    lambda: call_page(bridged),
                    calls,
                    samples,
                )
        finally:
            await runs.end(ctx)
    row = Row(
        benchmark=NAME,
        case=f"bridge, {ERA_NAMES[mode]}",
        baseline_label="direct HTTP to the run",
        subject_label="via mcphost-bridge (stdio)",
        baseline=Stat.of(samples.baseline, "ms"),
        subject=Stat.of(samples.subject, "ms"),
        target=f"≤ {TARGET_BRIDGE:g}x direct",
    )
    return _judged(row, TARGET_BRIDGE)


def _judged(row: Row, target: float) -> Row:
    ratio = row.ratio
    return replace(row, verdict=judge(ratio is not None and ratio <= target))
