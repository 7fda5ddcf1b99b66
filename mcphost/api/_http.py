"""HTTP plumbing the routes share: query and body parsing into models, capped body reads, and SSE.

Owns turning a `ValidationError` or an unstorable value (NaN, NUL, an integer past 64 bits) into a 400
naming the field, reading bodies under a byte cap, and the result streams: their events (`json_event`,
`result_event`, encoded by sse-starlette's `ServerSentEvent`) and the response that sends them with its
keep-alives, disconnect handling and send timeout (`EventStream`). Does not own which model a route
parses (the routes) or error responses (`_errors`).

Invariants:
- A body is refused with 413 as soon as it passes its cap: `Content-Length` is checked first, the byte
  count always, so an oversized body is never buffered.
- A repeated query parameter is a 400 unless its field is a list; invalid input is never echoed back.
- Every query and JSON body is checked whole for unstorable values before its model sees it, so the
  answer is the same 400 on SQLite and PostgreSQL.
- A JSON body nested deeper than `MAX_JSON_DEPTH` is a 400 before any model sees it.
- An `EventStream` runs its producer in the request's task and one watcher task for the disconnect, the
  keep-alive (a comment every `KEEPALIVE_S` while nothing else is sent) and the send timeout; a client
  that goes away, or takes nothing for `SEND_TIMEOUT_S`, stops both, and the producer is closed (its
  `finally` runs) whichever way the stream stops. One send at a time.
- A result is an SSE event named by its type (`event: message.delta`, `event: run.completed`); the
  stream's own events keep their undotted names (`run`, `end`, `error`), so the two never collide.
- Streams end when their producer ends, not on a server's exit signal: during `mcphost serve`'s drain a
  stream stays open until its run ends (`event: end`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import types
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import TypeVar, Union, get_args, get_origin

import anyio
import pydantic_core
from pydantic import BaseModel, ValidationError
from sse_starlette import ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mcphost.common.validation import problems
from mcphost.errors import InvalidArgumentError, PayloadTooLargeError
from mcphost.protocol import (
    MAX_JSON_DEPTH,
    RESULT_TYPES,
    JSONObject,
    json_depth,
    nesting_message,
    plainly_storable_within,
    unstorable,
)

logger = logging.getLogger("mcphost.api")

KEEPALIVE_S = 15.0
"""An SSE comment is sent this often on every stream (proxies close idle connections)."""
SEND_TIMEOUT_S = 60.0
"""A stream whose client has taken no data for this long is dropped; the client resumes with Last-Event-ID."""


# -- parsing -----------------------------------------------------------------------------------------

ModelT = TypeVar("ModelT", bound=BaseModel)


def _invalid(exc: ValidationError, where: str) -> InvalidArgumentError:
    """A ValidationError as a 400 naming the field (inputs are not echoed)."""
    errors: list[JSONObject] = []
    for problem in problems(exc, root="")[:20]:
        loc = f"{where}.{problem.where}" if problem.where else where
        errors.append({"loc": loc, "msg": problem.what, "type": problem.type})
    first = errors[0]
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return InvalidArgumentError(f"{first['loc']}: {first['msg']}{more}", details={"errors": errors})


def parse_model(model: type[ModelT], data: object, where: str) -> ModelT:
    check_storable(data, where)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc, where) from None


def check_storable(value: object, where: str) -> None:
    """Refuse `value` with a 400 naming the field when a store could not keep it exactly.

    NaN/Infinity, integers outside 64 bits, NUL and lone surrogates (`mcphost.protocol.unstorable`)
    are refused the same way on SQLite and PostgreSQL, before anything is stored.
    """
    problem = unstorable(value)
    if problem is not None:
        loc = ".".join(p for p in (where, problem.path) if p)
        raise InvalidArgumentError(
            problem.message(where),
            details={"errors": [{"loc": loc, "msg": problem.reason, "type": "unstorable"}]},
        )


def _too_deep(where: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        nesting_message(where) + ".", details={"field": where, "max_depth": MAX_JSON_DEPTH}
    )


def parse_json(model: type[ModelT], raw: bytes, where: str = "body") -> ModelT:
    try:
        # Python's parser, not pydantic's: it reads NaN and lone surrogates, so they are named by field.
        data = json.loads(raw)
    except RecursionError:
        raise _too_deep(where) from None
    except ValueError:
        pass  # not JSON: model_validate_json says where
    else:
        if not plainly_storable_within(data, MAX_JSON_DEPTH):  # the usual answer, in one walk
            if json_depth(data) > MAX_JSON_DEPTH:  # first: the checks after it walk the value
                raise _too_deep(where)
            check_storable(data, where)
    try:
        # Strict: a JSON body's types are JSON's own ("12", true and 1.0 are not integers); query
        # strings are strings by nature and stay lax (`parse_query`).
        return model.model_validate_json(raw, strict=True)
    except ValidationError as exc:
        raise _invalid(exc, where) from None


def _is_list(annotation: object) -> bool:
    if get_origin(annotation) is list:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_is_list(arg) for arg in get_args(annotation))
    return False


def parse_query(request: Request, model: type[ModelT]) -> ModelT:
    """Query parameters through `model`; repeated parameters only for list fields."""
    data: dict[str, str | list[str]] = {}
    for key, value in request.query_params.multi_items():
        info = model.model_fields.get(key)
        if info is not None and _is_list(info.annotation):
            existing = data.setdefault(key, [])
            assert isinstance(existing, list)
            existing.append(value)
        elif key in data:
            raise InvalidArgumentError(f"query.{key}: given more than once; pass it once.")
        else:
            data[key] = value
    return parse_model(model, data, "query")


def path_id(request: Request, name: str) -> str:
    """The path parameter `name`, refused with a 400 when no store could look it up (NUL, surrogates)."""
    value = str(request.path_params[name])
    check_storable(value, f"path.{name}")
    return value


async def capped_body(request: Request, limit: int) -> AsyncIterator[bytes]:
    """The request body, refused with 413 as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        if chunk:
            yield chunk


