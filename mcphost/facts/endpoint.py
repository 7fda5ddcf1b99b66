"""`FactsEndpoint`: the host's per-run MCP routes, with the MCP server behind them loaded on first need.

Owns when the host's facts server (`server.FactsServer`, built on the `mcp` package: about a second of
imports on a small machine, more than the rest of a one-shot run) is loaded, and its lifetime inside the
host's. A request to `/runs/{run_id}/mcp` or `/sessions/{session_id}/mcp` loads it when it is not loaded
yet, importing on a daemon thread so the event loop keeps serving meanwhile; `preload()` loads it in the
background (`mcphost serve` calls it once it has answered its first request, so a serving host has it
before its first run needs it; `mcphost run` and `replay` as soon as a run whose runner calls MCP is
admitted, `app.preload_for`; a run whose runner never calls its MCP endpoint never loads it).
Does not own the checks, the sessions or anything a request is answered with once loaded (`server.py`).

Invariants:
- At most one `FactsServer` per endpoint; concurrent first requests wait for the same load and are then
  served by it, in order, with the checks of `server.py` (nothing is answered here but a 503).
- Before it is loaded there is nothing of a run on this process to end or close: `end_run` and `close`
  do nothing and `in_flight`/`open_sessions` are 0. A server loaded later reads each run's grant from the
  database, where the end of a run that ended meanwhile is already written (`on_run_end` runs after it),
  so it refuses that run's token like a server that saw the end.
- Requests outside `running()`, or after `close()` while nothing is loaded, answer 503 (a JSON-RPC
  error body that says why), as the server itself would; so does a request whose load failed (a broken
  install: logged, and the next request tries again).
- Leaving `running()` leaves the server's own `running()` in order (its queued audit rows stored
  first); a preload still importing is abandoned, not waited for, and the process exits without waiting
  for its thread.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.abc import TaskGroup, TaskStatus
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from mcphost.common.challenge import bearer_challenge
from mcphost.guard import declare_access
from mcphost.warm import SESSION_PATH

if TYPE_CHECKING:
    from mcphost.facts.server import FactsServer
    from mcphost.warm import WarmSessions

logger = logging.getLogger(__name__)

MCP_PATH = "/runs/{run_id}/mcp"
UNAUTHORIZED_RPC_CODE = -32001
SERVER_MODULE = "mcphost.facts.server"
"""What a load imports (with it the MCP SDK's server) before `build` runs."""


def refusal(status: int, message: str, code: int = UNAUTHORIZED_RPC_CODE) -> JSONResponse:
    """A refused request to an MCP endpoint: a JSON-RPC error body (`id: null`) that says why, with a
    bearer challenge on a 401."""
    headers = {"WWW-Authenticate": bearer_challenge(message)} if status == 401 else None
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status, headers=headers)


def mcp_routes(endpoint: Callable[[Scope, Receive, Send], object]) -> list[BaseRoute]:
    """The MCP routes a host serves, with `endpoint` behind both: a run's and a warm session's."""
    return [
        # The run's (or the warm session's) token, not an API key: no role applies.
        declare_access(Route(MCP_PATH, endpoint=endpoint, name="mcphost_facts"), "run-token"),
        declare_access(Route(SESSION_PATH, endpoint=endpoint, name="mcphost_warm_session"), "run-token"),
    ]


async def import_detached(module: str) -> None:
    """Import `module` on a daemon thread and wait for it (the event loop keeps serving meanwhile).

    A daemon thread, not a worker of anyio's pool: a host that stops while the import runs (a cancelled
    wait abandons it) exits without waiting for it, where a worker thread would hold the interpreter's
    exit until the import ends. An import that fails raises its error here.
    """
    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    failed: list[BaseException] = []

    def work() -> None:
        try:
            importlib.import_module(module)
        except BaseException as exc:  # handed to the waiting task, raised there
            failed.append(exc)
        with suppress(Exception):  # the event loop is gone: nobody waits any more
            anyio.from_thread.run_sync(done.set, token=token)

    threading.Thread(target=work, name=f"import {module}", daemon=True).start()
    await done.wait()
    if failed:
        raise failed[0]


