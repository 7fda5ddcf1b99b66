"""The stdio side's framing: newline-delimited JSON-RPC lines in, one parsed message (or a rejection) each.

Owns reading stdin without a worker thread and turning a line into an SDK envelope model. It does not own what
happens to a message afterwards (the relay does) nor writing stdout.

Invariants:
- Reading is cancellable at any point: each `read()` happens only after `anyio.wait_readable` reported data
  (or end of input), so a fatal error never waits behind a blocked read (a worker thread stuck in `readline`
  could not be cancelled). The descriptor's flags are left alone: O_NONBLOCK would be shared with whoever
  else holds the file description, such as a terminal that is also stdout. A descriptor the event loop cannot
  poll (a regular file, /dev/null) never blocks, so it is read directly. POSIX only.
- A line longer than `MAX_LINE_BYTES` is cut at that length and the rest discarded up to its newline; the cut
  line then fails to parse like any other malformed line.
- A malformed line never raises: `parse_line` returns a `Rejection` carrying a JSON-RPC error reply when an id
  could be recovered from the line (parse error -32700 for broken JSON, invalid request -32600 for JSON that
  is not a JSON-RPC message), else no reply.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from typing import Any, cast

import anyio
import anyio.lowlevel
from mcp_types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    RequestId,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

__all__ = ["MAX_LINE_BYTES", "LineReader", "Rejection", "parse_line"]

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 32 * 1024 * 1024
"""Longest stdin line accepted (the SDK server refuses bodies over 4 MiB by default anyway)."""

_CHUNK = 64 * 1024

# The first `"id": <int or string>` in a line; only used on lines that are not valid JSON.
_ID_PATTERN = re.compile(rb'"id"\s*:\s*(-?\d+(?![\d.eE])|"(?:[^"\\\r\n]|\\.)*")')


class LineReader:
    """Reads newline-terminated lines from a file descriptor without ever blocking the event loop."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._eof = False
        self._discarding = False
        self._pollable = True
        self._scanned = 0  # bytes of `_buffer` known to hold no newline (a long line arrives in many reads)

    async def readline(self) -> bytes | None:
        """The next line without its terminator, or None at end of input."""
        while True:
            newline = self._buffer.find(b"\n", self._scanned)
            self._scanned = len(self._buffer) if newline < 0 else 0
            if self._discarding:  # the tail of an over-long line
                if newline >= 0:
                    del self._buffer[: newline + 1]
                    self._discarding = False
                    continue
                self._buffer.clear()
                self._scanned = 0
            elif newline > MAX_LINE_BYTES or (newline < 0 and len(self._buffer) > MAX_LINE_BYTES):
                line = bytes(self._buffer[:MAX_LINE_BYTES])
                if newline >= 0:
                    del self._buffer[: newline + 1]
                else:
                    self._buffer.clear()
                    self._scanned = 0
                    self._discarding = True
                logger.warning(
                    "a stdin line is longer than %d bytes; the rest of it is discarded", MAX_LINE_BYTES
                )
                return line
            elif newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                return line.removesuffix(b"\r")
            if self._eof:
                rest = bytes(self._buffer)
                self._buffer.clear()
                return rest.removesuffix(b"\r") if rest else None
            await self._fill()

    async def _fill(self) -> None:
        if self._pollable:
            try:
                await anyio.wait_readable(self._fd)
            except PermissionError:  # epoll refuses regular files and /dev/null; reading them never blocks
                self._pollable = False
        else:
            await anyio.lowlevel.checkpoint()
        chunk = os.read(self._fd, _CHUNK)
        if not chunk:
            self._eof = True
        self._buffer += chunk


@dataclass(frozen=True)
class Rejection:
    """A stdin line that is not a JSON-RPC message."""

    reason: str
    """What was wrong, for the stderr diagnostic."""
    reply: JSONRPCError | None
    """The error to send back when the line's id could be recovered."""


def parse_line(line: bytes) -> JSONRPCMessage | Rejection:
    """Parse one stdin line into the SDK's JSON-RPC envelope model."""
    try:
        decoded: Any = json.loads(line)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        request_id = _recover_id(line)
        return Rejection(f"not valid JSON ({exc})", _error_reply(request_id, PARSE_ERROR, "Parse error"))
    try:
        return jsonrpc_message_adapter.validate_python(decoded, by_name=False)
    except ValidationError:
        request_id = (
            _valid_id(cast("dict[str, Any]", decoded).get("id")) if isinstance(decoded, dict) else None
        )
        return Rejection(
            "not a JSON-RPC 2.0 request, notification or response",
            _error_reply(request_id, INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message"),
        )


def _recover_id(line: bytes) -> RequestId | None:
    match = _ID_PATTERN.search(line)
    if match is None:
        return None
    try:
        return _valid_id(json.loads(match.group(1)))
    except ValueError:
        return None


def _valid_id(value: Any) -> RequestId | None:
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def _error_reply(request_id: RequestId | None, code: int, message: str) -> JSONRPCError | None:
    if request_id is None:
        return None
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))
