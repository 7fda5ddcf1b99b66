"""The composition of the host: stores, plugins, registry, bindings, orchestrator, the facts MCP server,
and the HTTP app and server around them.

`open_host(settings)` enters every long-lived part once, in dependency order, and leaves them in reverse
order with bounded shutdowns: the orchestrator (active runs cancelled and closed), then the facts server,
then the upstream tool servers (`gateway`), then the plugin processes, then the database. The facts
server gets its seams here: run contexts from the orchestrator, host tools from the gateway, retrieval
from the knowledge bases. `build_app(host)` is the Starlette app over an open host
(the `/v1` API and the per-run MCP endpoint); `create_app(settings)` is the same app with a lifespan that
opens the host itself. `serve(settings)` is `mcphost serve`; `serve_locally(host)` serves the app on an
ephemeral loopback port for `mcphost run`, so the one-shot path and the server path run the same code.

Invariants:
- This module is the one place that maps errors to HTTP: a `HostError` becomes `{error: {code, message,
  details}}` with its status; an unknown route 404, a wrong method 405; anything else is a bug, logged
  with its traceback and answered with a generic 500 that carries no internals.
- `/v1` needs `Authorization: Bearer <api key>` when a key is configured (compared in constant time).
  Without a key the server listens only on loopback, and `/v1` then accepts only loopback (or
  `allowed_hosts`) Host and Origin headers, so neither a web page nor DNS rebinding can drive it.
- Wiring: the orchestrator calls `FactsServer.end_run` (and the run metrics) when each run ends; the
  facts server's context provider is `Orchestrator.context`, which holds a run's context (token included)
  in memory only while the run is active on this process; every other process sharing the database
  serves the copy the runs store kept, without its token, when the run started. No token is ever stored.
- Inspection grants (`create_inspection_grant`) are runs without a runner, written through the runs
  store like any run: status `running` with no owning host (so host recovery never fails them), bound to
  one conversation through the grant only (the runs row has no conversation, so the grant never holds up
  the conversation's queue). They end when revoked, or are closed by the sweeper once past their deadline
  (the facts server refuses them from the deadline on regardless).
- Graceful shutdown (`serve`): on SIGTERM/SIGINT the server stops taking events (503) but keeps
  serving, so running runs keep their MCP endpoint and clients their streams; runs get `grace_s` to
  finish, then are cancelled; then the HTTP server stops (bounded), then the host (plugins last). A second
  signal skips the rest of the grace period.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import hashlib
import hmac
import ipaddress
import logging
import signal
import socket
import time
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Lifespan, Message, Receive, Scope, Send

from mcphost.api import ApiLimits, ApiState, HostMetrics, routes
from mcphost.bindings import Bindings
from mcphost.config import Settings
from mcphost.errors import (
    ConfigError,
    HostError,
    InvalidArgumentError,
    StorageUnavailableError,
    UnauthorizedError,
    find_error,
)
from mcphost.facts import MCP_PATH, FactsServer, granted_tools
from mcphost.gateway.host_tools import Gateway
from mcphost.grants import mint_token
from mcphost.knowledge.bases import KnowledgeBases
from mcphost.models import Run, RunError, RunGrant, RunStatus, new_id
from mcphost.orchestrator import CANCEL_GRACE_S, Orchestrator
from mcphost.plugins.process import PluginProcess, PluginSpec, PluginSupervisor
from mcphost.plugins.registry import RunnerRegistry
from mcphost.schedules import Scheduler, run_scheduler
from mcphost.stores import AuditEntry, AuditRecord, AuditStore, Database, Stores, open_stores

logger = logging.getLogger(__name__)

LOOPBACK_NAMES: frozenset[str] = frozenset({"localhost", "127.0.0.1", "::1"})
GRANT_SWEEP_S = 30.0
HTTP_SHUTDOWN_S = 3.0
"""How long the HTTP server waits for open connections once the runs are over."""
DEFAULT_GRACE_S = 10.0


@dataclass(frozen=True)
class Host:
    settings: Settings
    stores: Stores
    supervisor: PluginSupervisor
    registry: RunnerRegistry[PluginProcess]
    bindings: Bindings
    orchestrator: Orchestrator
    facts: FactsServer
    gateway: Gateway
    knowledge: KnowledgeBases
    metrics: HostMetrics
    scheduler: Scheduler


def plugin_specs(settings: Settings) -> list[PluginSpec]:
    return [
        PluginSpec(name=p.display_name, command=list(p.command), env=dict(p.env), cwd=p.cwd)
        for p in settings.all_plugins()
    ]


@asynccontextmanager
async def open_database(settings: Settings) -> AsyncGenerator[Stores, None]:
    """Only the stores (with pending migrations applied): for read-only commands."""
    async with open_stores(
        settings.database_url,
        settings.host.data_dir,
        blob_backend=settings.host.blob_backend,
        migrate=True,
        cursor_secret=settings.host.cursor_secret,
    ) as stores:
        yield stores


class _CountedAuditStore(AuditStore):
    """The audit store the facts server writes through, counting calls by tool and outcome."""

    def __init__(self, db: Database, count: Callable[[str, str], None]) -> None:
        super().__init__(db)
        self._count = count

    async def append(self, entry: AuditEntry) -> AuditRecord:
        record = await super().append(entry)
        self._count(entry.tool, entry.outcome)
        return record

    async def append_many(self, entries: Sequence[AuditEntry]) -> list[AuditRecord]:
        records = await super().append_many(entries)
        for entry in entries:
            self._count(entry.tool, entry.outcome)
        return records


def _is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def allowed_hosts(settings: Settings) -> list[str]:
    """Host header values served besides loopback names: `[host] allowed_hosts` and the public URL's."""
    hosts = list(settings.host.allowed_hosts)
    public = urllib.parse.urlsplit(settings.public_url)
    if public.hostname and not _is_loopback(public.hostname):
        hosts += [public.netloc, public.hostname]
    return hosts


