"""Bounded line reading: newline-delimited bytes in, one line (or one `TooLong`) out, never a whole huge line.

Owns splitting a byte source into lines and the one policy for a line over the limit. Does not own what a
line means (JSON-RPC, a CLI's events) nor the source itself beyond reading it: `LineReader.from_stream`
reads an anyio byte stream (a child's pipe), `LineReader.from_fd` a file descriptor (a process's own stdin).

Invariants:
- The reader never holds more than `limit` bytes (+ one read chunk) of a line, plus the `keep` bytes it
  keeps of an over-long one.
- A line over `limit` is dropped unread past its first `keep` bytes and comes out as
  `TooLong(prefix, size)`; the lines after it are read normally. What to do with it is the caller's
  business, and the callers differ only there, which is why `keep` is the one parameter of the policy:
  the plugin wire keeps 64 KiB to find the run id of the line and fail just that run (the bridge, which
  keeps to the standard library, applies the same policy in `mcphost_bridge/_lines.py`); the runner SDK and the harness keep nothing (they log, or count a diagnostic).
- Lines come out without their `\\n` and one trailing `\\r`. A last line without a newline is returned
  too; after it `receive()` raises `anyio.EndOfStream`.
- `from_fd` never blocks the event loop and is cancellable at any point: each `os.read` happens only
  after `anyio.wait_readable` reported data (or end of input). The descriptor's flags are left alone
  (O_NONBLOCK would be shared with whoever else holds the file description, such as a terminal that is
  also stdout). A descriptor the loop cannot poll (a regular file, /dev/null) never blocks, so it is read
  directly. POSIX only.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Self

import anyio
import anyio.abc
import anyio.lowlevel

READ_CHUNK = 64 * 1024
PREFIX_KEPT = 64 * 1024
"""How much of an over-long line `TooLong.prefix` holds by default."""


@dataclass(frozen=True, slots=True)
class TooLong:
    """Stands in for a line over the limit, which was not read past `prefix`."""

    prefix: bytes
    """The first bytes of the line (at most the reader's `keep`)."""
    size: int
    """The length of the whole line in bytes, without its newline."""


class LineReader:
    """Splits a byte source into lines, holding at most `limit` bytes (+ one chunk) of any line."""

    def __init__(
        self,
        read_chunk: Callable[[], Awaitable[bytes]],
        limit: int,
        *,
        keep: int = PREFIX_KEPT,
        unread: bytes = b"",
    ) -> None:
        """`read_chunk` returns the next bytes of the source, or `b""` at its end; `unread` comes first."""
        self._read_chunk = read_chunk
        self._limit = limit
        self._keep = keep
        self._buffer = bytearray(unread)
        self._scanned = 0  # bytes of `_buffer` known to hold no newline (a long line arrives in many reads)
        self._dropping: bytes | None = None
        self._dropped = 0
        self._eof = False

    @classmethod
    def from_stream(cls, stream: anyio.abc.ByteReceiveStream, limit: int, *, keep: int = PREFIX_KEPT) -> Self:
        """Lines of an anyio byte stream; the stream's own errors (closed, broken) propagate."""

        async def read_chunk() -> bytes:
            try:
                return await stream.receive(READ_CHUNK)
            except anyio.EndOfStream:
                return b""

        return cls(read_chunk, limit, keep=keep)

    @classmethod
    def from_fd(cls, fd: int, limit: int, *, keep: int = PREFIX_KEPT, unread: bytes = b"") -> Self:
        """Lines of a file descriptor, read without a worker thread and without blocking the loop.

        `unread`: bytes someone already read from `fd`, returned before the rest of it."""
        pollable = True

        async def read_chunk() -> bytes:
            nonlocal pollable
            if pollable:
                try:
                    await anyio.wait_readable(fd)
                except (
                    PermissionError
                ):  # epoll refuses regular files and /dev/null; reading them never blocks
                    pollable = False
            else:
                await anyio.lowlevel.checkpoint()
            return os.read(fd, READ_CHUNK)

        return cls(read_chunk, limit, keep=keep, unread=unread)

    async def receive(self) -> bytes | TooLong:
        """The next line, or `TooLong`; raises `anyio.EndOfStream` at the end of the source."""
        while True:
            newline = self._buffer.find(b"\n", self._scanned)
            if newline >= 0:
                return self._take(newline, newline + 1)
            if self._eof:
                if self._buffer or self._dropping is not None:
                    return self._take(len(self._buffer), len(self._buffer))
                raise anyio.EndOfStream
            if self._dropping is None and len(self._buffer) > self._limit:
                self._dropping = bytes(self._buffer[: self._keep])
                self._dropped = len(self._buffer)
                self._buffer.clear()
            elif self._dropping is not None:
                self._dropped += len(self._buffer)
                self._buffer.clear()
            self._scanned = len(self._buffer)
            chunk = await self._read_chunk()
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True

    def _take(self, end: int, consumed: int) -> bytes | TooLong:
        line = bytes(self._buffer[:end])
        del self._buffer[:consumed]
        self._scanned = 0
        if self._dropping is not None:
            prefix, size = self._dropping, self._dropped + len(line)
            self._dropping, self._dropped = None, 0
            return TooLong(prefix, size)
        line = line.removesuffix(b"\r")
        if len(line) > self._limit:
            return TooLong(line[: self._keep], len(line))
        return line
