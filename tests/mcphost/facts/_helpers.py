"""Helpers of the facts server tests: a real facts server over real stores, real runs with real grants,
and real MCP clients (the `served` fixture is in conftest.py).

`serve_facts` runs `FactsServer.asgi_app` (`serve_endpoint`: a `FactsEndpoint`'s routes) under uvicorn on
a free 127.0.0.1 port inside the test's event loop (so the test and the server share the stores), with
`running()` entered around it. `admit_run` admits a
run the way the orchestrator does: a grant from `grants.build_grant` (manifest ∩ agent ∩ event), the run
row through `runs.admit`, the inbound event, then `runs.try_start` with the user transcript row and the
run context from `context.build_context` (stored token-free on the run, as the orchestrator does),
which the server's context provider also hands back. `connect` opens the SDK's
`Client` over Streamable HTTP with the run's bearer token, in either protocol era.
"""

from __future__ import annotations

import functools
import json
import socket
import ssl
import time
from collections.abc import AsyncGenerator, Callable, Generator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import mcp_types as types
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from sqlalchemy import select
from starlette.routing import Router
from starlette.types import ASGIApp

from mcphost.context import SNAPSHOT_SCOPES, build_context, with_token
from mcphost.facts import granted_tools
from mcphost.facts.endpoint import FactsEndpoint
from mcphost.facts.providers import ContextProvider
from mcphost.facts.server import FactsServer
from mcphost.grants import build_grant, mint_token
from mcphost.models import AgentBinding, AgentConfig, AgentEventEnvelope, Run, RunGrant, RunStatus, new_id
from mcphost.protocol import AgentRunContext, AgentRunnerManifest, JSONObject
from mcphost.serving import KEEP_ALIVE_S
from mcphost.stores import AuditRecord, ScopeSnapshot, Stores
from mcphost.stores.tables import Base
from mcphost.stores.transcript import item_values

LEGACY = "legacy"
MODERN = "2026-07-28"
ERAS = [LEGACY, MODERN]
RUNNER = "plugin:acme/bot/default"

FULL_PERMISSIONS: JSONObject = {
    "history": ["page", "search"],
    "events": ["get", "page"],
    "artifacts": ["metadata", "read", "create"],
    "state": ["read", "write"],
    "storage": ["plugin", "workspace", "binding"],
    "knowledge": ["list", "retrieve"],
    "tools": ["call"],
}
ALL_SCOPES = ["conversation", "actor", "subject", "runner", "binding", "workspace"]


@dataclass
class RunHandle:
    """A run as a runner would know it: its id, its token and its context."""

    run_id: str
    token: str
    grant: RunGrant
    event: AgentEventEnvelope
    context: AgentRunContext


