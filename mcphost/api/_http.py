"""HTTP plumbing the routes share: query and body parsing into models, capped body reads, and SSE.

Owns turning a `ValidationError` or an unstorable value (NaN, NUL, an integer past 64 bits) into a 400
naming the field, reading bodies under a byte cap, and the host's settings of sse-starlette for result
streams (`json_event`, `result_event`, `EventStream`). Does not own which model a route parses (the routes), error
responses (`_errors`) or SSE framing, keep-alives and disconnect handling (sse-starlette).

Invariants:
- A body is refused with 413 as soon as it passes its cap: `Content-Length` is checked first, the byte
  count always, so an oversized body is never buffered.
- A repeated query parameter is a 400 unless its field is a list; invalid input is never echoed back.
- Every query and JSON body is checked whole for unstorable values before its model sees it, so the
  answer is the same 400 on SQLite and PostgreSQL.
- A JSON body nested deeper than `MAX_JSON_DEPTH` is a 400 before any model sees it.
- An `EventStream` runs its producer, its keep-alive (a comment every `KEEPALIVE_S`) and its disconnect
  watch in one task group (sse-starlette's); a client that goes away cancels all three, and the producer
  is closed (its `finally` runs) whichever way the stream stops.
- A result is an SSE event named by its type (`event: message.delta`, `event: run.completed`); the
  stream's own events keep their undotted names (`run`, `end`, `error`), so the two never collide.
- Streams end when their producer ends, never on sse-starlette's exit signal: that signal comes from
  uvicorn's own SIGTERM handler (or its patched `Server.handle_exit`), which `serving._Server` never
  installs, so during `mcphost serve`'s drain a stream stays open until its run ends (`event: end`).
"""

from __future__ import annotations

import json
import logging
import types
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from sse_starlette import EventSourceResponse, JSONServerSentEvent, ServerSentEvent
from sse_starlette.sse import SendTimeoutError
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from mcphost.common.validation import problems
from mcphost.errors import InvalidArgumentError, PayloadTooLargeError
from mcphost.protocol import (
    MAX_JSON_DEPTH,
    RESULT_TYPES,
    JSONObject,
    json_depth,
    nesting_message,
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
    return JSONServerSentEvent(payload, event=event, id=event_id, sep=SSE_SEP)


def result_event(seq: int, payload: JSONObject) -> ServerSentEvent:
    """One stored result as an SSE event named by its type (`event: message.delta`), its `id` the
    result's host sequence. Every protocol result type (`RESULT_TYPES`) has a dot, so it never reads as
    `run`, `end` or `error` (the stream's own events); a stored payload of another type (written
    straight into the database) is named `result`."""
    kind = payload.get("type")
    name = kind if isinstance(kind, str) and kind in RESULT_TYPES else "result"
    return json_event({"seq": seq, **payload}, event=name, event_id=str(seq))


def _keepalive() -> ServerSentEvent:
    return ServerSentEvent(comment="keepalive", sep=SSE_SEP)


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


class EventStream(EventSourceResponse):
    """An SSE response (sse-starlette's `EventSourceResponse`) with the host's settings.

    The events of `events` (an item is an event, or events already encoded: one write) after a
    `: stream open` comment and the `first` event, a `: keepalive` comment every
    `KEEPALIVE_S`, `\\n` line ends, `Cache-Control: no-store` and `X-Accel-Buffering: no`; stopped when
    the client disconnects, dropped when the client has taken nothing for `SEND_TIMEOUT_S` (a warning
    here; uvicorn adds that the response did not complete, and closes the connection).
    """

    def __init__(
        self,
        events: AsyncGenerator[ServerSentEvent | bytes, None],
        *,
        first: ServerSentEvent | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(  # pyright: ignore[reportUnknownMemberType]  # sse-starlette types content as bare dict
            _opened(events, first),
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no", **(headers or {})},
            ping=KEEPALIVE_S,
            ping_message_factory=_keepalive,
            sep=SSE_SEP,
            send_timeout=SEND_TIMEOUT_S,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except SendTimeoutError:
            # The response has started: there is no status left to send. The client resumes with
            # Last-Event-ID when it reads again.
            logger.warning(
                "dropped the event stream of %s: the client took no data for %g s",
                scope.get("path", "?"),
                self.send_timeout,
            )