class _NotServingError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class FactsEndpoint:
    """The host's `/runs/{run_id}/mcp` and `/sessions/{session_id}/mcp`: mount `routes`, enter
    `running()` in the host's lifespan, call `end_run(run_id)` when a run ends and `close()` before the
    HTTP server stops, as with a `FactsServer`."""

    def __init__(self, build: Callable[[], FactsServer], *, warm: WarmSessions | None = None) -> None:
        """
        Args:
            build: makes the server, once its module is imported (called on the event loop, at most once).
            warm: the warm sessions the server will serve (`warm`, readable before it is loaded).
        """
        self._build = build
        self._warm = warm
        self._server: FactsServer | None = None
        self._tg: TaskGroup | None = None
        self._lock: anyio.Lock | None = None
        self._stop: anyio.Event | None = None
        self._preloading: anyio.CancelScope | None = None
        self._closing = False
        self.routes: list[BaseRoute] = mcp_routes(self)
        """The routes to mount in the host's Starlette app, served by this endpoint itself."""

    @property
    def server(self) -> FactsServer | None:
        """The loaded server, or None while nothing has needed it."""
        return self._server

    @property
    def warm(self) -> WarmSessions | None:
        """The warm sessions served at `/sessions/{session_id}/mcp` (None: that path is 404)."""
        return self._warm

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI endpoint of both routes: the loaded server answers, after loading it if need be."""
        if scope["type"] != "http":
            return
        server = self._server
        if server is None:
            try:
                server = await self.load()
            except _NotServingError as exc:
                await refusal(503, exc.message, -32603)(scope, receive, send)
                return
            except Exception:  # a broken install: answered, logged, and tried again by the next request
                logger.exception("loading the MCP server failed")
                message = "the MCP server could not be loaded; the host's log says why"
                await refusal(503, message, -32603)(scope, receive, send)
                return
        await server(scope, receive, send)

    # -- lifetime --------------------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[FactsEndpoint]:
        """Serve requests: a server loaded within the block runs (`FactsServer.running`) until it ends."""
        if self._tg is not None:
            raise RuntimeError("FactsEndpoint.running() is already entered; enter it once, in the lifespan.")
        self._lock, self._stop = anyio.Lock(), anyio.Event()
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield self
            finally:
                self._tg = None
                if self._preloading is not None:
                    self._preloading.cancel()
                self._stop.set()

    async def load(self) -> FactsServer:
        """The server, loaded and running (the first call imports it on a daemon thread and builds it).

        Raises:
            _NotServingError: outside `running()`, or closing before anything was loaded.
        """
        if (server := self._server) is not None:
            return server
        tg, lock, stop = self._tg, self._lock, self._stop
        if tg is None or lock is None or stop is None or self._closing:
            raise _NotServingError(self._not_serving())
        async with lock:
            if self._server is None:
                await import_detached(SERVER_MODULE)
                if stop.is_set() or self._closing:  # the host stopped serving meanwhile
                    raise _NotServingError(self._not_serving())
                await tg.start(self._serve)
        assert self._server is not None
        return self._server

    async def _serve(self, *, task_status: TaskStatus[None]) -> None:
        server = self._build()
        stop = self._stop
        assert stop is not None
        async with server.running():
            self._server = server
            task_status.started()
            await stop.wait()

    def preload(self) -> None:
        """Load the server in the background now (within `running()`; a failure is logged, and the first
        request that needs it tries again and answers with what went wrong)."""
        tg = self._tg
        if tg is None or self._server is not None or self._preloading is not None:
            return
        self._preloading = anyio.CancelScope()
        tg.start_soon(self._preload, self._preloading)

    async def _preload(self, scope: anyio.CancelScope) -> None:
        with scope:
            try:
                await self.load()
            except _NotServingError:
                pass
            except Exception:
                logger.exception("loading the MCP server in the background failed")

    def _not_serving(self) -> str:
        return "the MCP server is shutting down" if self._closing else "the MCP server is not running"

    async def close(self) -> None:
        """Stop serving (`FactsServer.close`): requests are refused from now on (503)."""
        self._closing = True
        if self._server is not None:
            await self._server.close()

    async def end_run(self, run_id: str) -> None:
        """The run ended: `FactsServer.end_run` when the server is loaded (before, nothing is held)."""
        if self._server is not None:
            await self._server.end_run(run_id)

    def in_flight(self, run_id: str) -> int:
        """How many facts calls of the run are running on this process."""
        return 0 if self._server is None else self._server.in_flight(run_id)

    def open_sessions(self, run_id: str) -> int:
        """How many handshake-era sessions the run has open on this process."""
        return 0 if self._server is None else self._server.open_sessions(run_id)