async def admit_run(
    stores: Stores,
    *,
    base_url: str = "http://127.0.0.1",
    contexts: dict[str, AgentRunContext] | None = None,
    conversation_id: str | None = "conv-1",
    thread_id: str | None = None,
    actor_id: str | None = "user-1",
    workspace_id: str | None = "ws-1",
    subject: JSONObject | None = None,
    runner: str = RUNNER,
    binding_id: str = "agent-a",
    permissions: JSONObject | None = None,
    agent: JSONObject | None = None,
    text: str = "hello there",
    attachments: list[JSONObject] | None = None,
    raw_ref: str | None = None,
    timeout_s: float = 300.0,
    limits: Mapping[str, Any] | None = None,
    revise: Callable[[AgentRunContext], AgentRunContext] | None = None,
) -> RunHandle:
    """Admit (and, when its conversation allows, start) a run the way the orchestrator does; `revise`
    changes its context as it is built (e.g. `WarmSessions.offer`)."""
    event = AgentEventEnvelope.model_validate(
        {
            "event_type": "message.received",
            "conversation": None
            if conversation_id is None
            else {
                "conversation_id": conversation_id,
                "thread_id": thread_id,
                "workspace_id": workspace_id,
            },
            "actor": None if actor_id is None else {"actor_id": actor_id},
            "subject": subject,
            "input": {"text": text, "attachments": attachments or []},
            "raw_ref": raw_ref,
        }
    )
    manifest = AgentRunnerManifest.model_validate(
        {"id": runner, "name": "bot", "permissions": permissions or FULL_PERMISSIONS}
    )
    agent_config = AgentConfig.model_validate(
        {
            "id": binding_id,
            "runner": runner,
            "prompt": "You are a careful assistant.",
            "state": {"scopes": ALL_SCOPES, "write": True},
            "storage": {"areas": ["plugin", "workspace", "binding"]},
            "resources": {"knowledge_bases": ["kb-docs"], "tools": ["search__*"]},
            **(agent or {}),
        }
    )
    binding = AgentBinding(binding_id=binding_id, agent=agent_config)
    run_id = new_id("run")
    token, token_hash = mint_token()
    now = time.time()
    grant = build_grant(
        run_id=run_id,
        event=event,
        binding=binding,
        manifest=manifest,
        token_hash=token_hash,
        deadline_at=now + timeout_s,
    )
    if limits:
        grant = grant.model_copy(update=dict(limits))
    run = Run(
        run_id=run_id,
        event_id=event.event_id,
        event_type=event.event_type,
        agent_id=binding_id,
        runner_id=runner,
        conversation_id=conversation_id,
        thread_id=thread_id,
        status=RunStatus.QUEUED,
        created_at=now,
        deadline_at=grant.deadline_at,
    )
    _, created = await stores.runs.admit(run, grant=grant, concurrency="enqueue")
    assert created
    await stores.events.append(
        event_id=event.event_id,
        event_type=event.event_type,
        kind="inbound",
        conversation_id=conversation_id,
        thread_id=thread_id,
        run_id=run_id,
        actor_id=actor_id,
        source=event.source,
        payload=event.model_dump(mode="json"),
    )
    user_item = (
        None
        if conversation_id is None
        else item_values(
            conversation_id=conversation_id,
            thread_id=thread_id,
            role="user",
            content=text,
            artifacts=attachments or [],
            event_id=event.event_id,
            run_id=run_id,
            actor_id=actor_id,
        )
    )

    scopes = [
        (scope, owner)
        for scope in SNAPSHOT_SCOPES
        if scope in grant.state_read and (owner := grant.state_scope_id(scope)) is not None
    ]

    async def start(
        latest: str | None, has_before: bool, state: Mapping[str, ScopeSnapshot] | None = None
    ) -> AgentRunContext:
        if state is None:  # queued: read outside the start transaction
            state = {scope: await stores.state.snapshot(scope, owner) for scope, owner in scopes}
        ctx = build_context(
            run_id=run_id,
            event=event,
            binding=binding,
            grant=grant,
            manifest=manifest,
            public_url=base_url,
            latest_cursor=latest,
            has_history_before=has_before,
            state=state,
            knowledge_bases={"kb-docs": ("Docs", "Product documentation")},
            tools=granted_tools(grant),
        )
        return ctx if revise is None else revise(ctx)

    if await stores.runs.try_start(
        run_id, host_id="host-test", user_item=user_item, context=start, state=scopes
    ):
        stored = await stores.runs.context(run_id)
        assert stored is not None
        context = with_token(stored, token)
    else:  # queued behind another run of its conversation: its user row now, its context in memory only
        latest: str | None = None
        has_before = False
        if user_item is not None and conversation_id is not None:
            await stores.transcript.append(**user_item)
            latest, has_before = await stores.transcript.head(conversation_id, thread_id)
        context = with_token(await start(latest, has_before), token)
    if contexts is not None:
        contexts[run_id] = context
    return RunHandle(run_id=run_id, token=token, grant=grant, event=event, context=context)


@dataclass
class Served:
    """A running facts server and everything needed to make runs it serves."""

    stores: Stores
    facts: FactsServer
    base_url: str
    contexts: dict[str, AgentRunContext] = field(default_factory=dict[str, AgentRunContext])

    def url(self, run_id: str) -> str:
        return f"{self.base_url}/runs/{run_id}/mcp"

    async def start_run(self, **options: Any) -> RunHandle:
        """Admit (and, when its conversation allows, start) a run this server serves; see `admit_run`."""
        return await admit_run(self.stores, base_url=self.base_url, contexts=self.contexts, **options)

    async def finish(self, run: RunHandle, status: RunStatus = RunStatus.COMPLETED) -> None:
        """End a run the way the orchestrator does: terminal status (grant revoked), then `end_run`."""
        current = (await self.stores.runs.get(run.run_id)).status
        if current is RunStatus.QUEUED and status is RunStatus.COMPLETED:
            status = RunStatus.CANCELLED
        await self.stores.runs.transition(run.run_id, status)
        await self.facts.end_run(run.run_id)

    async def audit(self, run: RunHandle) -> list[AuditRecord]:
        return await self.stores.audit.list(run.run_id, limit=1000)


def _free_socket() -> socket.socket:
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say so; with proto 0, a reused
    # connection waits ~40 ms per response for the client's delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@asynccontextmanager
async def _uvicorn(app: ASGIApp) -> AsyncGenerator[str]:
    """`app` under uvicorn on a free port in this event loop, for the block: its base URL."""
    sock = _free_socket()
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=2,
            timeout_keep_alive=KEEP_ALIVE_S,
        )
    )
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            with anyio.fail_after(10):
                while not server.started:  # noqa: ASYNC110  # uvicorn exposes only a flag
                    await anyio.sleep(0.01)
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                server.should_exit = True
    finally:
        sock.close()