def _too_large(limit: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"The request body exceeds the limit of {limit} bytes; send less.", details={"max_bytes": limit}
    )


async def read_body(request: Request, limit: int) -> bytes:
    return b"".join([chunk async for chunk in capped_body(request, limit)])


# -- SSE ---------------------------------------------------------------------------------------------

SSE_SEP = "\n"
"""The line end of every SSE line. sse-starlette writes `\\r\\n` by default; the wire format was and stays
`\\n` (the console's reader, `mcphost send` and existing clients split on it)."""


def json_event(payload: object, *, event: str | None = None, event_id: str | None = None) -> ServerSentEvent:
    """One server-sent event whose `data` is `payload` as compact JSON (one line)."""
    # pydantic-core's encoder: sse-starlette's `JSONServerSentEvent` calls `json.dumps`, 5-7x slower
    # per payload, and an echo run streams four of them. Payloads are stored values: finite numbers.
    return ServerSentEvent(pydantic_core.to_json(payload).decode(), event=event, id=event_id, sep=SSE_SEP)


def result_event(seq: int, payload: JSONObject) -> ServerSentEvent:
    """One stored result as an SSE event named by its type (`event: message.delta`), its `id` the
    result's host sequence. Every protocol result type (`RESULT_TYPES`) has a dot, so it never reads as
    `run`, `end` or `error` (the stream's own events); a stored payload of another type (written
    straight into the database) is named `result`."""
    kind = payload.get("type")
    name = kind if isinstance(kind, str) and kind in RESULT_TYPES else "result"
    return json_event({"seq": seq, **payload}, event=name, event_id=str(seq))


_KEEPALIVE = ServerSentEvent(comment="keepalive", sep=SSE_SEP).encode()
CLOSE_TIMEOUT_S = 5.0
"""How long a stream's producer gets to run its `finally` when the stream stops before its end."""


class Last(bytes):
    """An event stream's last item, encoded: sent with the end of the body, in one write (an item after
    it is a bug, dropped with a warning)."""


async def _opened(
    events: AsyncGenerator[ServerSentEvent | bytes, None], first: ServerSentEvent | None
) -> AsyncGenerator[ServerSentEvent | bytes, None]:
    # A first comment gets the status and headers to the client before any result exists (with the
    # first event when one is at hand: one write).
    opening = ServerSentEvent(comment="stream open", sep=SSE_SEP).encode()
    yield opening if first is None else opening + first.encode()
    async with aclosing(events) as opened:
        async for item in opened:
            yield item


