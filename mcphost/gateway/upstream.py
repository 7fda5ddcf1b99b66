"""One upstream MCP server from `[tools.<server>]` and the supervised client the gateway keeps for it.

Owns the connection's life (an explicit state machine: idle → connecting → ready ⇄ backoff → closed),
the cached tool list with its host names, and single proxied calls with their error mapping. Does not own
grants, artifacts or telemetry (`host_tools.py`, which holds one `Upstream` per server), nor the
states, status models, names and error it reports in (`status.py`, which needs no `mcp`).

Invariants:
- One client per server, owned by `supervise`, a task the gateway's task group owns: it connects lazily
  (when a caller first needs the server), notices a dead connection (the transport's read stream ends,
  or a call fails with a closed connection) and reconnects on the next need — at once after a connection
  that was up, after a jittered exponential backoff (`mcphost.common.backoff`: `BACKOFF_INITIAL_S`
  doubling to `BACKOFF_MAX_S`, reset by a good connection) after a failed attempt, so hosts that lost a
  shared server together do not all come back at the same instant. While backing off, callers fail at
  once with the time left.
- Every wait of a caller is bounded by the caller (a cancel scope around `client()`, `tools()`, `call()`);
  a handshake in the background gives up after `connect_timeout`. Failures are `HostError`s:
  `UpstreamError` (`runtime_error`, retryable), `DeadlineExceededError`, or the upstream's JSON-RPC
  refusal mapped to `invalid_argument` / `not_found`.
- A call that never reached the upstream (its HTTP session was gone after a restart) is retried once on
  a fresh connection; a call that may have reached it is never retried (tools may have side effects).
- The tool list is refreshed when the upstream sends `tools/list_changed`, when older than the TTL, after
  a reconnect, or when asked (`mark_stale`). Host names are `<server>__<tool>` with characters outside
  `[A-Za-z0-9_-]` replaced by `_`; tools keep their description and input schema but not their output
  schema (an oversized result is replaced by a preview, which could not satisfy it).
- A traced call reaches an HTTP upstream with the W3C trace context of the host's client span twice: in
  the request's `_meta` (the MCP convention; stdio upstreams get only this) and as the HTTP headers
  `traceparent`/`tracestate` (what HTTP middleware and proxies in front of the upstream read).
- Header and environment values may reference `${NAME}`; they are expanded from the given environment
  when connecting and never logged. Stdio servers get only the SDK's safe default environment plus their
  `env`, in the given working folder.
"""

from __future__ import annotations

import logging
import math
import re
import sys
import time
import urllib.parse
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO, cast

import anyio
import httpx2
import mcp_types as types
from anyio.abc import TaskStatus
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from mcphost import __version__, tracing
from mcphost.common.backoff import Backoff
from mcphost.config import ToolServerConfig
from mcphost.errors import (
    ConfigError,
    DeadlineExceededError,
    HostError,
    InvalidArgumentError,
    NotFoundError,
)
from mcphost.gateway.status import (
    BACKOFF_INITIAL_S,
    BACKOFF_MAX_S,
    SEPARATOR,
    TOOLS_TTL_S,
    HostToolInfo,
    ServerStatus,
    UpstreamError,
    UpstreamState,
    describe_failure,
    expand_env,
    host_name,
)
from mcphost.protocol import JSONObject

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 30.0
MAX_TOOL_PAGES = 50
_SERVER_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*$")

_TRANSITIONS: Mapping[UpstreamState, frozenset[UpstreamState]] = {
    UpstreamState.IDLE: frozenset({UpstreamState.CONNECTING, UpstreamState.CLOSED}),
    UpstreamState.CONNECTING: frozenset({UpstreamState.READY, UpstreamState.BACKOFF, UpstreamState.CLOSED}),
    UpstreamState.READY: frozenset({UpstreamState.BACKOFF, UpstreamState.CLOSED}),
    UpstreamState.BACKOFF: frozenset({UpstreamState.CONNECTING, UpstreamState.CLOSED}),
    UpstreamState.CLOSED: frozenset(),
}


class _WatchedReadStream:
    """The transport's read stream, reporting when it ends (the upstream went away)."""

    def __init__(self, inner: Any, on_end: anyio.Event) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end.set()
            raise

    async def aclose(self) -> None:
        self._on_end.set()
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedReadStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class _Transport:
    """The SDK transport for one server, with a watched read stream (and the HTTP client it owns)."""

    def __init__(self, open_streams: Any, lost: anyio.Event, owned: httpx2.AsyncClient | None) -> None:
        self._open = open_streams
        self._lost = lost
        self._owned = owned
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> tuple[Any, Any]:
        async with AsyncExitStack() as stack:
            if self._owned is not None:
                await stack.enter_async_context(self._owned)
            read, write = await stack.enter_async_context(self._open)
            self._stack = stack.pop_all()
        return _WatchedReadStream(read, self._lost), write

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self._lost.set()
        return await self._stack.__aexit__(exc_type, exc, tb)