def _context_provider(contexts: dict[str, AgentRunContext]) -> ContextProvider:
    async def provider(run_id: str) -> AgentRunContext | None:
        return contexts.get(run_id)

    return provider


@asynccontextmanager
async def serve_facts(stores: Stores, **options: Any) -> AsyncGenerator[Served]:
    """A `FactsServer` over `stores` under uvicorn on a free port, in this event loop."""
    contexts: dict[str, AgentRunContext] = {}
    options.setdefault("context_provider", _context_provider(contexts))
    facts = FactsServer(stores, **options)
    async with facts.running(), _uvicorn(facts.asgi_app) as base_url:
        yield Served(stores, facts, base_url, contexts)


@dataclass
class ServedEndpoint:
    """A running `FactsEndpoint` (the host's routes, its server loaded on first need) and what it built."""

    stores: Stores
    endpoint: FactsEndpoint
    base_url: str
    contexts: dict[str, AgentRunContext]
    built: list[FactsServer]
    """Every server the endpoint's `build` made, in order (at most one, by its invariant)."""

    def url(self, run_id: str) -> str:
        return f"{self.base_url}/runs/{run_id}/mcp"

    async def start_run(self, **options: Any) -> RunHandle:
        return await admit_run(self.stores, base_url=self.base_url, contexts=self.contexts, **options)


@asynccontextmanager
async def serve_endpoint(stores: Stores, *, running: bool = True) -> AsyncGenerator[ServedEndpoint]:
    """A `FactsEndpoint` over `stores` under uvicorn on a free port (its `running()` entered unless not
    `running`), building a `FactsServer` when it first needs one."""
    contexts: dict[str, AgentRunContext] = {}
    built: list[FactsServer] = []

    def build() -> FactsServer:
        built.append(FactsServer(stores, context_provider=_context_provider(contexts)))
        return built[-1]

    endpoint = FactsEndpoint(build)
    async with AsyncExitStack() as stack:
        if running:
            await stack.enter_async_context(endpoint.running())
        base_url = await stack.enter_async_context(_uvicorn(Router(routes=endpoint.routes)))
        yield ServedEndpoint(stores, endpoint, base_url, contexts, built)


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every test client (each new one loads the CA bundle again: ~30 ms of CPU)."""
    return ssl.create_default_context()


@asynccontextmanager
async def connect(
    served: Served | ServedEndpoint,
    run: RunHandle,
    *,
    mode: str = LEGACY,
    token: str | None = None,
    path_run_id: str | None = None,
) -> AsyncGenerator[Client]:
    """The SDK client on the run's endpoint with its bearer token (or another token / another path)."""
    headers = {"Authorization": f"Bearer {run.token if token is None else token}"}
    timeout = httpx2.Timeout(30, read=60)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout, verify=_tls()) as http:
        transport = streamable_http_client(served.url(path_run_id or run.run_id), http_client=http)
        async with Client(transport, mode=mode) as client:
            yield client


def _leaves(group: BaseExceptionGroup[MCPError]) -> list[MCPError]:
    found: list[MCPError] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


@contextmanager
def raises_mcp_error(match: str) -> Generator[list[MCPError]]:
    """Expect an `MCPError` whose message contains `match`, raised bare or inside exception groups
    (the SDK client raises from its task groups)."""
    caught: list[MCPError] = []
    try:
        yield caught
    except* MCPError as group:
        caught.extend(_leaves(group))
    assert caught, f"no MCPError raised (expected one matching {match!r})"
    assert match in caught[0].message, caught[0].message


def structured(result: types.CallToolResult) -> JSONObject:
    """The structured content of a result, checked against its text block."""
    data: JSONObject = result.structured_content
    assert isinstance(data, dict)
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    if result.is_error:
        assert content.text == f"{data['code']}: {data['message']}"
        assert set(data) == {"code", "message", "retryable", "details"}
    else:
        assert json.loads(content.text) == data
    return data


async def ok(client: Client, tool: str, arguments: JSONObject | None = None) -> JSONObject:
    result = await client.call_tool(tool, arguments or {})
    data = structured(result)
    assert not result.is_error, data
    return data


async def fails(client: Client, tool: str, arguments: JSONObject | None = None) -> JSONObject:
    result = await client.call_tool(tool, arguments or {})
    data = structured(result)
    assert result.is_error, data
    return data


async def table_fingerprint(stores: Stores, *, exclude: frozenset[str] = frozenset({"audit"})) -> str:
    """A digest of every row of every table (but `exclude`): equal fingerprints mean nothing changed."""
    rows: list[str] = []
    async with stores.db.read() as session:
        for table in Base.metadata.sorted_tables:
            if table.name in exclude:
                continue
            result = await session.execute(select(table))
            rows.extend(f"{table.name}:{sorted(map(repr, tuple(r)))}" for r in result.all())
    return str(hash(tuple(sorted(rows))))
