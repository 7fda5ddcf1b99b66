"""The composition of the host: stores, plugins, registry, bindings, orchestrator, the facts MCP server,
and the HTTP app around them.

`open_host(settings)` enters every long-lived part once, in dependency order, and leaves them in reverse
order with bounded shutdowns: the orchestrator (active runs cancelled and closed), then the facts server,
then the upstream tool servers (`gateway`), then the plugin processes, then the database; the scheduler
and the retention job (`run_collector`) are tasks of the host. The facts server gets its seams here: run contexts from the orchestrator, host tools from the gateway, retrieval
from the knowledge bases, the host's `HttpGuard` and the MCP-call metric. `build_app(host)` is the
Starlette app over an open host (the `/v1` API and the per-run MCP endpoint); `create_app(settings)` is
the same app with a lifespan that opens the host itself. Serving it is `serving.py`.

Invariants:
- This module is the one place that maps errors to HTTP: a `HostError` becomes `{error: {code, message,
  details}}` with its status; an unknown route 404, a wrong method 405; anything else is a bug, logged
  with its traceback and answered with a generic 500 that carries no internals.
- `/v1` and `/runs/{run_id}/mcp` are guarded by one `HttpGuard` instance (`Host.guard`, built from the
  settings and handed to the facts server): the same Host and Origin headers get the same verdict on
  both; `/v1` also needs the API key when one is configured. A refusal on `/v1` is a 401 `unauthorized`.
- CORS is off unless `[host] cors_origins` lists origins; then `/v1` (only) answers their preflights and
  carries CORS headers on every answer, refusals included (`_Cors`, outside the guard).
- Wiring: the orchestrator calls `FactsServer.end_run` (and the run metrics) when each run ends,
  inspection grants included; the facts server's context provider is `Orchestrator.context`, which
  holds a run's context (token included) in memory only while the run is active on this process; every
  other process sharing the database serves the copy the runs store kept, without its token, when the
  run started. No token is ever stored.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Lifespan, Message, Receive, Scope, Send

from mcphost import console, tracing
from mcphost.api import UNMATCHED_ROUTE, ApiLimits, ApiState, HostMetrics, routes
from mcphost.bindings import Bindings
from mcphost.common.challenge import bearer_challenge
from mcphost.config import Settings
from mcphost.delivery import DeliverySender
from mcphost.errors import HostError, StorageUnavailableError, UnauthorizedError, find_error
from mcphost.facts import MCP_PATH, FactsServer, granted_tools
from mcphost.gateway.host_tools import Gateway
from mcphost.guard import HttpGuard
from mcphost.knowledge.bases import KnowledgeBases
from mcphost.models import Run
from mcphost.orchestrator import Orchestrator
from mcphost.plugins.process import PluginProcess, PluginSpec, PluginSupervisor
from mcphost.plugins.registry import RunnerRegistry
from mcphost.recording import ReplayBook
from mcphost.retention import DAY_S, Collector, run_collector
from mcphost.schedules import Scheduler, run_scheduler
from mcphost.stores import Stores, open_stores
from mcphost.stores.retention import Collected

logger = logging.getLogger(__name__)


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
    guard: HttpGuard
    """The Host/Origin/API-key policy of `/v1` and of the facts server's MCP endpoint (one instance)."""


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
        webhooks=settings.webhooks,
        approval_expiry_s=settings.host.approval_expiry_s,
        artifact_ttl_s=None if (days := settings.retention.artifacts_days) is None else days * DAY_S,
    ) as stores:
        yield stores


@asynccontextmanager
async def _tracing() -> AsyncGenerator[None, None]:
    """Tracing as the `OTEL_*` variables ask (off by default); queued spans are exported at the end,
    off the event loop (the exporter's flush blocks)."""
    with tracing.from_environment():
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(tracing.flush)


@asynccontextmanager
async def open_host(settings: Settings, *, replay: ReplayBook | None = None) -> AsyncGenerator[Host, None]:
    """Every part of a running host. Config problems raise before anything starts.

    With `replay` (`mcphost replay`, on a scratch database), runs start on the recorded context and
    every MCP call is answered from the recording."""
    bindings = Bindings(settings.agents, source=settings.source)
    metrics = HostMetrics()
    async with (
        _tracing(),
        open_database(settings) as stores,
        PluginSupervisor(plugin_specs(settings)) as supervisor,
    ):
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
            revise_context=replay.context if replay is not None else None,
        )
        gateway = Gateway.from_settings(settings, stores)
        knowledge = KnowledgeBases.from_settings(stores.db, settings)
        guard = HttpGuard.from_settings(settings)
        facts = FactsServer(
            stores,
            context_provider=orchestrator.context,
            host_tools=gateway,
            knowledge=knowledge,
            guard=guard,
            on_call=metrics.mcp_call,
            replay=replay,
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
            submit=partial(orchestrator.submit, via="schedule"),
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
            guard,
        )
        sender = DeliverySender(stores.deliveries, settings.webhooks, orchestrator.host_id)

        async def count_collected(item: Collected) -> None:
            metrics.reclaimed(item.kind, item.rows, item.bytes)

        collector = Collector(
            stores, settings.retention, holder=orchestrator.host_id, on_collected=count_collected
        )
        async with (
            gateway.running(),
            facts.running(),
            orchestrator.running(),
            sender.running(),
            anyio.create_task_group() as tg,
        ):
            await tg.start(run_scheduler, scheduler)
            await tg.start(run_collector, collector)
            try:
                yield host
            finally:
                tg.cancel_scope.cancel()


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
        headers["WWW-Authenticate"] = bearer_challenge(exc.message)
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