def _with_fileno(stream: TextIO) -> TextIO:
    """`stream` when a subprocess can write to it, else the process's original stderr (a replaced
    `sys.stderr`, such as a test's capture buffer, has no file descriptor)."""
    try:
        stream.fileno()
    except (OSError, ValueError, AttributeError):
        return sys.__stderr__ or stream
    return stream


async def _trace_headers(request: httpx2.Request) -> None:
    """Put the W3C trace context of the current span on `request` as `traceparent`/`tracestate` headers.

    The SDK sends each request from a task that runs in the context of the task that made the call, so a
    `tools/call` made inside the host's client span carries that span's context, the same one as its
    `_meta`; the handshake and the listening stream, made by `supervise`, carry none (nor does anything
    with tracing off)."""
    request.headers.update(tracing.carrier())


@dataclass
class _Catalog:
    tools: list[types.Tool]
    fetched_at: float
    by_host_name: dict[str, str] = field(default_factory=dict[str, str])
    """host name → upstream tool name."""


class Upstream:
    """One upstream MCP server and its supervised client."""

    def __init__(
        self,
        name: str,
        config: ToolServerConfig,
        *,
        environ: Mapping[str, str],
        cwd: Path | None,
        errlog: TextIO,
        backoff_initial_s: float = BACKOFF_INITIAL_S,
        backoff_max_s: float = BACKOFF_MAX_S,
        tools_ttl_s: float = TOOLS_TTL_S,
    ) -> None:
        if not _SERVER_NAME.match(name) or name.endswith("_"):
            raise ConfigError(
                f"[tools.{name}]: a tool server name may hold letters, digits, '-' and single '_' "
                f"(not {SEPARATOR!r}, which separates server and tool in '<server>{SEPARATOR}<tool>')."
            )
        self.name = name
        self.config = config
        self._environ = environ
        self._cwd = cwd
        self._errlog = errlog
        self._backoff = Backoff(backoff_initial_s, backoff_max_s)
        self._ttl = tools_ttl_s
        self.state = UpstreamState.IDLE
        self.last_error: str | None = None
        self.connects = 0
        self.retry_at = 0.0
        self._client: Client | None = None
        self._want = anyio.Event()
        self._attempt_done = anyio.Event()
        self._lost = anyio.Event()
        self._was_ready = False
        self._attempt_failed = False
        self._catalog: _Catalog | None = None
        self._stale = False
        self._refresh_lock = anyio.Lock()

    @property
    def connect_timeout(self) -> float:
        """How long a handshake may take: a slow starter keeps connecting after its first caller gave up."""
        return max(self.config.timeout_s, CONNECT_TIMEOUT_S)

    @property
    def transport(self) -> str:
        return "stdio" if self.config.command is not None else "http"

    @property
    def target(self) -> str:
        """The command without its arguments, or the URL without credentials, query or fragment: what
        may be shown to anyone who may see the server (arguments and queries can carry secrets)."""
        if self.config.command is not None:
            return self.config.command[0]
        url = urllib.parse.urlsplit(self.config.url or "")
        host = url.netloc.rpartition("@")[2]
        return urllib.parse.urlunsplit((url.scheme, host, url.path, "", ""))

    def _move(self, state: UpstreamState) -> None:
        assert state in _TRANSITIONS[self.state], f"upstream {self.name!r}: {self.state} → {state}"
        self.state = state

    # -- the supervisor ------------------------------------------------------------------------------------

    def _transport(self, lost: anyio.Event) -> _Transport:
        cfg = self.config
        if cfg.command is not None:
            env = {
                k: expand_env(v, self._environ, where=f"[tools.{self.name}].env.{k}")
                for k, v in cfg.env.items()
            }
            params = StdioServerParameters(
                command=cfg.command[0], args=list(cfg.command[1:]), env=env, cwd=self._cwd
            )
            return _Transport(stdio_client(params, errlog=_with_fileno(self._errlog)), lost, None)
        headers = {
            k: expand_env(v, self._environ, where=f"[tools.{self.name}].headers.{k}")
            for k, v in cfg.headers.items()
        }
        http = httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(cfg.timeout_s, read=None),
            event_hooks={"request": [_trace_headers]},
        )
        return _Transport(streamable_http_client(cfg.url or "", http_client=http), lost, http)

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            logger.info("tool server %s changed its tool list", self.name)
            self._stale = True

    async def supervise(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect whenever a caller wants the server, keep the connection until it is lost, repeat.

        A connection that was up and got lost is retried at once; a failed attempt backs off. Runs until
        cancelled (by the gateway's task group)."""
        task_status.started()
        try:
            while True:
                await self._want.wait()
                self._want = anyio.Event()
                delay = self.retry_at - time.monotonic()
                if delay > 0:
                    await anyio.sleep(delay)
                self._move(UpstreamState.CONNECTING)
                self._lost = anyio.Event()
                self._was_ready = False
                try:
                    await self._connection(self._lost)
                except Exception as exc:
                    self.last_error = describe_failure(exc)
                    logger.warning("tool server %s: %s", self.name, self.last_error)
                self._client = None
                self._move(UpstreamState.BACKOFF)
                if self._was_ready:
                    self.retry_at = time.monotonic()
                    self._attempt_failed = False
                else:
                    self.retry_at = time.monotonic() + self._backoff.next()
                    self._attempt_failed = True
                self._finish_attempt()
        finally:
            self._client = None
            if self.state is not UpstreamState.CLOSED:
                self._move(UpstreamState.CLOSED)
            self._finish_attempt()

    def _finish_attempt(self) -> None:
        done, self._attempt_done = self._attempt_done, anyio.Event()
        done.set()

    async def _connection(self, lost: anyio.Event) -> None:
        """One connection, from the handshake (bounded by `connect_timeout`) until it is lost."""
        with anyio.CancelScope(deadline=anyio.current_time() + self.connect_timeout) as scope:
            client = Client(
                self._transport(lost),
                mode="legacy",
                message_handler=self._on_message,
                client_info=types.Implementation(name="mcphost", version=__version__),
                cache=None,
            )
            async with client:
                scope.deadline = math.inf
                self._client = client
                self._was_ready = True
                self.connects += 1
                self.last_error = None
                self._backoff.reset()
                self._stale = True
                self._move(UpstreamState.READY)
                logger.info("tool server %s connected (%s %s)", self.name, self.transport, self.target)
                self._finish_attempt()
                await lost.wait()
                self.last_error = "the connection was lost; reconnecting on the next call"
        if scope.cancelled_caught:
            raise UpstreamError(f"no handshake within {self.connect_timeout:g} s")

    # -- what callers use ----------------------------------------------------------------------------------

    def _unavailable(self) -> UpstreamError:
        wait = max(0.0, self.retry_at - time.monotonic())
        return UpstreamError(
            f"Tool server {self.name!r} is unavailable ({self.last_error or 'not connected'}); "
            f"the host retries in {wait:.1f} s. Try again later or do without it.",
            details={"server": self.name, "retry_in_s": round(wait, 1)},
        )

    async def client(self) -> Client:
        """The connected client, connecting first when needed (bound the wait with a cancel scope).

        Raises:
            UpstreamError: the server is backing off after a failure, or this attempt failed.
        """
        for _ in range(3):
            if self.state is UpstreamState.READY and self._client is not None and not self._lost.is_set():
                return self._client
            if self.state is UpstreamState.CLOSED:
                raise UpstreamError(f"The tool gateway is shut down; tool server {self.name!r} is closed.")
            if self.state is UpstreamState.BACKOFF and time.monotonic() < self.retry_at:
                raise self._unavailable()
            attempt = self._attempt_done
            self._want.set()
            await attempt.wait()
            if self.state is UpstreamState.READY and self._client is not None:
                return self._client
            if self._attempt_failed:
                raise self._unavailable()
            # The wait ended a lost connection rather than an attempt: wait for the reconnect.
        raise self._unavailable()

    def connection_lost(self) -> None:
        """A call found the connection closed: drop it (the next caller reconnects)."""
        self._lost.set()

    def mark_stale(self) -> None:
        """Refresh the tool list at its next use."""
        self._stale = True

    async def tools(self) -> _Catalog:
        """The cached tool list, refreshed when stale (list_changed, TTL, reconnect)."""
        catalog = self._catalog
        fresh = catalog is not None and not self._stale and time.monotonic() - catalog.fetched_at < self._ttl
        if fresh and catalog is not None:
            return catalog
        async with self._refresh_lock:
            catalog = self._catalog
            if catalog is not None and not self._stale and time.monotonic() - catalog.fetched_at < self._ttl:
                return catalog
            return await self._refresh()

    async def _refresh(self) -> _Catalog:
        client = await self.client()
        self._stale = False
        tools: list[types.Tool] = []
        cursor: str | None = None
        try:
            for _ in range(MAX_TOOL_PAGES):
                page = await client.list_tools(cursor=cursor, cache_mode="bypass")
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
        except MCPError as exc:
            self._stale = True
            if exc.code == types.CONNECTION_CLOSED:
                self.connection_lost()
            raise UpstreamError(
                f"Tool server {self.name!r} failed to list its tools: {exc.message[:300]}"
            ) from None
        except (ValidationError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._stale = True
            self.connection_lost()
            raise UpstreamError(
                f"Tool server {self.name!r} sent an unusable tool list: {describe_failure(exc)}"
            ) from None
        catalog = _Catalog(tools=[], fetched_at=time.monotonic())
        for tool in tools:
            exposed = host_name(self.name, tool.name)
            if exposed in catalog.by_host_name:
                logger.warning(
                    "tool server %s: tools %r and %r both map to %s; keeping the first",
                    self.name,
                    catalog.by_host_name[exposed],
                    tool.name,
                    exposed,
                )
                continue
            catalog.by_host_name[exposed] = tool.name
            catalog.tools.append(tool.model_copy(update={"name": exposed, "output_schema": None}))
        self._catalog = catalog
        return catalog

    def cached_tools(self) -> list[types.Tool]:
        return list(self._catalog.tools) if self._catalog is not None else []

    async def call(
        self, tool: str, arguments: JSONObject, *, timeout: float, meta: Mapping[str, str] | None = None
    ) -> types.CallToolResult:
        """Call `tool` upstream within `timeout` seconds (connecting first if needed); `meta` goes into
        the request's `_meta` (the W3C trace context of the host's span around the call).

        Raises:
            DeadlineExceededError: no answer within `timeout`.
            UpstreamError: unreachable, connection closed, or an unusable answer.
            NotFoundError / InvalidArgumentError-like HostErrors for the upstream's JSON-RPC refusals.
        """
        with anyio.move_on_after(timeout):
            for attempt in (1, 2):
                client = await self.client()
                try:
                    return await client.call_tool(
                        tool,
                        dict(arguments),
                        read_timeout_seconds=timeout,
                        # `_meta` is open: the MCP convention puts `traceparent` and `tracestate` there.
                        meta=cast("types.RequestParamsMeta", dict(meta)) if meta else None,
                    )
                except MCPError as exc:
                    if exc.code == types.REQUEST_TIMEOUT:
                        break
                    if (
                        exc.code == types.INVALID_REQUEST
                        and "Session terminated" in exc.message
                        and attempt == 1
                    ):
                        # The upstream restarted and forgot our session: the call never ran. Reconnect, retry.
                        self.connection_lost()
                        continue
                    raise self._refusal(tool, exc) from None
                except (ValidationError, RuntimeError) as exc:
                    raise UpstreamError(
                        f"Tool server {self.name!r} answered {tool!r} with a malformed result: {describe_failure(exc)}"
                    ) from None
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, httpx2.HTTPError) as exc:
                    self.connection_lost()
                    raise UpstreamError(
                        f"Tool server {self.name!r} connection failed during {tool!r}: {describe_failure(exc)}"
                    ) from None
        raise DeadlineExceededError(
            f"Tool server {self.name!r} did not answer {tool!r} within {timeout:.1f} s; the call was "
            "abandoned (the run continues).",
            details={"server": self.name, "timeout_s": round(timeout, 3)},
        )

    def _refusal(self, tool: str, exc: MCPError) -> HostError:
        detail = exc.message[:500]
        if exc.code == types.CONNECTION_CLOSED:
            self.connection_lost()
            return UpstreamError(
                f"Tool server {self.name!r} closed the connection during {tool!r} ({detail}); it may have "
                "crashed. The host reconnects on the next call.",
                details={"server": self.name},
            )
        if exc.code == types.INVALID_PARAMS:
            error: HostError = InvalidArgumentError(
                f"Tool server {self.name!r} refused the arguments of {tool!r}: {detail}"
            )
        elif exc.code == types.METHOD_NOT_FOUND:
            error = NotFoundError(f"Tool server {self.name!r} does not know {tool!r}: {detail}")
        else:
            error = UpstreamError(f"Tool server {self.name!r} failed {tool!r}: {detail}")
        error.details.update({"server": self.name, "upstream_code": exc.code})
        return error

    def status(self) -> ServerStatus:
        return ServerStatus(
            server=self.name,
            transport=self.transport,
            target=self.target,
            state=self.state,
            last_error=self.last_error,
            connects=self.connects,
            tools=[
                HostToolInfo(
                    name=t.name,
                    tool=(self._catalog.by_host_name if self._catalog else {}).get(t.name, t.name),
                    description=t.description,
                )
                for t in self.cached_tools()
            ],
        )
