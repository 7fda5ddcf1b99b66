"""The stdio side's framing: newline-delimited JSON-RPC lines in, one parsed message (or a rejection) each.

Owns reading stdin and turning a line into a JSON-RPC envelope (a plain `dict`, validated here the way the
SDK's `mcp_types.jsonrpc_message_adapter` validates one). It does not own what happens to a message
afterwards (the relay does) nor writing stdout.

Invariants:
- Only the standard library is imported: the bridge answers its first message before anything heavier
  could even be loaded.
- `LineReader.readline` blocks on `select` over stdin and a wake-up descriptor; the relay writes to the
  latter to end the read when the bridge must stop. The descriptor's flags are left alone (O_NONBLOCK would
  be shared with whoever else holds the file description, such as a terminal that is also stdout). POSIX
  only.
- A line longer than `MAX_LINE_BYTES` is cut at that length and the rest discarded up to its newline; the cut
  line then fails to parse like any other malformed line (its id, near the start, is still recovered).
- A malformed line never raises: `parse_line` returns a `Rejection` carrying a JSON-RPC error reply when an id
  could be recovered from the line (parse error -32700 for broken JSON, invalid request -32600 for JSON that
  is not a JSON-RPC message), else no reply.
- A parsed message keeps only the JSON-RPC envelope members (`jsonrpc`, `id`, `method`, `params`, `result`,
  `error`), as the SDK's envelope models do; ids keep their type (`"1"` is not `1`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import select
from dataclasses import dataclass
from typing import Any, cast

__all__ = ["MAX_LINE_BYTES", "LineReader", "Message", "Rejection", "error_reply", "parse_line", "valid_id"]

logger = logging.getLogger(__name__)

Message = dict[str, Any]
"""A JSON-RPC envelope: a request, notification, response or error."""
RequestId = int | str

MAX_LINE_BYTES = 32 * 1024 * 1024
"""Longest stdin line accepted (the SDK server refuses bodies over 4 MiB by default anyway)."""
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
_READ_CHUNK = 64 * 1024

# The first `"id": <int or string>` in a line; only used on lines that are not valid JSON.
_ID_PATTERN = re.compile(rb'"id"\s*:\s*(-?\d+(?![\d.eE])|"(?:[^"\\\r\n]|\\.)*")')


class LineReader:
    """stdin lines, read with `select` so that a write to `wake_fd` ends the wait."""

    def __init__(self, fd: int, *, wake_fd: int | None = None) -> None:
        self._fd = fd
        self._wake_fd = wake_fd
        self._buffer = bytearray()
        self._eof = False
        self._skipping = False  # inside the discarded rest of an over-long line

    def readline(self) -> bytes | None:
        """The next line without its terminator (an over-long one cut at the limit), or None at the end
        of stdin or once `wake_fd` is readable."""
        limit = MAX_LINE_BYTES
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                if self._skipping:
                    self._skipping = False
                    continue
                if len(line) > limit:
                    return self._cut(line)
                return line.removesuffix(b"\r")
            if len(self._buffer) > limit and not self._skipping:
                cut = self._cut(bytes(self._buffer))
                self._buffer.clear()
                self._skipping = True
                return cut
            if self._skipping:
                self._buffer.clear()
            if self._eof:
                if self._buffer and not self._skipping:
                    line = bytes(self._buffer).removesuffix(b"\r")
                    self._buffer.clear()
                    return line
                return None
            chunk = self._read()
            if chunk is None:
                return None
            if not chunk:
                self._eof = True
            self._buffer += chunk

    @staticmethod
    def _cut(line: bytes) -> bytes:
        logger.warning("a stdin line is longer than %d bytes; the rest of it is discarded", MAX_LINE_BYTES)
        return line[:MAX_LINE_BYTES]

    def _read(self) -> bytes | None:
        watched = [self._fd] if self._wake_fd is None else [self._fd, self._wake_fd]
        try:
            ready, _, _ = select.select(watched, [], [])
        except ValueError:  # a descriptor `select` cannot watch (>= FD_SETSIZE): read it directly
            ready = [self._fd]
        if self._wake_fd is not None and self._wake_fd in ready:
            return None
        return os.read(self._fd, _READ_CHUNK)


@dataclass(frozen=True)
class Rejection:
    """A stdin line that is not a JSON-RPC message."""

    reason: str
    """What was wrong, for the stderr diagnostic."""
    reply: Message | None
    """The error to send back when the line's id could be recovered."""


def parse_line(line: bytes) -> Message | Rejection:
    """Parse one stdin line into a JSON-RPC envelope."""
    try:
        decoded: Any = json.loads(line)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        request_id = _recover_id(line)
        return Rejection(f"not valid JSON ({exc})", error_reply(request_id, PARSE_ERROR, "Parse error"))
    message = envelope(decoded)
    if message is not None:
        return message
    request_id = valid_id(cast("dict[str, Any]", decoded).get("id")) if isinstance(decoded, dict) else None
    return Rejection(
        "not a JSON-RPC 2.0 request, notification or response",
        error_reply(request_id, INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message"),
    )


def envelope(decoded: Any) -> Message | None:
    """`decoded` as a JSON-RPC envelope (members outside it dropped), or None when it is not one.

    Tried in the SDK's order: request, notification, response, error.
    """
    if not isinstance(decoded, dict):
        return None
    data = cast("dict[str, Any]", decoded)
    if data.get("jsonrpc") != "2.0":
        return None
    params = data.get("params")
    method = data.get("method")
    request_id = valid_id(data.get("id"))
    if isinstance(method, str) and (params is None or isinstance(params, dict)):
        message: Message = {"jsonrpc": "2.0"}
        if request_id is not None:
            message["id"] = request_id
        message["method"] = method
        if "params" in data:
            message["params"] = params
        return message
    if request_id is not None and isinstance(data.get("result"), dict):
        return {"jsonrpc": "2.0", "id": request_id, "result": data["result"]}
    error = data.get("error")
    if (request_id is not None or data.get("id") is None) and "id" in data and _is_error_data(error):
        return {"jsonrpc": "2.0", "id": request_id, "error": error}
    return None


def _is_error_data(error: Any) -> bool:
    if not isinstance(error, dict):
        return False
    fields = cast("dict[str, Any]", error)
    code = fields.get("code")
    return type(code) is int and isinstance(fields.get("message"), str)


def valid_id(value: Any) -> RequestId | None:
    """`value` when it is a JSON-RPC request id (a string or an integer, never a boolean)."""
    if isinstance(value, str) or type(value) is int:
        return value
    return None


def error_reply(request_id: RequestId | None, code: int, message: str) -> Message | None:
    """A JSON-RPC error answering `request_id`, or None without an id to answer."""
    if request_id is None:
        return None
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _recover_id(line: bytes) -> RequestId | None:
    match = _ID_PATTERN.search(line)
    if match is None:
        return None
    try:
        return valid_id(json.loads(match.group(1)))
    except ValueError:
        return None
