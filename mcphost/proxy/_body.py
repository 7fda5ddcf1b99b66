"""Reading a model request's body: bounded in size and depth, strict JSON, an object naming its model.

Owns the refusals of a body before anything else looks at it: too large (`MAX_BODY_BYTES`, checked on
`Content-Length` and again while reading), not UTF-8 JSON, NaN/Infinity, nested deeper than
`MAX_DEPTH`, not an object, no string `model`, a `stream` that is not a boolean. Each refusal is a
`BodyRefusedError` with the error kind of `mcphost.llm.wire` and a message that says what to fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.types import Receive

from mcphost.llm.wire import ErrorKind
from mcphost.protocol import JSONObject, JSONValue, is_json_array, is_json_object

MAX_BODY_BYTES = 32 * 1024 * 1024
"""Room for a long conversation with images as base64."""
MAX_DEPTH = 128


@dataclass
class BodyRefusedError(Exception):
    kind: ErrorKind
    message: str
    status: int


def _constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def depth(value: JSONValue) -> int:
    """How deeply `value` nests (a scalar is 0), measured without recursion."""
    deepest = 0
    stack: list[tuple[JSONValue, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if is_json_object(item):
            stack.extend((v, level + 1) for v in item.values())
        elif is_json_array(item):
            stack.extend((v, level + 1) for v in item)
    return deepest


async def read_body(headers: Headers, receive: Receive) -> bytes:
    """The whole body, or `BodyRefusedError` (413) once it passes `MAX_BODY_BYTES`."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _too_large()
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        body.extend(message.get("body", b""))
        if len(body) > MAX_BODY_BYTES:
            raise _too_large()
        if not message.get("more_body", False):
            break
    return bytes(body)


def _too_large() -> BodyRefusedError:
    return BodyRefusedError("too_large", f"the request body is larger than {MAX_BODY_BYTES} bytes", 413)


def parse_body(raw: bytes) -> JSONObject:
    """The body as a JSON object with a string `model`, or `BodyRefusedError` (400) saying what is wrong."""
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_constant)
    except RecursionError:
        raise _bad(f"the request body nests deeper than {MAX_DEPTH} levels") from None
    except UnicodeDecodeError:
        raise _bad("the request body is not UTF-8") from None
    except ValueError as exc:
        raise _bad(f"the request body is not valid JSON: {str(exc)[:200]}") from None
    if depth(value) > MAX_DEPTH:
        raise _bad(f"the request body nests deeper than {MAX_DEPTH} levels")
    if not is_json_object(value):
        raise _bad("the request body must be a JSON object")
    model = value.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("the request body has no 'model' (a string: the id of a host model the run is granted)")
    if "stream" in value and not isinstance(value["stream"], bool | None):
        raise _bad("'stream' must be true or false")
    return value


def _bad(message: str) -> BodyRefusedError:
    return BodyRefusedError("invalid_request", message, 400)