class EventStream(Response):
    """An SSE response with the host's settings: the events of `events` (an item is an event, or events
    already encoded: one write; a `Last` ends the body in the same write) after a `: stream open`
    comment and the `first` event, a `: keepalive`
    comment every `KEEPALIVE_S` while nothing else is sent, `\\n` line ends, `Cache-Control: no-store`
    and `X-Accel-Buffering: no`; stopped when the client disconnects, dropped when a send has waited
    `SEND_TIMEOUT_S` for the client to take data (a warning here; uvicorn adds that the response did not
    complete, and closes the connection). A `HEAD` request gets the headers and an empty body.

    The producer runs in the request's task; one watcher task waits for the client's disconnect and
    sends the keep-alives. It also times a send out: a send to uvicorn returns at once unless the
    connection's buffer is full, so it is not wrapped in a deadline of its own. The watcher wakes at the
    next keep-alive or at the running send's deadline, whichever is first, and a keep-alive is due
    before a send can time out (`KEEPALIVE_S` < `SEND_TIMEOUT_S`), so a stalled send is dropped on time.
    (sse-starlette's `EventSourceResponse`, used before, ran four tasks per stream and a deadline per
    send: a tenth of a served echo run's CPU on the event loop.)
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncGenerator[ServerSentEvent | bytes, None],
        *,
        first: ServerSentEvent | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status_code = 200
        self.background = None
        self._events = _opened(events, first)
        self.init_headers(
            {
                "Cache-Control": "no-store",
                "Connection": "keep-alive",
                "X-Accel-Buffering": "no",
                **(headers or {}),
            }
        )
        self._sending_since: float | None = None
        """When the running data send began (None: no send is waiting)."""
        self._keepalive: anyio.Event | None = None
        """Set once a keep-alive in flight has been sent (None: none is)."""
        self._dropped = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        events = self._events
        start = {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        watcher: asyncio.Task[None] | None = None
        try:
            await send(start)
            if scope.get("method") == "HEAD":
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            with anyio.CancelScope() as stream:
                watcher = asyncio.get_running_loop().create_task(self._watch(receive, send, stream))
                ended = False
                async for item in events:
                    if ended:
                        logger.warning(
                            "dropped an item after the last of the event stream of %s", scope.get("path")
                        )
                        continue
                    ended = isinstance(item, Last)
                    await self._send(send, item if isinstance(item, bytes) else item.encode(), more=not ended)
                if not ended:
                    await self._send(send, b"", more=False)
        finally:
            if watcher is not None:
                watcher.cancel()
            if getattr(events, "ag_frame", None) is not None:  # not run to its end: its `finally` runs now
                with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT_S):
                    await events.aclose()
        if self._dropped:
            # The response has started: there is no status left to send. The client resumes with
            # Last-Event-ID when it reads again.
            logger.warning(
                "dropped the event stream of %s: the client took no data for %g s",
                scope.get("path", "?"),
                SEND_TIMEOUT_S,
            )

    async def _send(self, send: Send, body: bytes, *, more: bool) -> None:
        if self._keepalive is not None:  # one send at a time
            await self._keepalive.wait()
        self._sending_since = time.monotonic()
        await send({"type": "http.response.body", "body": body, "more_body": more})
        self._sending_since = None

    async def _watch(self, receive: Receive, send: Send, stream: anyio.CancelScope) -> None:
        """Until the stream ends: a disconnect stops it, a keep-alive goes out when nothing else is sent,
        and a send that has waited `SEND_TIMEOUT_S` drops it."""
        keepalive_at = time.monotonic() + KEEPALIVE_S
        while True:
            now = time.monotonic()
            sending_since = self._sending_since
            with anyio.move_on_at(min(keepalive_at, (sending_since or now) + SEND_TIMEOUT_S)):
                message = await receive()
                if message["type"] == "http.disconnect":
                    stream.cancel()
                    return
                continue
            now = time.monotonic()
            sending_since = self._sending_since
            if sending_since is not None and now - sending_since >= SEND_TIMEOUT_S:
                self._drop(stream)
                return
            if now >= keepalive_at:
                keepalive_at = now + KEEPALIVE_S
                if sending_since is None and not await self._send_keepalive(send):  # else data goes out
                    self._drop(stream)
                    return

    def _drop(self, stream: anyio.CancelScope) -> None:
        self._dropped = True
        stream.cancel()

    async def _send_keepalive(self, send: Send) -> bool:
        """Send a keep-alive comment; False when the client took nothing for `SEND_TIMEOUT_S`."""
        sent = self._keepalive = anyio.Event()
        try:
            with anyio.move_on_after(SEND_TIMEOUT_S) as waited:
                await send({"type": "http.response.body", "body": _KEEPALIVE, "more_body": True})
        finally:
            self._keepalive = None
            sent.set()
        return not waited.cancelled_caught
