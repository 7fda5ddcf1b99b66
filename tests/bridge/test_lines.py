"""stdin framing: `LineReader` over a real pipe and `parse_line` on well-formed and malformed lines."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from mcp_types import jsonrpc_message_adapter
from pydantic import ValidationError

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


def read_all(fd: int, wake_fd: int | None = None) -> list[bytes]:
    lines: list[bytes] = []
    reader = LineReader(fd, wake_fd=wake_fd)
    while (line := reader.readline()) is not None:
        lines.append(line)
    return lines


def test_lines_are_split_on_newlines_with_crlf_and_a_final_unterminated_line(pipe: Pipe) -> None:
    pipe.write_and_close(b'{"a":1}\r\n{"b":\n2}\n\n{"c":3}')
    assert read_all(pipe.read_fd) == [b'{"a":1}', b'{"b":', b"2}", b"", b'{"c":3}']


@pytest.mark.parametrize("length", [5_000, 300_000])  # within one read, and across many (pipe chunks)
def test_an_overlong_line_is_cut_and_the_next_line_survives(
    pipe: Pipe, monkeypatch: pytest.MonkeyPatch, length: int
) -> None:
    monkeypatch.setattr(mcphost_bridge._lines, "MAX_LINE_BYTES", 1000)
    data = b'{"id": 9, "x": "' + b"y" * length + b'"}\n{"ok":true}\n'
    writer = threading.Thread(target=pipe.write_and_close, args=(data,))
    writer.start()
    lines = read_all(pipe.read_fd)
    writer.join()
    assert len(lines) == 2
    assert len(lines[0]) == 1000
    assert lines[1] == b'{"ok":true}'
    rejected = parse_line(lines[0])
    assert isinstance(rejected, Rejection)
    assert rejected.reply is not None
    assert rejected.reply["id"] == 9


def test_a_write_to_the_wake_descriptor_ends_a_blocked_read(pipe: Pipe) -> None:
    wake = Pipe()
    try:
        threading.Timer(0.2, os.write, args=(wake.write_fd, b"!")).start()
        assert read_all(pipe.read_fd, wake.read_fd) == []  # stdin stays open; the wake ends the wait
    finally:
        wake.close(wake.read_fd)
        wake.close(wake.write_fd)


@pytest.mark.parametrize(
    "line",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"c"},"extra":1}',
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
        b'{"jsonrpc":"2.0","id":"a","result":{}}',
        b'{"jsonrpc":"2.0","id":2,"error":{"code":-1,"message":"no","data":[1]}}',
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-1,"message":"no"}}',
        b'{"jsonrpc":"2.0","id":true,"method":"ping"}',  # not an id: a notification, as the SDK reads it
        b'{"jsonrpc":"2.0","id":1.0,"method":"ping"}',
    ],
)
def test_json_rpc_lines_parse_into_what_the_sdk_envelopes_keep(line: bytes) -> None:
    parsed = parse_line(line)
    sdk: Any = jsonrpc_message_adapter.validate_json(line, by_name=False)
    assert parsed == sdk.model_dump(by_alias=True, exclude_unset=True, mode="json")


@pytest.mark.parametrize(
    "line",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}',
        b'{"jsonrpc":"2.0","id":1,"result":[]}',
        b'{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"no"}}',
        b'{"jsonrpc":"2.0","error":{"code":1,"message":"no"}}',
        b'{"jsonrpc":"2.0","id":1}',
    ],
)
def test_what_the_sdk_refuses_is_refused(line: bytes) -> None:
    with pytest.raises(ValidationError):
        jsonrpc_message_adapter.validate_json(line, by_name=False)
    assert isinstance(parse_line(line), Rejection)


def test_ids_keep_their_type() -> None:
    parsed = parse_line(b'{"jsonrpc":"2.0","id":"1","method":"ping"}')
    assert not isinstance(parsed, Rejection)
    assert parsed["id"] == "1"


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
        assert rejected.reply["id"] == reply_id
        assert rejected.reply["error"]["code"] == code
