"""The stdio ⇄ Streamable HTTP relay behind `mcphost-bridge`, in the standard library.

Owns one MCP stdio peer (newline-delimited JSON-RPC on stdin/stdout) and its conversation with one Streamable
HTTP endpoint, in either protocol era, until stdin ends, a signal arrives or the endpoint fails for good. Not
argument parsing or logging (`__main__`), HTTP plumbing (`_http`), stdin framing (`_lines`), per-message
headers (`_stamp`) nor judging refusals (`_config`).

It does what the SDK's client transport (`mcp.client.streamable_http`) does, with a thread per request in
flight instead of an event loop, so that nothing but the standard library is imported: one POST per message,
JSON or SSE answers (priming events, `Last-Event-ID` resumption over GET), the `Mcp-Session-Id` from the
initialize answer, the GET stream once `notifications/initialized` goes out (handshake era only), 2026-era
cancellation by aborting the request's POST instead of posting `notifications/cancelled`, and the DELETE
on the way out.

Invariants:
- stdout carries JSON-RPC messages only, one per line (envelope members only, compact JSON: the spelling
  may change, not the values); diagnostics go to stderr through `logging`; the token is never logged.
- The first fatal failure (401/403, a 404 that is not a JSON-RPC error for a request, an endpoint that
  cannot be reached within `timeout`, a connection lost mid-exchange) stops everything; each request still
  owed an answer gets a JSON-RPC error with the reason, and `run_bridge` raises `BridgeError`.
- After an `initialize` request nothing more is sent until its answer is in (the session id comes with
  it), so a client may pipeline `initialize`, `notifications/initialized` and `tools/list`.
- Every wait on the way out is bounded by `timeout` (draining after stdin ends, the DELETE); a signal skips
  the draining. Connecting is bounded too; reading is not (the client decides how long an answer may take).
- State shared between threads changes only under `_lock`; stdout is written under `_out`, a line at a time.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO, cast

from mcphost_bridge._config import (
    CONNECTION_CLOSED,
    DEFAULT_TOKEN_ENV,
    WATCHED,
    BridgeConfig,
    BridgeError,
    Failure,
    StoppedError,
    http_headers,
    judge,
    raise_stopped,
    status_error,
)
from mcphost_bridge._http import (
    ConnectError,
    EventStreamError,
    Exchange,
    Http,
    display_url,
    read_events,
)
from mcphost_bridge._lines import (
    INVALID_REQUEST,
    PARSE_ERROR,
    LineReader,
    Message,
    Rejection,
    envelope,
    error_reply,
    parse_line,
    valid_id,
)
from mcphost_bridge._stamp import MODERN_VERSIONS, VERSION_HEADER, HeaderStamp

__all__ = ["DEFAULT_TOKEN_ENV", "BridgeConfig", "BridgeError", "http_headers", "run_bridge"]

logger = logging.getLogger(__name__)

SESSION_HEADER = "mcp-session-id"
LAST_EVENT_ID_HEADER = "last-event-id"
RECONNECT_DELAY = 1.0
"""Seconds before reopening a stream when the server named no `retry:` (the SDK's default)."""
MAX_RECONNECTS = 2
"""Failed attempts in a row after which a stream is given up (the SDK's)."""
MAX_BODY_BYTES = 32 * 1024 * 1024
RequestId = int | str
_Key = tuple[type, RequestId]


def run_bridge(
    config: BridgeConfig,
    *,
    stdin_fd: int | None = None,
    stdout: BinaryIO | None = None,
    handle_signals: bool = True,
) -> int:
    """Relay until stdin ends (returns 0) or SIGINT/SIGTERM (returns 128 + signal).

    Signals are handled only when `handle_signals` is set and this is the main thread.

    Raises:
        BridgeError: The endpoint refused the token, was not found, could not be reached, or went away.
    """
    relay = _Relay(
        config,
        stdin_fd=sys.stdin.fileno() if stdin_fd is None else stdin_fd,
        stdout=sys.stdout.buffer if stdout is None else stdout,
    )
    handle_signals = handle_signals and threading.current_thread() is threading.main_thread()
    return relay.run(handle_signals=handle_signals)


@dataclass(eq=False)
class _Pending:
    """A request sent and not yet answered."""

    method: str
    modern: bool
    """Whether it went out under a 2026 version (its cancellation then aborts its POST)."""
    exchanges: list[Exchange] = field(default_factory=list[Exchange])


class _Relay:
    """One bridge run: stdin → POSTs on the main thread, answers → stdout from the exchanges' threads."""

    def __init__(self, config: BridgeConfig, *, stdin_fd: int, stdout: BinaryIO) -> None:
        self._config = config
        self._endpoint = display_url(config.url)
        self._http = Http(config.url, http_headers(config.headers, config.token), config.timeout)
        self._stdin_fd = stdin_fd
        self._stdout: BinaryIO | None = stdout
        self._lock = threading.Condition()
        self._out = threading.Lock()
        self._stamp = HeaderStamp()
        # Requests sent and not yet answered: (id type, id) → entry. Typed keys keep "1" and 1 apart.
        self._pending: dict[_Key, _Pending] = {}
        self._session_id: str | None = None
        # The version sent on messages without one of their own (answers, GET, DELETE), as the SDK's
        # transport keeps it: cleared by `initialize`, set by each message stamped with a version.
        self._version: str | None = None
        self._failure: Failure | None = None
        self._leaving = False  # stdin ended, a signal came, stdout closed or a failure: nothing new starts
        self._streams: list[Exchange] = []  # the GET streams, aborted on the way out
        self._wake_read, self._wake_write = os.pipe()
        self._wake_open = True

    def run(self, *, handle_signals: bool) -> int:
        saved = (
            {sig: signal.signal(sig, raise_stopped) for sig in (signal.SIGINT, signal.SIGTERM)}
            if handle_signals
            else {}
        )
        exit_code = 0
        try:
            try:
                self._pump_stdin()
                self._drain()
            except StoppedError as stopped:
                logger.info("received signal %d; closing the session", stopped.signum)
                exit_code = 128 + stopped.signum
            self._leave()
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)
            with self._lock:  # a thread still running must not write to a descriptor number reused since
                self._wake_open = False
                os.close(self._wake_read)
                os.close(self._wake_write)
        if self._failure is not None:
            raise BridgeError(self._failure.description)
        return exit_code

    # stdin → endpoint

    def _pump_stdin(self) -> None:
        lines = LineReader(self._stdin_fd, wake_fd=self._wake_read)
        while (line := lines.readline()) is not None:
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
                        parsed.reply["error"]["code"],
                    )
                    self._write(parsed.reply)
                continue
            self._forward(parsed)
            if self._stopping():
                return

    def _forward(self, message: Message) -> None:
        method = message.get("method")
        request_id = message.get("id") if isinstance(method, str) else None
        entry: _Pending | None = None
        with self._lock:
            stamped = self._stamp.headers_for(message)
            if method == "notifications/cancelled" and not self._cancel(message):
                return
            if method == "initialize":
                self._version = None
            elif stamped is not None and VERSION_HEADER in stamped:
                self._version = stamped[VERSION_HEADER]
            if request_id is not None:
                assert isinstance(method, str)
                entry = _Pending(method, modern=self._version in MODERN_VERSIONS)
                superseded = self._pending.get(_key(request_id))
                if superseded is not None:  # a reused id: the old POST must not answer for the new one
                    _abort(superseded)
                self._pending[_key(request_id)] = entry
            headers = {**self._transport_headers(), **(stamped or {})}
            opens_stream = method == "notifications/initialized" and self._session_id is not None
        if opens_stream:
            threading.Thread(target=self._listen, name="bridge-get", daemon=True).start()
        if entry is None:
            self._post(message, headers, None)
            return
        threading.Thread(target=self._post, args=(message, headers, entry), daemon=True).start()
        if method == "initialize":
            # The session id comes with the answer: whatever the client pipelined behind it waits for it.
            self._wait(lambda: _key(cast("RequestId", request_id)) not in self._pending)

    def _cancel(self, message: Message) -> bool:
        """Settle the request a `notifications/cancelled` names; whether the notification is still POSTed.

        As the SDK transport: at 2026 closing the request's response stream is the cancellation, so its
        POST is aborted and the notification not sent; in the handshake era the notification is the signal.
        """
        params = cast("Mapping[str, Any]", message.get("params") or {})
        request_id = valid_id(params.get("requestId"))
        entry = self._pending.pop(_key(request_id), None) if request_id is not None else None
        self._lock.notify_all()
        if entry is not None:
            if not entry.modern:
                return True
            logger.debug("aborting the POST of cancelled request %r", request_id)
            _abort(entry)
            return False
        return self._version not in MODERN_VERSIONS

    def _transport_headers(self) -> dict[str, str]:
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        if self._session_id:
            headers[SESSION_HEADER] = self._session_id
        if self._version:
            headers[VERSION_HEADER] = self._version
        return headers

    def _post(self, message: Message, headers: dict[str, str], entry: _Pending | None) -> None:
        """One message's POST and, for a request, relaying its answer (on the request's own thread)."""
        method = message.get("method")
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
        logger.debug("POST %s (%s)", method or "answer", self._endpoint)
        exchanges = entry.exchanges if entry is not None else []
        try:
            exchange = self._http.open("POST", headers, body, on_connect=exchanges)
        except ConnectError as exc:
            self._fail(Failure(f"cannot reach {self._endpoint}: {exc}"))
            return
        except (OSError, http.client.HTTPException) as exc:
            if not (exchanges and exchanges[-1].aborted):
                self._fail(Failure(f"lost the connection to {self._endpoint}: {_reason(exc)}"))
            return
        try:
            self._answer(message, exchange, entry, has_session=SESSION_HEADER in headers)
        except (OSError, http.client.HTTPException) as exc:
            if not exchange.aborted:
                self._fail(Failure(f"lost the connection to {self._endpoint}: {_reason(exc)}"))
        finally:
            exchange.close()

    def _answer(
        self, message: Message, exchange: Exchange, entry: _Pending | None, *, has_session: bool
    ) -> None:
        request_id = cast("RequestId", message["id"]) if entry is not None else None
        status = exchange.status
        if status in WATCHED:
            body = exchange.read(MAX_BODY_BYTES)
            failure = judge(self._config, self._endpoint, status, body, has_session=has_session)
            if failure is not None:
                self._fail(failure)
                return
            self._error_status(request_id, status, body, has_session=has_session)
            return
        if exchange.redirect is not None:
            note = f"Redirect to {exchange.redirect} not followed; use that URL as the endpoint if it is the intended server"
            logger.warning("%s", note)
            self._abandon(entry, request_id, note, code=INVALID_REQUEST)
            return
        if status >= 400:
            self._error_status(request_id, status, exchange.read(MAX_BODY_BYTES), has_session=has_session)
            return
        if status == 202 or entry is None or request_id is None:
            self._abandon(
                entry, request_id, "server answered a request with 202 Accepted", code=INVALID_REQUEST
            )
            return
        if message.get("method") == "initialize" and (session_id := exchange.header(SESSION_HEADER)):
            with self._lock:
                self._session_id = session_id
        kind = exchange.content_type
        if kind == "application/json":
            body = exchange.read(MAX_BODY_BYTES)
            if not self._deliver_json(body):
                self._abandon(entry, request_id, "Failed to parse JSON response", code=PARSE_ERROR)
        elif kind == "text/event-stream":
            self._relay_events(exchange, entry, request_id)
        else:
            logger.error("Unexpected content type: %s", kind)
            self._abandon(entry, request_id, f"Unexpected content type: {kind}", code=INVALID_REQUEST)

    def _error_status(
        self, request_id: RequestId | None, status: int, body: bytes, *, has_session: bool
    ) -> None:
        if request_id is not None:
            self._deliver(status_error(request_id, status, body, has_session=has_session))

    def _relay_events(self, exchange: Exchange | None, entry: _Pending, request_id: RequestId) -> None:
        """Relay a request's SSE answer; when the stream ends early, reopen it over GET from its
        `Last-Event-ID` (after `retry:` or 1 s; given up after `MAX_RECONNECTS` failures in a row)."""
        last_id: str | None = None
        retry: int | None = None
        attempt = 0
        while True:
            if exchange is not None:
                try:
                    for event in read_events(exchange):
                        last_id, retry = (
                            event.id or last_id,
                            event.retry if event.retry is not None else retry,
                        )
                        if self._deliver_event(event.event, event.data, request_id):
                            return
                    attempt = 0  # ended normally: reopened without counting a failure (as the SDK)
                except EventStreamError as exc:
                    self._abandon(entry, request_id, f"SSE stream failed: {exc}")
                    return
                except (OSError, http.client.HTTPException):
                    logger.debug("the SSE stream of request %r ended", request_id, exc_info=True)
                    attempt += 1
                finally:
                    exchange.close()
                if exchange.aborted:
                    return
            else:
                attempt += 1
            if last_id is None:
                self._abandon(entry, request_id, "SSE stream ended without a response")
                return
            if attempt >= MAX_RECONNECTS or self._stopping():
                self._abandon(entry, request_id, "SSE stream ended and reconnection attempts were exhausted")
                return
            time.sleep((retry if retry is not None else RECONNECT_DELAY * 1000) / 1000)
            logger.info("SSE stream disconnected, reconnecting...")
            exchange = self._open_stream(last_id, entry.exchanges)

    def _listen(self) -> None:
        """The GET stream: server messages not tied to a request, reopened when it ends (handshake era)."""
        last_id: str | None = None
        retry: int | None = None
        attempt = 0
        while attempt < MAX_RECONNECTS and not self._stopping():
            exchange = self._open_stream(last_id, self._streams)
            if exchange is None:
                attempt += 1
            else:
                try:
                    for event in read_events(exchange):
                        last_id, retry = (
                            event.id or last_id,
                            event.retry if event.retry is not None else retry,
                        )
                        self._deliver_event(event.event, event.data, None)
                    attempt = 0
                except (OSError, http.client.HTTPException, EventStreamError):
                    logger.debug("GET stream error", exc_info=True)
                    attempt += 1
                finally:
                    exchange.close()
            if self._stopping():
                return
            logger.info("GET stream disconnected, reconnecting")
            time.sleep((retry if retry is not None else RECONNECT_DELAY * 1000) / 1000)

    def _open_stream(self, last_id: str | None, exchanges: list[Exchange]) -> Exchange | None:
        """A GET stream on the session (from `last_id` on), or None when the endpoint did not open one."""
        with self._lock:
            if not self._session_id and last_id is None:
                return None
            headers = {
                **self._transport_headers(),
                "accept": "text/event-stream",
                "cache-control": "no-store",
            }
        headers.pop("content-type", None)
        if last_id is not None:
            headers[LAST_EVENT_ID_HEADER] = last_id
        try:
            exchange = self._http.open("GET", headers, on_connect=exchanges)
        except ConnectError as exc:
            self._fail(Failure(f"cannot reach {self._endpoint}: {exc}"))
            return None
        except (OSError, http.client.HTTPException):
            logger.debug("GET stream error", exc_info=True)
            return None
        status = exchange.status
        if status in WATCHED:
            failure = judge(
                self._config,
                self._endpoint,
                status,
                exchange.read(MAX_BODY_BYTES),
                has_session=SESSION_HEADER in headers,
            )
            if failure is not None:
                self._fail(failure)
        if exchange.redirect is not None:
            logger.warning("GET stream not opened: redirect to %s not followed", exchange.redirect)
        elif status == 405:
            logger.debug("the endpoint offers no GET stream")
        elif status == 200 and exchange.content_type == "text/event-stream":
            return exchange
        exchange.close()
        return None

    # endpoint → stdout

    def _deliver_event(self, kind: str, data: str, request_id: RequestId | None) -> bool:
        """Relay one SSE event; whether it answered `request_id`."""
        if kind != "message":
            logger.warning("Unknown SSE event: %s", kind)
            return False
        if not data:
            return False  # a priming event
        try:
            payload: Any = json.loads(data)
        except (ValueError, RecursionError):
            payload = None
        message = envelope(payload)
        if message is None:
            logger.warning("ignored an SSE message from %s that is not JSON-RPC", self._endpoint)
            if request_id is None:
                return False
            self._deliver(
                cast("Message", error_reply(request_id, PARSE_ERROR, "Failed to parse SSE message"))
            )
            return True
        answers = "method" not in message
        if answers and request_id is not None:
            message["id"] = request_id  # a resumed stream answers the request it resumes
        self._deliver(message)
        return answers

    def _deliver_json(self, body: bytes) -> bool:
        try:
            payload: Any = json.loads(body) if len(body) <= MAX_BODY_BYTES else None
        except (ValueError, RecursionError):
            return False
        message = envelope(payload)
        if message is None:
            return False
        self._deliver(message)
        return True

    def _deliver(self, message: Message) -> None:
        """Write a message from the endpoint, settling the request it answers."""
        if "method" not in message and (request_id := message.get("id")) is not None:
            with self._lock:
                entry = self._pending.pop(_key(request_id), None)
                self._lock.notify_all()
                if entry is not None and isinstance(result := message.get("result"), dict):
                    self._stamp.observe_result(entry.method, cast("Mapping[str, Any]", result))
        self._write(message)

    def _abandon(
        self,
        entry: _Pending | None,
        request_id: RequestId | None,
        text: str,
        *,
        code: int = CONNECTION_CLOSED,
    ) -> None:
        """Answer a request whose answer can never come with an error, unless it was settled meanwhile."""
        if entry is None or request_id is None:
            return
        with self._lock:
            if self._pending.get(_key(request_id)) is not entry or self._failure is not None:
                return
        self._deliver(cast("Message", error_reply(request_id, code, text)))

    def _write(self, message: Message) -> None:
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        with self._out:
            if self._stdout is None:
                return
            try:
                self._stdout.write(line)
                self._stdout.flush()
            except (OSError, ValueError):  # ValueError: the stream was closed
                logger.info("stdout is closed; shutting down")
                self._stdout = None
                self._wake()

    # failing and leaving

    def _fail(self, failure: Failure) -> None:
        with self._lock:
            if self._failure is None and not self._leaving:
                self._failure = failure
            self._lock.notify_all()
        self._wake()

    def _wake(self) -> None:
        """End the wait on stdin (the pipe stays readable: the relay is leaving)."""
        with self._lock:
            if self._wake_open:
                os.write(self._wake_write, b"!")

    def _stopping(self) -> bool:
        with self._lock:
            return self._failure is not None or self._leaving or self._stdout is None

    def _wait(self, done: Any) -> None:
        """Wait until `done()` (called under the lock) or the bridge is stopping."""
        with self._lock:
            while not done() and self._failure is None and self._stdout is not None:
                self._lock.wait()

    def _drain(self) -> None:
        """After stdin ends, wait for the answers still owed for up to `timeout` seconds."""
        deadline = time.monotonic() + self._config.timeout
        with self._lock:
            while self._pending and self._failure is None and self._stdout is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._lock.wait(remaining)
            if self._pending and self._failure is None:
                logger.warning(
                    "stdin ended with %d request(s) still unanswered; giving up", len(self._pending)
                )

    def _leave(self) -> None:
        """Abort what is open, answer what is owed after a failure, close the session; nothing is written after."""
        with self._lock:
            self._leaving = True
            failure = self._failure
            pending, self._pending = self._pending, {}
            session_id = self._session_id
        for exchange in self._streams:
            exchange.abort()
        for entry in pending.values():
            _abort(entry)
        if failure is not None:
            for _, request_id in pending:
                reply = error_reply(
                    request_id, failure.reply_code, failure.reply_message or failure.description
                )
                self._write(cast("Message", reply))
        elif session_id:
            self._delete()
        with self._out:
            self._stdout = None

    def _delete(self) -> None:
        with self._lock:
            headers = self._transport_headers()
        try:
            exchange = self._http.open("DELETE", headers, bounded=True)
        except TimeoutError:
            logger.warning("the session was not closed within %gs", self._config.timeout)
            return
        except (OSError, http.client.HTTPException) as exc:
            logger.warning("Session termination failed: %s", _reason(exc))
            return
        try:
            if exchange.status == 405:
                logger.debug("Server does not allow session termination")
            elif exchange.status not in (200, 204):
                logger.warning("Session termination failed: %d", exchange.status)
        finally:
            exchange.close()


def _abort(entry: _Pending) -> None:
    for exchange in entry.exchanges:
        exchange.abort()


def _key(request_id: RequestId) -> _Key:
    return (type(request_id), request_id)


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
