"""The middleware of the host's HTTP app, outermost first: `Measured`, `CatchAll` (`_errors.py`), `Cors`,
`ApiGuard`, `StorageGuard`; `middleware()` lists them for `Starlette(middleware=...)`.

Owns who may reach `/v1` and the site (the host's one `HttpGuard`, `ApiState.guard`), the 503 while the
storage is unavailable, CORS for `/v1`, and the request metrics. Does not own the policy itself
(`guard.py`), the error bodies (`_errors.py`) nor the facts endpoint's own checks (`facts/server.py`).

Invariants:
- Every middleware reads the host through `app.state.api` (`ApiState`), set before requests are served,
  so the app may open its host in its lifespan.
- `/v1` and `/runs/{run_id}/mcp` are guarded by the same `HttpGuard` instance the facts server holds: the
  same Host and Origin headers get the same verdict on both; `/v1` also needs an API key when any is
  configured, and a refusal there is a 401 `unauthorized`. The role a route requires is checked by the
  route (`_access`); `/metrics`, `/openapi.json` and `/docs` find their key there, unless `[host] public`
  opens them.
- CORS is off unless `[host] cors_origins` lists origins; then `/v1` (only) answers their preflights and
  carries CORS headers on every answer, refusals included (`Cors`, outside `ApiGuard`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcphost.api._access import remember
from mcphost.api._errors import CatchAll, error_response, host_error_response, storage_unavailable
from mcphost.api._state import ApiState
from mcphost.errors import UnauthorizedError
from mcphost.guard import Refusal
from mcphost.metrics import UNMATCHED_ROUTE
from mcphost.runtimes.wire import RUNTIME_PREFIX


def middleware(cors_origins: Sequence[str], *, site_paths: Callable[[str], bool]) -> list[Middleware]:
    """The app's middleware, outermost first; `site_paths` says which paths are the site's files (the
    console), which get the Host and Origin checks but need no API key."""
    return [
        Middleware(Measured),
        Middleware(CatchAll),
        *([Middleware(Cors, origins=cors_origins)] if cors_origins else []),
        Middleware(ApiGuard, site_paths=site_paths),
        Middleware(StorageGuard),
    ]


def _state(scope: Scope) -> ApiState:
    state = scope["app"].state.api
    assert isinstance(state, ApiState), "the host is opened before requests are served"
    return state


class Measured:
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
            state = getattr(scope["app"].state, "api", None)
            if isinstance(state, ApiState):
                route = getattr(scope.get("route"), "path", UNMATCHED_ROUTE)
                method = str(scope.get("method", ""))
                state.metrics.http_request(method, str(route), status, time.perf_counter() - started)


HOOKS_PREFIX = "/v1/hooks/"
"""Webhook senders authenticate by their signature (`api/_hooks.py`), not by the API key or Host name."""
CHANNELS_PREFIX = "/v1/channels/"
"""Chat platforms authenticate by their signature (`api/_channels.py`), as webhook senders do."""


class ApiGuard:
    """`/v1` access: the host's `HttpGuard` (Host, Origin, then the API key); a refusal is a 401, and
    the key's caller is kept for the route, which checks its role (`_access`). Every `/v1` route needs a
    key here, before the storage check, whatever its role: a route the table forgot cannot be open.
    Webhooks and chat platforms (`HOOKS_PREFIX`, `CHANNELS_PREFIX`) are let through: their route checks
    the sender's signature; so is the runtime protocol (`RUNTIME_PREFIX`): its routes take a runtime token
    and nothing else. The site's
    files (`site_paths`: the console's) get the Host and Origin checks only (421, 403): they hold no data, and the login prompt must load."""

    def __init__(self, app: ASGIApp, site_paths: Callable[[str], bool]) -> None:
        self.app = app
        self.site_paths = site_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if (path == "/v1" or path.startswith("/v1/")) and not path.startswith(
            (HOOKS_PREFIX, CHANNELS_PREFIX, RUNTIME_PREFIX)
        ):
            verdict = _state(scope).guard.authenticate(Headers(scope=scope))
            if isinstance(verdict, Refusal):
                await host_error_response(UnauthorizedError(verdict.message))(scope, receive, send)
                return
            remember(scope, verdict)  # the route checks its role (`_access.check_access`)
        elif self.site_paths(path):
            refused = _state(scope).guard.site_refusal(Headers(scope=scope))
            if refused is not None:
                code = "unauthorized" if refused.status == 403 else "invalid_argument"
                await error_response(refused.status, code, refused.message)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class StorageGuard:
    """`/v1` and the MCP endpoints answer 503 `storage_unavailable` while the storage probe says so.

    The probe (`Stores.health`) is cached for a second, so this costs one probe a second at most. Public
    routes (`/healthz`, which reports the same reason, `/metrics`, `/openapi.json`) are not guarded.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == "/v1" or path.startswith(("/v1/", "/runs/")):
            state = getattr(scope["app"].state, "api", None)
            if isinstance(state, ApiState):
                health = await state.stores.health.check()
                if health.reason is not None:
                    await host_error_response(storage_unavailable(health.reason))(scope, receive, send)
                    return
        await self.app(scope, receive, send)


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


class Cors:
    """CORS for `/v1` only (`[host] cors_origins`), by Starlette's `CORSMiddleware`.

    Outside `ApiGuard`, so a preflight (which carries no API key) is answered here, and every answer
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