class _Measured:
    """Counts every HTTP request in `HostMetrics` by method, route template and status, with its duration."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # the answer never started: the client sees the connection end
        started = time.perf_counter()

        async def recording(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, recording)
        finally:
            host = getattr(scope["app"].state, "host", None)
            if isinstance(host, Host):
                route = getattr(scope.get("route"), "path", UNMATCHED_ROUTE)
                method = str(scope.get("method", ""))
                host.metrics.http_request(method, str(route), status, time.perf_counter() - started)


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
    """`/v1` access: the host's `HttpGuard` (Host, Origin, then the API key); a refusal is a 401.
    Webhooks (`HOOKS_PREFIX`) are let through: their route checks the sender's signature. The console's
    files get the Host and Origin checks only (421, 403): they hold no data, and the login prompt must load."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if (path == "/v1" or path.startswith("/v1/")) and not path.startswith(HOOKS_PREFIX):
            host = scope["app"].state.host
            assert isinstance(host, Host), "the host is opened before requests are served"
            refused = host.guard.api_refusal(Headers(scope=scope))
            if refused is not None:
                await host_error_response(UnauthorizedError(refused.message))(scope, receive, send)
                return
        elif console.is_console_path(path):
            host = scope["app"].state.host
            assert isinstance(host, Host), "the host is opened before requests are served"
            refused = host.guard.site_refusal(Headers(scope=scope))
            if refused is not None:
                code = "unauthorized" if refused.status == 403 else "invalid_argument"
                await error_response(refused.status, code, refused.message)(scope, receive, send)
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


CORS_HEADERS = ("Authorization", "Content-Type", "Accept", "Last-Event-ID", "Idempotency-Key", "Range")
"""Request headers a browser UI on a `cors_origins` origin may send to `/v1`."""
CORS_EXPOSED = (
    "Location",
    "X-Run-Id",
    "Retry-After",
    "WWW-Authenticate",
    "Accept-Ranges",
    "Content-Range",
    "Content-Disposition",
    "ETag",
)
"""Response headers such a UI may read (besides the CORS-safelisted ones)."""


class _Cors:
    """CORS for `/v1` only (`[host] cors_origins`), by Starlette's `CORSMiddleware`.

    Outside `_ApiGuard`, so a preflight (which carries no API key) is answered here, and every answer
    of `/v1`, refusals included, carries the CORS headers a browser needs to read it. Bearer keys, not
    cookies: no credentials mode.
    """

    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        self.app = app
        self.cors = CORSMiddleware(
            app,
            allow_origins=origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=CORS_HEADERS,
            expose_headers=CORS_EXPOSED,
            max_age=600,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == "/v1" or path.startswith("/v1/"):
            await self.cors(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def _starlette(settings: Settings, lifespan: Lifespan[Starlette] | None = None) -> Starlette:
    origins = settings.host.cors_origins
    return Starlette(
        routes=[
            *routes(),
            Route(MCP_PATH, endpoint=_FactsEndpoint(), name="mcphost_facts"),
            *console.routes(),
        ],
        middleware=[
            Middleware(_Measured),
            Middleware(_CatchAll),
            *([Middleware(_Cors, origins=origins)] if origins else []),
            Middleware(_ApiGuard),
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
    app.state.host = host
    app.state.api = ApiState(
        stores=host.stores,
        orchestrator=host.orchestrator,
        registry=host.registry,
        bindings=host.bindings,
        metrics=host.metrics,
        limits=limits or ApiLimits(),
        hooks=host.settings.hooks,
        scheduler=host.scheduler,
        webhooks=host.settings.webhooks,
    )


def build_app(host: Host, *, limits: ApiLimits | None = None) -> Starlette:
    """The HTTP app over an open host: `/v1`, `/healthz`, `/metrics`, `/openapi.json`, the MCP endpoint and
    the console (`/`, `/console/`)."""
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