@asynccontextmanager
async def open_host(settings: Settings) -> AsyncGenerator[Host, None]:
    """Every part of a running host. Config problems raise before anything starts."""
    bindings = Bindings(settings.agents, source=settings.source)
    metrics = HostMetrics()
    async with open_database(settings) as stores, PluginSupervisor(plugin_specs(settings)) as supervisor:
        registry = RunnerRegistry(supervisor.plugins)
        orchestrator = Orchestrator(
            stores=stores,
            registry=registry,
            bindings=bindings,
            public_url=settings.public_url,
            default_timeout_s=settings.host.run_timeout_s,
            max_concurrent_runs=settings.host.max_concurrent_runs,
            knowledge_bases={kb: (cfg.name, cfg.description) for kb, cfg in settings.knowledge.items()},
            skills={name: (cfg.display_name, cfg.description) for name, cfg in settings.skills.items()},
            tool_list=granted_tools,
        )
        gateway = Gateway.from_settings(settings, stores)
        knowledge = KnowledgeBases.from_settings(stores.db, settings)
        facts = FactsServer(
            dataclasses.replace(stores, audit=_CountedAuditStore(stores.db, metrics.mcp_call)),
            context_provider=orchestrator.context,
            host_tools=gateway,
            knowledge=knowledge,
            allowed_hosts=allowed_hosts(settings),
            allowed_origins=settings.host.allowed_origins,
        )

        async def end_run(run_id: str, _run: Run | None) -> None:
            await facts.end_run(run_id)

        async def count_run(_run_id: str, run: Run | None) -> None:
            if run is not None:  # None: the orchestrator could neither record nor read the run's end
                metrics.run_ended(run)

        orchestrator.on_run_end.extend([end_run, count_run])
        scheduler = Scheduler(
            stores,
            settings.schedules,
            submit=orchestrator.submit,
            bindings=bindings,
            host_id=orchestrator.host_id,
        )
        host = Host(
            settings,
            stores,
            supervisor,
            registry,
            bindings,
            orchestrator,
            facts,
            gateway,
            knowledge,
            metrics,
            scheduler,
        )
        async with (
            gateway.running(),
            facts.running(),
            orchestrator.running(),
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(_sweep_grants, host)
            await tg.start(run_scheduler, scheduler)
            try:
                yield host
            finally:
                tg.cancel_scope.cancel()


# -- inspection grants -------------------------------------------------------------------------------

INSPECTION_EVENT_TYPE = "inspection.granted"
INSPECTION_READ_TOOLS: tuple[str, ...] = (
    "run_context",
    "history_page",
    "history_search",
    "events_get",
    "events_page",
    "artifacts_metadata",
    "artifacts_read",
)
INSPECTION_WRITE_TOOLS: tuple[str, ...] = ("artifacts_create",)
MAX_GRANT_TTL_S = 30 * 24 * 3600.0


@dataclass(frozen=True)
class InspectionGrant:
    """A fresh inspection grant. `token` is shown once and never stored (only its hash is)."""

    run: Run
    grant: RunGrant
    token: str


async def create_inspection_grant(
    stores: Stores,
    *,
    conversation_id: str,
    thread_id: str | None = None,
    ttl_s: float = 3600.0,
    tools: Sequence[str] = (),
    host_tools: Sequence[str] = (),
    write: bool = False,
    source: str = "cli",
) -> InspectionGrant:
    """A run with no runner whose MCP endpoint reads one conversation until `ttl_s` from now.

    Read-only (history, events, artifacts) unless `write` (artifacts_create). `tools` are globs that keep
    only the matching facts tools. Host tools (`<server>__<tool>`) are granted only when named: by the
    `host_tools` globs, or by a `tools` glob that itself contains `__`; a glob such as `*` never reaches
    them, so narrowing the facts tools can never widen the grant to every upstream tool.
    """
    if not 0 < ttl_s <= MAX_GRANT_TTL_S:
        raise InvalidArgumentError(f"ttl must be more than 0 s and at most 30 days; got {ttl_s:g} s.")
    for glob in host_tools:
        if "__" not in glob:
            raise InvalidArgumentError(
                f"--host-tools {glob!r} does not name a host tool: write '<server>__<tool>' (globs allowed, "
                "such as 'search__*'), so that every host tool a grant reaches is named on purpose."
            )
    host_globs = tuple(dict.fromkeys([*(g for g in tools if "__" in g), *host_tools]))
    facts_globs = [g for g in tools if "__" not in g]
    available = INSPECTION_READ_TOOLS + INSPECTION_WRITE_TOOLS
    names = INSPECTION_READ_TOOLS + (INSPECTION_WRITE_TOOLS if write else ())
    for glob in facts_globs:
        if not any(fnmatch.fnmatchcase(n, glob) for n in available):
            raise InvalidArgumentError(
                f"--tools {glob!r} matches no tool an inspection grant can have ({', '.join(available)}) and "
                "names no host tool ('<server>__<tool>')."
            )
        if not any(fnmatch.fnmatchcase(n, glob) for n in names):
            raise InvalidArgumentError(f"--tools {glob!r} only matches tools that need --write.")
    if tools:  # `--tools` given (even only host tool globs): only the facts tools it matches
        names = tuple(n for n in names if any(fnmatch.fnmatchcase(n, g) for g in facts_globs))
    names = tuple(dict.fromkeys(("run_context", *names)))
    run_id = new_id("run")
    token, token_hash = mint_token()
    now = time.time()
    grant = RunGrant(
        run_id=run_id,
        runner_id=None,
        plugin=None,
        binding_id=None,
        conversation_id=conversation_id,
        thread_id=thread_id,
        actor_id=None,
        subject_type=None,
        subject_id=None,
        bot_id=None,
        workspace_id=None,
        tools=frozenset(names),
        host_tool_globs=host_globs,
        artifact_create=write,
        deadline_at=now + ttl_s,
        token_hash=token_hash,
    )
    run = Run(
        run_id=run_id,
        event_id=new_id("evt"),
        event_type=INSPECTION_EVENT_TYPE,
        agent_id=None,
        runner_id=None,
        conversation_id=None,  # see the module docstring: the grant carries the conversation
        thread_id=None,
        status=RunStatus.QUEUED,
        created_at=now,
        deadline_at=grant.deadline_at,
    )
    await stores.runs.admit(run, grant=grant, concurrency="enqueue")
    run = await stores.runs.transition(run_id, RunStatus.RUNNING)
    await stores.events.append(
        event_id=run.event_id,
        event_type=INSPECTION_EVENT_TYPE,
        kind="system",
        conversation_id=None,
        thread_id=None,
        run_id=run_id,
        actor_id=None,
        source=source,
        payload={
            "conversation_id": conversation_id,
            "thread_id": thread_id,
            "tools": sorted(names),
            "host_tool_globs": list(grant.host_tool_globs),
            "write": write,
            "ttl_s": ttl_s,
        },
    )
    logger.info(
        "inspection grant %s for conversation %s until %.0f", run_id, conversation_id, grant.deadline_at
    )
    return InspectionGrant(run=run, grant=grant, token=token)


async def end_inspection_grant(
    stores: Stores, run_id: str, reason: str, *, status: RunStatus = RunStatus.CANCELLED
) -> Run:
    """End a runner-less run (its token stops working; other processes notice within their grant cache TTL)."""
    run = await stores.runs.get(run_id)
    if run.runner_id is not None:
        raise InvalidArgumentError(
            f"Run {run_id!r} is a run of {run.runner_id!r}, not an inspection grant; cancel it instead."
        )
    if run.status.is_terminal:
        return run
    error = None
    if status is not RunStatus.COMPLETED:
        error = RunError(
            code="cancelled", message=f"Inspection grant revoked: {reason}.", details={"reason": reason}
        )
    return await stores.runs.transition(run_id, status, error=error)


async def _end_grant(host: Host, run_id: str, reason: str) -> Run:
    run = await end_inspection_grant(host.stores, run_id, reason)
    await host.facts.end_run(run_id)
    if run.status.is_terminal:
        host.metrics.run_ended(run)
    return run


async def _sweep_grants(host: Host) -> None:
    """Close inspection grants past their deadline (their tokens already stopped working)."""
    while True:
        await anyio.sleep(GRANT_SWEEP_S)
        try:
            await sweep_expired_grants(host)
        except Exception:
            logger.exception("the inspection grant sweep failed; retrying in %g s", GRANT_SWEEP_S)


async def sweep_expired_grants(host: Host, *, max_pages: int = 20) -> list[str]:
    """Move runner-less runs past their deadline to `completed`; their ids."""
    ended: list[str] = []
    cursor: str | None = None
    now = time.time()
    for _ in range(max_pages):
        page = await host.stores.runs.list(status=RunStatus.RUNNING, limit=100, cursor=cursor)
        for run in page.items:
            if run.runner_id is None and run.deadline_at <= now:
                closed = await end_inspection_grant(
                    host.stores, run.run_id, "expired", status=RunStatus.COMPLETED
                )
                await host.facts.end_run(run.run_id)
                host.metrics.run_ended(closed)
                ended.append(run.run_id)
        if not page.has_more:
            break
        cursor = page.next_cursor
    return ended


# -- errors → HTTP (the one place) -------------------------------------------------------------------

_HTTP_CODES: dict[int, str] = {
    400: "invalid_argument",
    401: "unauthorized",
    404: "not_found",
    405: "invalid_argument",
    409: "conflict",
    413: "payload_too_large",
    429: "rate_limited",
}


def error_response(
    status: int,
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "details": details or {}}}
    return JSONResponse(body, status_code=status, headers=headers)


