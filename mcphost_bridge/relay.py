"""The stdio ⇄ Streamable HTTP relay behind `mcphost-bridge`.

Owns one MCP stdio peer (newline-delimited JSON-RPC on stdin/stdout) and its conversation with one Streamable
HTTP endpoint, in either protocol era, until stdin ends, a signal arrives or the endpoint fails for good. It does
not own argument parsing or logging setup (`__main__`), nor any MCP semantics beyond the headers.

The HTTP side is the SDK's own client transport, `mcp.client.streamable_http.streamable_http_client`: one POST
per message, JSON or SSE responses (priming events, `Last-Event-ID` resumption), the `Mcp-Session-Id` taken from
the initialize response, the GET stream it opens once `notifications/initialized` has gone out (handshake era
only: a 2026-07-28 exchange has no session), 2026-era cancellation by aborting the request's POST instead of
posting `notifications/cancelled`, and the DELETE on the way out. This module feeds it the client's messages
stamped with the per-message headers (`_stamp.HeaderStamp`), writes whatever it yields to stdout, and watches
every HTTP exchange (`_WatchedClient`) for the failures that end the bridge.

Invariants:
- stdout carries JSON-RPC messages only, one per line; diagnostics go to stderr through `logging`. The token
  lives only in the HTTP client's default headers and is never logged.
- Ids and payloads pass through unchanged. Messages are parsed into the SDK's envelope models and serialized
  back, so members outside the JSON-RPC envelope are dropped and the JSON spelling may change, not the values.
- The first fatal failure — 401/403, a 404 that is not a JSON-RPC error for a request, an endpoint that cannot
  be reached within `timeout` — cancels everything; each request still awaiting an answer gets a JSON-RPC error
  carrying the reason, and `run_bridge` raises `BridgeError` with a one-line message.
- After an `initialize` request nothing more is sent until its answer is in (the session id comes with it),
  so a client may pipeline `initialize`, `notifications/initialized` and `tools/list` without waiting.
- A first message already answered by `_first` (before this module was imported) is not sent again: it
  goes through the SDK transport like any other, and `_WatchedClient` answers its POST with the response
  the endpoint gave then, so the transport takes the session id and the stamp the version from it as from
  a live one; that answer is not written to stdout a second time.
- Every wait on the way out is bounded by `timeout`: draining unanswered requests after stdin ends, the DELETE.
  A signal skips the draining. Connecting is bounded by `timeout` too; reading is not (the client decides how
  long an answer may take and cancels, which the SDK transport turns into a `notifications/cancelled` POST in
  the handshake era and into aborting the request's POST in the 2026 era).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO, TypeGuard, cast

import anyio
import httpx2
from mcp.client._transport import ReadStream, WriteStream
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import ClientMessageMetadata, SessionMessage
from mcp_types import (
    CONNECTION_CLOSED,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

from mcphost_bridge._first import DEFAULT_TOKEN_ENV, FirstExchange, http_headers
from mcphost_bridge._lines import LineReader, Rejection, parse_line
from mcphost_bridge._stamp import HeaderStamp

__all__ = ["DEFAULT_TOKEN_ENV", "BridgeConfig", "BridgeError", "run_bridge"]

logger = logging.getLogger(__name__)


_REFUSED = frozenset({401, 403})
_WATCHED = frozenset({401, 403, 404})


@dataclass(frozen=True)
class BridgeConfig:
    """What one bridge connects to and how."""

    url: str
    """The Streamable HTTP MCP endpoint, e.g. `http://127.0.0.1:8765/runs/run_01.../mcp`."""
    token: str | None = field(default=None, repr=False)
    """Sent as `Authorization: Bearer <token>` on every HTTP request; never logged."""
    headers: Mapping[str, str] = field(default_factory=dict[str, str])
    """Extra headers sent on every HTTP request."""
    timeout: float = 10.0
    """Seconds allowed to connect, and for each step of shutting down."""
    token_env: str = DEFAULT_TOKEN_ENV
    """Where the token came from, named in the hint when the server refuses a request sent without one."""


class BridgeError(Exception):
    """The bridge cannot go on; the message is one line fit for stderr."""


@dataclass(frozen=True)
class _Failure:
    description: str
    """The one-line stderr message."""
    reply_code: int = CONNECTION_CLOSED
    reply_message: str = ""
    """The error sent to requests still awaiting an answer (the server's own words when it gave any)."""


async def run_bridge(
    config: BridgeConfig,
    *,
    stdin_fd: int | None = None,
    stdout: BinaryIO | None = None,
    handle_signals: bool = True,
    first: FirstExchange | None = None,
) -> int:
    """Relay until stdin ends (returns 0) or SIGINT/SIGTERM (returns 128 + signal).

    `first` is what `_first.first_exchange` left: stdin bytes it read, and the first message it answered.

    Raises:
        BridgeError: The endpoint refused the token, was not found, could not be reached, or went away.
    """
    relay = _Relay(
        config,
        stdin_fd=sys.stdin.fileno() if stdin_fd is None else stdin_fd,
        stdout=sys.stdout.buffer if stdout is None else stdout,
        handle_signals=handle_signals,
        first=first or FirstExchange(b""),
    )
    return await relay.run()


class _Relay:
    """One bridge run: the two pumps (stdin → SDK transport, SDK transport → stdout), pending requests, exit."""

    def __init__(
        self,
        config: BridgeConfig,
        *,
        stdin_fd: int,
        stdout: BinaryIO,
        handle_signals: bool,
        first: FirstExchange,
    ) -> None:
        self._config = config
        self._first = first
        # The id of the first message when `_first` wrote its answer already: not written again.
        self._echoed: tuple[type, RequestId] | None = None
        self._endpoint = _display_url(config.url)
        self._stdin_fd = stdin_fd
        self._stdout: BinaryIO | None = stdout
        self._handle_signals = handle_signals
        self._stamp = HeaderStamp()
        # Requests sent and not yet answered: (id type, id) → method. Typed keys keep "1" and 1 apart.
        self._pending: dict[tuple[type, RequestId], str] = {}
        self._answered = anyio.Event()
        self._failure: _Failure | None = None
        self._scope = anyio.CancelScope()  # everything; cancelled by the first fatal failure
        self._stop_scope = anyio.CancelScope()  # reading stdin and draining; cancelled by a signal
        self._exit_code = 0

    async def run(self) -> int:
        config = self._config
        headers = http_headers(config.headers, config.token)
        # No read timeout: the GET stream idles for as long as the session lives, and a slow answer is the
        # client's to give up on (it cancels; see the module docstring). A read timeout inside the SDK
        # transport would end the whole transport, not just the one request.
        timeout = httpx2.Timeout(config.timeout, read=None)
        http = _WatchedClient(
            config, self._endpoint, self._fail, self._first, headers=headers, timeout=timeout
        )
        try:
            async with http:
                with self._scope:
                    async with streamable_http_client(config.url, http_client=http) as (read, write):
                        await self._relay(read, write)
                        # Leaving the block sends the DELETE (when there is a session): bound it.
                        self._scope.deadline = anyio.current_time() + config.timeout
                if self._scope.cancelled_caught and self._failure is None:
                    logger.warning("the session was not closed within %gs", config.timeout)
        except* (httpx2.HTTPError, anyio.BrokenResourceError, anyio.ClosedResourceError) as group:
            if self._failure is None:
                self._failure = _Failure(f"lost the connection to {self._endpoint}: {_first_reason(group)}")
        if self._failure is not None:
            self._answer_pending(self._failure)
            raise BridgeError(self._failure.description)
        return self._exit_code

    def _fail(self, failure: _Failure) -> None:
        if self._failure is None:
            self._failure = failure
        self._scope.cancel()

    async def _relay(
        self, read: ReadStream[SessionMessage | Exception], write: WriteStream[SessionMessage]
    ) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._server_to_stdout, read)
            if self._handle_signals:
                tg.start_soon(self._stop_on_signal)
            with self._stop_scope:
                await self._stdin_to_server(write)
                await self._drain()
            tg.cancel_scope.cancel()

    async def _drain(self) -> None:
        """After stdin ends, relay the answers still owed for up to `timeout` seconds."""
        with anyio.move_on_after(self._config.timeout):
            while self._pending:
                self._answered = anyio.Event()
                await self._answered.wait()
        if self._pending:
            logger.warning("stdin ended with %d request(s) still unanswered; giving up", len(self._pending))

    async def _stdin_to_server(self, write: WriteStream[SessionMessage]) -> None:
        lines = LineReader(self._stdin_fd, unread=self._first.unread)
        if self._first.request is not None:
            opening = jsonrpc_message_adapter.validate_python(self._first.request, by_name=False)
            if isinstance(opening, JSONRPCRequest):
                self._echoed = _key(opening.id)
            await self._forward(opening, write)
        while (line := await lines.readline()) is not None:
            if not line.strip():
                continue
            parsed = parse_line(line)
            if isinstance(parsed, Rejection):
                if parsed.reply is None:
                    logger.warning("ignored a stdin line that is %s; it has no id to answer", parsed.reason)
                else:
                    logger.warning(
                        "answered a stdin line that is %s with error %d",
                        parsed.reason,
                        parsed.reply.error.code,
                    )
                    self._emit(parsed.reply)
                continue
            await self._forward(parsed, write)

    async def _forward(self, message: JSONRPCMessage, write: WriteStream[SessionMessage]) -> None:
        headers = self._stamp.headers_for(message)
        if isinstance(message, JSONRPCRequest):
            self._pending[_key(message.id)] = message.method
        elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
            # A cancelled request may never be answered: stop waiting for it.
            request_id = (message.params or {}).get("requestId")
            if isinstance(request_id, str | int):
                self._settle(request_id)
        metadata = ClientMessageMetadata(headers=headers) if headers else None
        await write.send(SessionMessage(message, metadata=metadata))
        if isinstance(message, JSONRPCRequest) and message.method == "initialize":
            # The SDK transport posts each request from a task of its own and takes the session id from
            # the initialize response: a message a pipelining client sent right behind `initialize` would
            # go out first, without the id ("Missing session ID"). Hold the rest until the answer is in.
            await self._settled(message.id)

    async def _settled(self, request_id: RequestId) -> None:
        while _key(request_id) in self._pending:
            self._answered = anyio.Event()
            await self._answered.wait()

    async def _server_to_stdout(self, read: ReadStream[SessionMessage | Exception]) -> None:
        async for item in read:
            if isinstance(item, Exception):
                logger.warning("transport error from %s: %s", self._endpoint, item)
                continue
            message = item.message
            if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id is not None:
                method = self._settle(message.id)
                if method is not None and isinstance(message, JSONRPCResponse):
                    self._stamp.observe_result(method, message.result)
                if self._echoed is not None and _key(message.id) == self._echoed:
                    self._echoed = None
                    continue  # `_first` wrote this answer already
            self._emit(message)
        self._fail(_Failure(f"the connection to {self._endpoint} closed"))

    def _settle(self, request_id: RequestId) -> str | None:
        method = self._pending.pop(_key(request_id), None)
        self._answered.set()
        return method

    async def _stop_on_signal(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                logger.info("received signal %d; closing the session", signum)
                self._exit_code = 128 + signum
                self._stop_scope.cancel()
                return

    def _emit(self, message: JSONRPCMessage) -> None:
        if self._stdout is None:
            return
        line = message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
        try:
            self._stdout.write(line)
            self._stdout.flush()
        except (OSError, ValueError):  # ValueError: the stream was closed
            logger.info("stdout is closed; shutting down")
            self._stdout = None
            self._stop_scope.cancel()

    def _answer_pending(self, failure: _Failure) -> None:
        pending, self._pending = self._pending, {}
        for _, request_id in pending:
            error = ErrorData(code=failure.reply_code, message=failure.reply_message or failure.description)
            self._emit(JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


class _WatchedClient(httpx2.AsyncClient):
    """The SDK transport's HTTP client: every exchange passes through `send`, which reports the fatal ones.

    A refusal (401/403), or a 404 whose body is not a JSON-RPC error for a request id (a 2026 server answers an
    unknown method with 404 and such a body), ends the bridge, and so does failing to connect. The DELETE sent on
    the way out is exempt: by then the bridge is leaving anyway. Watching `send` rather than the transport keeps
    httpx2's proxy mounts in play; the SDK's `stream_within_origin` sends everything through it.
    """

    def __init__(
        self,
        config: BridgeConfig,
        endpoint: str,
        on_failure: Callable[[_Failure], None],
        first: FirstExchange,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._config = config
        self._endpoint = endpoint
        self._on_failure = on_failure
        self._replay = first if first.request is not None else None

    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        if self._replay is not None and self._replays(request, self._replay):
            first, self._replay = self._replay, None
            headers = {"content-type": "application/json"}
            if first.session_id:
                headers["mcp-session-id"] = first.session_id
            return httpx2.Response(200, headers=headers, content=first.answer, request=request)
        try:
            response = await super().send(request, **kwargs)
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
            if request.method != "DELETE":
                timed_out = isinstance(exc, httpx2.ConnectTimeout)
                reason = f"no connection within {self._config.timeout:g}s" if timed_out else str(exc)
                self._on_failure(_Failure(f"cannot reach {self._endpoint}: {reason or type(exc).__name__}"))
            raise
        if request.method != "DELETE" and response.status_code in _WATCHED:
            body = await response.aread()
            failure = self._judge(response.status_code, body, has_session="mcp-session-id" in request.headers)
            if failure is not None:
                self._on_failure(failure)
        return response

    @staticmethod
    def _replays(request: httpx2.Request, first: FirstExchange) -> bool:
        """Whether `request` is the POST of the first message, answered already by `_first`."""
        if request.method != "POST" or first.request is None:
            return False
        try:
            sent: Any = json.loads(request.content)
        except ValueError:
            return False
        if not isinstance(sent, dict):
            return False
        body = cast("dict[str, Any]", sent)
        request_id = first.request.get("id")
        same_id = type(body.get("id")) is type(request_id) and body.get("id") == request_id
        return same_id and body.get("method") == first.request.get("method")

    def _judge(self, status: int, body: bytes, *, has_session: bool) -> _Failure | None:
        error = _jsonrpc_error(body)
        if status == 404 and error is not None and error.id is not None:
            return None
        said = error.error.message if error is not None else ""
        code = error.error.code if error is not None else CONNECTION_CLOSED
        if status in _REFUSED:
            hint = "" if self._config.token else f" (no token was sent: set {self._config.token_env})"
            reason = said or "no reason given"
            return _Failure(
                f"{self._endpoint} refused the request (HTTP {status}): {reason}{hint}", code, said
            )
        detail = f": {said}" if said else ""
        if has_session:
            description = f"{self._endpoint} no longer knows this session (HTTP 404{detail}); restart the client for a new one"
        else:
            description = f"{self._endpoint} was not found (HTTP 404{detail}); check --url"
        return _Failure(description, code, said)


def _jsonrpc_error(body: bytes) -> JSONRPCError | None:
    try:
        message = jsonrpc_message_adapter.validate_json(body, by_name=False)
    except ValidationError:
        return None
    return message if isinstance(message, JSONRPCError) else None


def _key(request_id: RequestId) -> tuple[type, RequestId]:
    return (type(request_id), request_id)


def _display_url(url: str) -> str:
    """The endpoint without userinfo, query or fragment, which may carry secrets."""
    try:
        return str(httpx2.URL(url).copy_with(userinfo=b"", query=None, fragment=None))
    except httpx2.InvalidURL:
        return "the endpoint"


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _first_reason(group: BaseExceptionGroup[BaseException]) -> str:
    leaf: BaseException = group
    while _is_group(leaf) and leaf.exceptions:
        leaf = leaf.exceptions[0]
    return _reason(leaf)


def _is_group(exc: BaseException) -> TypeGuard[BaseExceptionGroup[BaseException]]:
    """`isinstance(exc, BaseExceptionGroup)` with the members typed (a bare `isinstance` leaves them unknown)."""
    return isinstance(exc, BaseExceptionGroup)
