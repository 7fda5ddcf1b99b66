"""The stdio side's framing: newline-delimited JSON-RPC lines in, one parsed message (or a rejection) each.

Owns reading stdin without a worker thread and turning a line into an SDK envelope model. It does not own what
happens to a message afterwards (the relay does) nor writing stdout.

Invariants:
- Lines are read by `mcphost.common.lines` (the one bounded reader; the import contract lets the bridge use
  `mcphost.common` only, and neither `mcphost/__init__.py` nor `mcphost/common/__init__.py` imports anything): never
  blocking the loop, cancellable at any point, the descriptor's flags left alone. POSIX only.
- A line longer than `MAX_LINE_BYTES` is cut at that length and the rest discarded up to its newline; the cut
  line then fails to parse like any other malformed line.
- A malformed line never raises: `parse_line` returns a `Rejection` carrying a JSON-RPC error reply when an id
  could be recovered from the line (parse error -32700 for broken JSON, invalid request -32600 for JSON that
  is not a JSON-RPC message), else no reply.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, cast

import anyio
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

from mcphost.common import lines

__all__ = ["MAX_LINE_BYTES", "LineReader", "Rejection", "parse_line"]

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 32 * 1024 * 1024
"""Longest stdin line accepted (the SDK server refuses bodies over 4 MiB by default anyway)."""

# The first `"id": <int or string>` in a line; only used on lines that are not valid JSON.
_ID_PATTERN = re.compile(rb'"id"\s*:\s*(-?\d+(?![\d.eE])|"(?:[^"\\\r\n]|\\.)*")')


class LineReader:
    """stdin lines, read by `mcphost.common.lines` without ever blocking the event loop."""

    def __init__(self, fd: int, *, unread: bytes = b"") -> None:
        """`unread`: bytes already taken from `fd` (by `_first`), read before the rest of it."""
        # Keep `MAX_LINE_BYTES` of an over-long line: cut there, it fails to parse like any malformed line
        # and its id (near the start of a JSON-RPC message) is still there for the error reply.
        self._lines = lines.LineReader.from_fd(fd, MAX_LINE_BYTES, keep=MAX_LINE_BYTES, unread=unread)

    async def readline(self) -> bytes | None:
        """The next line without its terminator (an over-long one cut at the limit), or None at the end."""
        try:
            line = await self._lines.receive()
        except anyio.EndOfStream:
            return None
        if isinstance(line, lines.TooLong):
            logger.warning(
                "a stdin line of %d bytes is longer than %d; the rest of it is discarded",
                line.size,
                MAX_LINE_BYTES,
            )
            return line.prefix
        return line


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