def host_error_response(exc: HostError) -> JSONResponse:
    headers: dict[str, str] = {}
    if exc.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="mcphost"'
    if exc.status == 503:
        headers["Retry-After"] = "5"
    if exc.status == 416 and isinstance(exc.details.get("size"), int):
        headers["Content-Range"] = f"bytes */{exc.details['size']}"
    return error_response(exc.status, exc.code, exc.message, exc.details, headers)


async def _on_host_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HostError)
    if exc.status >= 500:
        # A storage error's message is fixed; its cause (driver text, SQL) goes to the log only.
        logger.warning("%s %s failed: %s", request.method, request.url.path, exc.__cause__ or exc.message)
    return host_error_response(exc)


async def _on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    method, path = request.method, request.url.path
    if exc.status_code == 404:
        message = f"No route {path[:200]!r}; the API is described at /openapi.json."
    elif exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        message = f"Method {method} is not allowed on {path[:200]!r}; allowed: {allowed or 'none'}."
    else:
        message = exc.detail
    code = _HTTP_CODES.get(exc.status_code, "runtime_error" if exc.status_code >= 500 else "invalid_argument")
    return error_response(exc.status_code, code, message, headers=dict(exc.headers or {}))


async def _on_disconnect(request: Request, exc: Exception) -> Response:
    # The client went away while sending its body: nobody reads this answer.
    return error_response(400, "invalid_argument", "The client disconnected before sending the whole body.")


