"""stdin framing: `LineReader` over a real pipe and `parse_line` on well-formed and malformed lines."""

from __future__ import annotations

import os
from collections.abc import Iterator

import anyio
import anyio.to_thread
import pytest
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

import mcphost_bridge._lines
from mcphost_bridge._lines import LineReader, Rejection, parse_line


class Pipe:
    """An OS pipe whose ends are closed exactly once (a second close could hit a reused descriptor)."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self._open = {self.read_fd, self.write_fd}

    def write_and_close(self, data: bytes) -> None:
        """Write everything (blocking while the pipe is full), then close the write end."""
        view = memoryview(data)
        while view:
            view = view[os.write(self.write_fd, view) :]
        self.close(self.write_fd)

    def close(self, fd: int) -> None:
        if fd in self._open:
            self._open.discard(fd)
            os.close(fd)


@pytest.fixture
def pipe() -> Iterator[Pipe]:
    opened = Pipe()
    try:
        yield opened
    finally:
        for fd in (opened.read_fd, opened.write_fd):
            opened.close(fd)


async def read_all(fd: int) -> list[bytes]:
    lines: list[bytes] = []
    reader = LineReader(fd)
    while (line := await reader.readline()) is not None:
        lines.append(line)
    return lines


async def test_lines_are_split_on_newlines_with_crlf_and_a_final_unterminated_line(pipe: Pipe) -> None:
    pipe.write_and_close(b'{"a":1}\r\n{"b":\n2}\n\n{"c":3}')
    assert await read_all(pipe.read_fd) == [b'{"a":1}', b'{"b":', b"2}", b"", b'{"c":3}']


@pytest.mark.parametrize("length", [5_000, 300_000])  # within one read, and across many (pipe chunks)
async def test_an_overlong_line_is_cut_and_the_next_line_survives(
    pipe: Pipe, monkeypatch: pytest.MonkeyPatch, length: int
) -> None:
    monkeypatch.setattr(mcphost_bridge._lines, "MAX_LINE_BYTES", 1000)
    data = b'{"id": 9, "x": "' + b"y" * length + b'"}\n{"ok":true}\n'
    lines: list[bytes] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, pipe.write_and_close, data)
        lines = await read_all(pipe.read_fd)
    assert len(lines) == 2
    assert len(lines[0]) == 1000
    assert lines[1] == b'{"ok":true}'
    rejected = parse_line(lines[0])
    assert isinstance(rejected, Rejection)
    assert rejected.reply is not None
    assert rejected.reply.id == 9


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', JSONRPCRequest),
        (b'{"jsonrpc":"2.0","method":"notifications/initialized"}', JSONRPCNotification),
        (b'{"jsonrpc":"2.0","id":"a","result":{}}', JSONRPCResponse),
        (b'{"jsonrpc":"2.0","id":2,"error":{"code":-1,"message":"no"}}', JSONRPCError),
    ],
)
def test_json_rpc_lines_parse_into_the_sdk_envelopes(line: bytes, kind: type) -> None:
    assert isinstance(parse_line(line), kind)


def test_ids_keep_their_type() -> None:
    parsed = parse_line(b'{"jsonrpc":"2.0","id":"1","method":"ping"}')
    assert isinstance(parsed, JSONRPCRequest)
    assert parsed.id == "1"


@pytest.mark.parametrize(
    ("line", "reply_id", "code"),
    [
        (b'{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{', 7, -32700),
        (b'{"jsonrpc":"2.0","id":"a\\"b","method":', 'a"b', -32700),
        (b'\xff{"id": 3}', 3, -32700),
        (b"not json", None, -32700),
        (b'{"jsonrpc":"2.0","id":1.5,"method":', None, -32700),
        (b'{"id":"x","hello":"world"}', "x", -32600),
        (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', None, -32600),
        (b'{"jsonrpc":"1.0","id":4,"method":"ping"}', 4, -32600),
        (b'{"jsonrpc":"2.0","id":true,"result":{}}', None, -32600),
    ],
)
def test_malformed_lines_are_rejected_with_a_reply_when_an_id_is_recoverable(
    line: bytes, reply_id: int | str | None, code: int
) -> None:
    rejected = parse_line(line)
    assert isinstance(rejected, Rejection)
    if reply_id is None:
        assert rejected.reply is None
    else:
        assert rejected.reply is not None
        assert rejected.reply.id == reply_id
        assert rejected.reply.error.code == code
