"""Serving the host over HTTP: the listening socket, uvicorn, `mcphost serve` and its graceful drain.

Owns binding the socket (`bind_socket`, TCP_NODELAY-ready), running uvicorn on it without its signal
handlers (`serve_http`), the access log's redaction, `serve_locally` (the app on an ephemeral loopback
port for `mcphost run`, so the one-shot path and the server path run the same code) and `serve`. Does
not own the app or the host it serves (`app.py`).

Invariants:
- Without an API key the server listens only on loopback (`guard.check_listen`, DESIGN §10); the command
  line checks it (`guard.listen_of`) before it spawns a plugin.
- While `serve` serves, `data_dir/serving.json` names its public URL and pid, so `mcphost grant` and
  `send` on this machine reach the address really bound (`--listen`) rather than the configured one.
- The access log never records the values of `REDACTED_QUERY_PARAMS`.
- Graceful shutdown (`serve`): on SIGTERM/SIGINT the server stops taking events (503) but keeps
  serving, so running runs keep their MCP endpoint and clients their streams; runs get `grace_s` to
  finish, then are cancelled; then the HTTP server stops (bounded), then the host (plugins last). A second
  signal skips the rest of the grace period.
- Before uvicorn stops, the facts server closes the MCP streams still open (`FactsEndpoint.close`: a warm
  harness process keeps a GET stream on its session endpoint until its plugin stops, which comes after
  the HTTP server), so uvicorn has no response to wait its `HTTP_SHUTDOWN_S` for and cancel.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import socket
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcphost.app import Host, build_app, open_host, run_app
from mcphost.common import gcstart, served
from mcphost.common.served import SERVING_FILE, local_url
from mcphost.config import Settings
from mcphost.errors import HostError
from mcphost.guard import listen_of
from mcphost.orchestrator import CANCEL_GRACE_S, Orchestrator

if TYPE_CHECKING:  # the API is imported by `serve`, not by a one-shot run's `serve_locally`
    from mcphost.api import ApiLimits, ApiState

logger = logging.getLogger(__name__)

KEEP_ALIVE_S = 75
"""How long the HTTP server keeps an idle connection open: longer than HTTP clients keep one in their
pools (httpx 5 s, aiohttp 15 s, Node's 4 to 5 s). uvicorn's own 5 s equals httpx's: a client that reused a
connection just as the server closed it got a read error for a request the server never read. A legacy
MCP client waits for a call's answer on its SSE stream while its POST connection idles, so a call of
5 s or more met that race on its next request."""
HTTP_SHUTDOWN_S = 3.0
"""How long the HTTP server waits for open connections once the runs are over."""
SHUTDOWN_POLL_S = 0.005
"""How often a stopping HTTP server looks whether its connections and request tasks are gone."""
DEFAULT_GRACE_S = 10.0


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


def socket_url(sock: socket.socket) -> str:
    """`local_url` of a bound socket."""
    host, port = sock.getsockname()[:2]
    return local_url(host, port)


def advertised_url(settings: Settings) -> str:
    """Where clients reach a `mcphost serve` of these settings (`mcphost.common.served.advertised_url`)."""
    return served.advertised_url(settings.host.data_dir, settings.host.public_url, settings.host.listen)


@contextlib.contextmanager
def _serving_record(data_dir: Path, url: str) -> Generator[None]:
    """`SERVING_FILE` naming `url` while the block runs; removed after it unless another server took it."""
    path = data_dir / SERVING_FILE
    mine = json.dumps({"url": url, "pid": os.getpid()})
    try:
        path.write_text(mine)
    except OSError as exc:
        logger.warning(
            "could not record the served URL in %s (%s); `mcphost grant` may print another", path, exc
        )
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if path.read_text() == mine:
                path.unlink()


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
    """uvicorn without its own signal handlers: whoever runs it decides when it stops (`stop`), and
    stopping starts at once rather than at uvicorn's next 0.1 s tick, and ends as soon as the connections
    have closed rather than after uvicorn's fixed 0.1 s sleeps (every `mcphost run` paid both)."""

    _stopping: anyio.Event | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    def stop(self) -> None:
        self.should_exit = True
        if self._stopping is not None:
            self._stopping.set()

    async def main_loop(self) -> None:
        # uvicorn's own loop, with its 0.1 s sleep cut short by `stop` (`on_tick` still runs every
        # 0.1 s otherwise: it refreshes the Date header and checks the exit conditions).
        self._stopping = anyio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            with anyio.move_on_after(0.1):
                await self._stopping.wait()
            should_exit = await self.on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn's own shutdown (0.55), with its waits polled every SHUTDOWN_POLL_S: it sleeps 0.1 s
        # after asking the connections to close, then 0.1 s per look while any is open. An idle
        # keep-alive connection closes within a loop turn of being asked; one with a response in flight
        # closes once the response is sent, and the graceful bound is unchanged.
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        bound = self.config.timeout_graceful_shutdown
        with anyio.move_on_after(math.inf if bound is None else bound) as waited:
            # uvicorn tells a closed connection or a finished request only by its leaving these sets.
            while (self.server_state.connections or self.server_state.tasks) and not self.force_exit:  # noqa: ASYNC110
                await anyio.sleep(SHUTDOWN_POLL_S)
            for server in self.servers:
                await server.wait_closed()
        if waited.cancelled_caught:
            logger.error(
                "HTTP shutdown: cancelling %d request task(s) still running after %s s",
                len(self.server_state.tasks),
                self.config.timeout_graceful_shutdown,
            )
            for task in self.server_state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        if not self.force_exit:
            await self.lifespan.shutdown()


@asynccontextmanager
async def serve_http(
    app: ASGIApp,
    sock: socket.socket,
    *,
    access_log: bool = False,
    before_stop: Callable[[], Awaitable[None]] | None = None,
) -> AsyncGenerator[str, None]:
    """Serve `app` on the bound `sock` until the block ends; yields the base URL.

    With `access_log`, uvicorn logs one line per request, with the values of `REDACTED_QUERY_PARAMS`
    replaced by `***`. `before_stop` is awaited (shielded) when the block ends, before uvicorn stops: it
    ends the responses that would otherwise stay open (`FactsEndpoint.close`).
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
        timeout_keep_alive=KEEP_ALIVE_S,
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
            if before_stop is not None:
                with anyio.CancelScope(shield=True):
                    await before_stop()
            server.stop()


@asynccontextmanager
async def serve_locally(host: Host, *, api: bool = False) -> AsyncGenerator[str, None]:
    """The run endpoints of the host (`app.run_app`; `api`: the whole app, `/v1` included) on an
    ephemeral loopback port for the block, with `public_url` pointing at it."""
    sock = bind_socket("127.0.0.1", 0)
    app = build_app(host) if api else run_app(host)
    with sock:
        async with serve_http(app, sock, before_stop=host.facts.close) as url:
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
    released = orchestrator.release_remote()
    if released:
        logger.warning(
            "%d run(s) executing on runtimes left running there for the next host to adopt", len(released)
        )
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


PRELOAD_AFTER_S = 1.0
"""How long a serving host waits for its first answered request before it loads the MCP server anyway."""


class FirstAnswer:
    """The app, noting when it has finished answering its first HTTP request (`answered`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.answered = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.answered.is_set():
            await self.app(scope, receive, send)
            return

        async def noting(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                self.answered.set()

        await self.app(scope, receive, noting)


@asynccontextmanager
async def warm_up(host: Host, answered: anyio.Event) -> AsyncGenerator[None, None]:
    """Once serving, in the background: start the plugins no agent of the config uses (runs need none of
    them; `/v1/runners` and the metrics list them once up), and load the per-run MCP server
    (`FactsEndpoint.preload`, so a run's first MCP call does not wait for its imports) once the first
    request is answered, or after `PRELOAD_AFTER_S` if none comes: its import takes the interpreter for
    a third of a second or more, and the first request (a readiness probe, an event) is answered
    before it (a run's own MCP call that comes first loads it then). Cancelled if the host stops first."""

    async def preload() -> None:
        with anyio.move_on_after(PRELOAD_AFTER_S):
            await answered.wait()
        host.facts.preload()

    async with anyio.create_task_group() as background:
        background.start_soon(host.registry.ready)
        background.start_soon(preload)
        try:
            yield
        finally:
            background.cancel_scope.cancel()


async def serve(
    settings: Settings,
    *,
    listen: str | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    limits: ApiLimits | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """`mcphost serve`: the host over HTTP until SIGTERM/SIGINT, then a graceful, bounded shutdown."""
    settings, bind_host, port = listen_of(settings, listen)
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        sock = bind_socket(bind_host, port)
        with sock:
            async with open_host(settings) as host:
                url = socket_url(sock)
                if settings.host.public_url is None:
                    host.orchestrator.public_url = url
                app = build_app(host, limits=limits)
                first = FirstAnswer(app)
                data_dir, public_url = settings.host.data_dir, host.orchestrator.public_url
                async with (
                    serve_http(first, sock, access_log=True, before_stop=host.facts.close),
                    warm_up(host, first.answered),
                ):
                    with _serving_record(data_dir, public_url):
                        gcstart.resume()  # up: the start-up's objects are frozen out of the collector's way
                        logger.info("serving on %s (public URL %s)", url, host.orchestrator.public_url)
                        if on_ready is not None:
                            on_ready(url)
                        async for signum in signals:
                            logger.warning("received %s", signum.name)
                            break
                        from mcphost.api import ApiState

                        state = app.state.api
                        assert isinstance(state, ApiState)
                        await drain(host, state, grace_s, signals)
                logger.info("HTTP server stopped; stopping plugins")
    logger.info("stopped")
