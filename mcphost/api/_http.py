"""HTTP plumbing the routes share: query and body parsing into models, capped body reads, and SSE.

Owns turning a `ValidationError` or an unstorable value (NaN, NUL, an integer past 64 bits) into a 400
naming the field, reading bodies under a byte cap, the SSE encoding (`sse`) and the SSE response
(`EventStream`). Does not own which model a route parses (the routes) or error responses (`_errors`).

Invariants:
- A body is refused with 413 as soon as it passes its cap: `Content-Length` is checked first, the byte
  count always, so an oversized body is never buffered.
- A repeated query parameter is a 400 unless its field is a list; invalid input is never echoed back.
- Every query and JSON body is checked whole for unstorable values before its model sees it, so the
  answer is the same 400 on SQLite and PostgreSQL.
- A JSON body nested deeper than `MAX_JSON_DEPTH` is a 400 before any model sees it.
- `EventStream` owns its producer, its keep-alive (a comment every `KEEPALIVE_S` of quiet) and its
  disconnect watch in one task group; a client that goes away cancels all three.
"""

from __future__ import annotations

import json
import types
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import TypeVar, Union, get_args, get_origin

import anyio
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mcphost.common.validation import problems
from mcphost.errors import InvalidArgumentError, PayloadTooLargeError
from mcphost.protocol import MAX_JSON_DEPTH, JSONObject, json_depth, nesting_message, unstorable

KEEPALIVE_S = 15.0
"""An SSE comment is sent when a stream has been quiet this long (proxies close idle connections)."""


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


def sse(data: str, *, event: str | None = None, event_id: str | None = None) -> bytes:
    """One server-sent event (`data` must be a single line, as compact JSON is)."""
    lines: list[str] = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event is not None:
        lines.append(f"event: {event}")
    lines.append(f"data: {data}")
    return ("\n".join(lines) + "\n\n").encode()


class EventStream(Response):
    """An SSE response: events from `events`, keep-alive comments while quiet, stopped on disconnect."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncGenerator[bytes, None], *, headers: dict[str, str] | None = None) -> None:
        super().__init__(
            content=None,
            status_code=200,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no", **(headers or {})},
        )
        self._events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        await send({"type": "http.response.start", "status": self.status_code, "headers": headers})
        outbox, inbox = anyio.create_memory_object_stream[bytes](16)

        async def produce() -> None:
            async with outbox, aclosing(self._events) as events:
                async for chunk in events:
                    await outbox.send(chunk)

        async def watch(scope_to_cancel: anyio.CancelScope) -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            scope_to_cancel.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            tg.start_soon(watch, tg.cancel_scope)
            async with inbox:
                # A first comment gets the status and headers to the client before any result exists.
                await send({"type": "http.response.body", "body": b": stream open\n\n", "more_body": True})
                while True:
                    chunk = b": keepalive\n\n"
                    with anyio.move_on_after(KEEPALIVE_S):
                        try:
                            chunk = await inbox.receive()
                        except anyio.EndOfStream:
                            break
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()