class _CatchAll:
    """The last line: an exception no handler took is logged and answered with a generic 500."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:
            host_error = find_error(exc, HostError)
            if host_error is not None and not started:
                await host_error_response(host_error)(scope, receive, send)
                return
            if isinstance(exc, ClientDisconnect):
                return
            logger.exception("%s %s failed", scope.get("method"), scope.get("path"))
            if not started:
                response = error_response(
                    500, "runtime_error", "The host failed while handling this request; the error is logged."
                )
                await response(scope, receive, send)


HOOKS_PREFIX = "/v1/hooks/"
"""Webhook senders authenticate by their signature (`api/_hooks.py`), not by the API key or Host name."""


class _ApiGuard:
    """`/v1` access: the API key when one is configured, else loopback-only Host and Origin. Webhooks
    (`HOOKS_PREFIX`) are let through: their route checks the sender's signature."""

    def __init__(self, app: ASGIApp, *, api_key: str | None, allowed_hosts: Sequence[str]) -> None:
        self.app = app
        self._key_digest = hashlib.sha256(api_key.encode()).digest() if api_key else None
        self._hosts = {h.lower() for h in allowed_hosts}

    def _host_allowed(self, value: str) -> bool:
        value = value.lower()
        if value in self._hosts:
            return True
        parsed = urllib.parse.urlsplit(f"//{value}")
        try:
            name = parsed.hostname or ""
        except ValueError:
            return False
        return _is_loopback(name) or name in self._hosts

    def refusal(self, headers: Headers) -> HostError | None:
        if self._key_digest is not None:
            scheme, _, token = headers.get("authorization", "").partition(" ")
            presented = hashlib.sha256(token.strip().encode()).digest()
            if scheme.lower() != "bearer" or not hmac.compare_digest(presented, self._key_digest):
                return UnauthorizedError(
                    "Missing or wrong API key: send 'Authorization: Bearer <key>' with the key configured "
                    "as [host] api_key (or MCPHOST_API_KEY)."
                )
            return None
        host = headers.get("host", "")
        if not self._host_allowed(host):
            return UnauthorizedError(
                f"Host {host[:100]!r} is not served without an API key. Configure [host] api_key, or add the "
                "name to [host] allowed_hosts."
            )
        origin = headers.get("origin")
        if origin is not None and not self._host_allowed(urllib.parse.urlsplit(origin).netloc or origin):
            return UnauthorizedError(
                f"Origin {origin[:100]!r} may not use this API without an API key (cross-site requests are refused)."
            )
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if (path == "/v1" or path.startswith("/v1/")) and not path.startswith(HOOKS_PREFIX):
            refused = self.refusal(Headers(scope=scope))
            if refused is not None:
                await host_error_response(refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def storage_unavailable(reason: str) -> StorageUnavailableError:
    return StorageUnavailableError(f"The host's storage is unavailable: {reason}", details={"reason": reason})


class _StorageGuard:
    """`/v1` and the MCP endpoints answer 503 `storage_unavailable` while the storage probe says so.

    The probe (`Stores.health`) is cached for a second, so this costs one probe a second at most. Public
    routes (`/healthz`, which reports the same reason, `/metrics`, `/openapi.json`) are not guarded.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == "/v1" or path.startswith(("/v1/", "/runs/")):
            host = getattr(scope["app"].state, "host", None)
            if isinstance(host, Host):
                health = await host.stores.health.check()
                if health.reason is not None:
                    await host_error_response(storage_unavailable(health.reason))(scope, receive, send)
                    return
        await self.app(scope, receive, send)


class _FactsEndpoint:
    """`/runs/{run_id}/mcp`: the open host's facts server (the app may open the host in its lifespan)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = scope["app"].state.host
        assert isinstance(host, Host), "the host is opened before requests are served"
        await host.facts.asgi_app(scope, receive, send)


def _starlette(settings: Settings, lifespan: Lifespan[Starlette] | None = None) -> Starlette:
    return Starlette(
        routes=[*routes(), Route(MCP_PATH, endpoint=_FactsEndpoint(), name="mcphost_facts")],
        middleware=[
            Middleware(_CatchAll),
            Middleware(_ApiGuard, api_key=settings.host.api_key, allowed_hosts=allowed_hosts(settings)),
            Middleware(_StorageGuard),
        ],
        exception_handlers={
            HostError: _on_host_error,
            HTTPException: _on_http_exception,
            ClientDisconnect: _on_disconnect,
        },
        lifespan=lifespan,
    )


def _attach(app: Starlette, host: Host, limits: ApiLimits | None) -> None:
    async def end_grant(run_id: str, reason: str) -> Run:
        return await _end_grant(host, run_id, reason)

    app.state.host = host
    app.state.api = ApiState(
        stores=host.stores,
        orchestrator=host.orchestrator,
        registry=host.registry,
        metrics=host.metrics,
        end_grant=end_grant,
        limits=limits or ApiLimits(),
        hooks=host.settings.hooks,
        scheduler=host.scheduler,
    )


def build_app(host: Host, *, limits: ApiLimits | None = None) -> Starlette:
    """The HTTP app over an open host: `/v1`, `/healthz`, `/metrics`, `/openapi.json` and the MCP endpoint."""
    app = _starlette(host.settings)
    _attach(app, host, limits)
    return app


def create_app(settings: Settings, *, limits: ApiLimits | None = None) -> Starlette:
    """The same app, opening the host in its lifespan (for running under any ASGI server)."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncGenerator[None, None]:
        async with open_host(settings) as host:
            _attach(app, host, limits)
            yield

    return _starlette(settings, lifespan)


# -- serving -----------------------------------------------------------------------------------------


def parse_listen(listen: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 in brackets) → (host, port)."""
    host, sep, port = listen.rpartition(":")
    host = host.strip()
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidArgumentError(f"--listen expects HOST:PORT such as 127.0.0.1:8787; got {listen!r}.")
    return host.removeprefix("[").removesuffix("]"), int(port)


def check_listen(host: str, api_key: str | None) -> None:
    """Refuse a non-loopback address without an API key (DESIGN §10)."""
    if not api_key and not _is_loopback(host):
        raise ConfigError(
            f"Refusing to listen on {host!r} without an API key: /v1 would be open to the network. Set "
            "[host] api_key (or MCPHOST_API_KEY), or listen on 127.0.0.1."
        )


def bind_socket(host: str, port: int) -> socket.socket:
    """A bound TCP socket for `serve_http`.

    Created with `IPPROTO_TCP` explicitly: asyncio sets TCP_NODELAY on accepted connections only when the
    listening socket says so, and without it small writes (SSE events, MCP answers) wait on Nagle's
    algorithm and delayed ACKs (tens of milliseconds each).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise HostError(
            f"Cannot listen on {host}:{port}: {exc.strerror or exc}. Choose another --listen."
        ) from None
    return sock


def local_url(host: str, port: int) -> str:
    """The base URL a client on this machine uses for HOST:PORT (wildcard addresses become loopback)."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def socket_url(sock: socket.socket) -> str:
    """`local_url` of a bound socket."""
    host, port = sock.getsockname()[:2]
    return local_url(host, port)


def advertised_url(settings: Settings) -> str:
    """Where clients reach a `mcphost serve` of these settings: `[host] public_url`, else its `listen`."""
    if settings.host.public_url is not None:
        return settings.host.public_url
    return local_url(*parse_listen(settings.host.listen))


REDACTED_QUERY_PARAMS: frozenset[str] = frozenset({"access_token", "token", "api_key"})
"""Query parameters whose values the access log never records (compared case-insensitively)."""


def redact_query(target: str) -> str:
    """`target` (a path with its query) with the values of `REDACTED_QUERY_PARAMS` replaced by `***`."""
    path, sep, query = target.partition("?")
    if not sep:
        return target
    parts: list[str] = []
    for part in query.split("&"):
        name, eq, _ = part.partition("=")
        if urllib.parse.unquote_plus(name).strip().lower() in REDACTED_QUERY_PARAMS:
            part = f"{name}{eq or '='}***"
        parts.append(part)
    return f"{path}?{'&'.join(parts)}"


class _RedactAccessLog(logging.Filter):
    """Rewrites uvicorn access log records so secrets in query strings never reach the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        # uvicorn's access record: (client_addr, method, full_path, http_version, status_code)
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            record.args = (args[0], args[1], redact_query(args[2]), args[3], args[4])
        return True


_ACCESS_LOG_FILTER = _RedactAccessLog()


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: whoever runs it decides when it stops."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


@asynccontextmanager
async def serve_http(
    app: ASGIApp, sock: socket.socket, *, access_log: bool = False
) -> AsyncGenerator[str, None]:
    """Serve `app` on the bound `sock` until the block ends; yields the base URL.

    With `access_log`, uvicorn logs one line per request, with the values of `REDACTED_QUERY_PARAMS`
    replaced by `***`.
    """
    if access_log:
        access = logging.getLogger("uvicorn.access")
        if _ACCESS_LOG_FILTER not in access.filters:
            access.addFilter(_ACCESS_LOG_FILTER)
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,
        access_log=access_log,
        timeout_graceful_shutdown=int(HTTP_SHUTDOWN_S),
        server_header=False,
        ws="none",
    )
    server = _Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])
        with anyio.fail_after(10):
            while not server.started:  # noqa: ASYNC110  (uvicorn tells readiness only by this flag)
                await anyio.sleep(0.01)
        try:
            yield socket_url(sock)
        finally:
            server.should_exit = True


@asynccontextmanager
async def serve_locally(host: Host) -> AsyncGenerator[str, None]:
    """The host's app on an ephemeral loopback port for the block, with `public_url` pointing at it."""
    sock = bind_socket("127.0.0.1", 0)
    with sock:
        async with serve_http(build_app(host), sock) as url:
            previous = host.orchestrator.public_url
            host.orchestrator.public_url = url
            try:
                yield url
            finally:
                host.orchestrator.public_url = previous


async def _wait_idle(orchestrator: Orchestrator, timeout: float) -> None:
    with anyio.move_on_after(timeout):
        while orchestrator.active_run_ids():  # noqa: ASYNC110  (runs end on their own tasks; bounded poll)
            await anyio.sleep(0.05)


async def drain(
    host: Host, state: ApiState, grace_s: float, signals: AsyncIterator[signal.Signals] | None = None
) -> None:
    """Stop taking events, give active runs `grace_s`, cancel the rest and wait (bounded) for them to end."""
    state.draining = True
    orchestrator = host.orchestrator
    logger.warning(
        "shutting down: taking no new events; %d active run(s) get up to %g s",
        len(orchestrator.active_run_ids()),
        grace_s,
    )
    hurry = anyio.CancelScope()

    async def second_signal() -> None:
        if signals is None:
            return
        async for _ in signals:
            logger.warning("second signal: cancelling active runs now")
            hurry.cancel()
            return

    async with anyio.create_task_group() as tg:
        tg.start_soon(second_signal)
        with hurry:
            await orchestrator.drain(grace_s)
        for run_id in orchestrator.active_run_ids():
            await orchestrator.cancel(run_id, reason="the host is shutting down")
        await _wait_idle(orchestrator, CANCEL_GRACE_S + 5)
        tg.cancel_scope.cancel()


async def serve(
    settings: Settings,
    *,
    listen: str | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    limits: ApiLimits | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """`mcphost serve`: the host over HTTP until SIGTERM/SIGINT, then a graceful, bounded shutdown."""
    bind_host, port = parse_listen(listen or settings.host.listen)
    check_listen(bind_host, settings.host.api_key)
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        sock = bind_socket(bind_host, port)
        with sock:
            async with open_host(settings) as host:
                url = socket_url(sock)
                if settings.host.public_url is None:
                    host.orchestrator.public_url = url
                app = build_app(host, limits=limits)
                async with serve_http(app, sock, access_log=True):
                    logger.info("serving on %s (public URL %s)", url, host.orchestrator.public_url)
                    if on_ready is not None:
                        on_ready(url)
                    async for signum in signals:
                        logger.warning("received %s", signum.name)
                        break
                    state = app.state.api
                    assert isinstance(state, ApiState)
                    await drain(host, state, grace_s, signals)
                logger.info("HTTP server stopped; stopping plugins")
    logger.info("stopped")
