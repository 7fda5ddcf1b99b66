"""`mcphost.common.lines`: the one bounded line reader, over chunk lists, a real pipe and a regular file."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from mcphost.common.lines import LineReader, TooLong


class Chunks:
    """A source of fixed chunks that records the most the reader ever held."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks
        self.reader: LineReader | None = None
        self.peak = 0

    async def __call__(self) -> bytes:
        if self.reader is not None:
            # The reader's buffer is private: its size is what this test bounds.
            self.peak = max(self.peak, len(self.reader._buffer))  # pyright: ignore[reportPrivateUsage]
        return self._chunks.pop(0) if self._chunks else b""


async def read_all(reader: LineReader) -> list[bytes | TooLong]:
    found: list[bytes | TooLong] = []
    while True:
        try:
            found.append(await reader.receive())
        except anyio.EndOfStream:
            return found


async def test_the_reader_never_holds_more_than_the_limit_of_one_line() -> None:
    limit = 1000
    source = Chunks([b"x" * 256] * 40 + [b"yy\nnext line\n", b"tail without newline"])
    reader = source.reader = LineReader(source, limit)
    assert await read_all(reader) == [
        TooLong(b"x" * (limit + 24), 256 * 40 + 2),
        b"next line",
        b"tail without newline",
    ]
    assert source.peak <= limit + 256


@pytest.mark.parametrize("keep", [0, 10, 1000])
async def test_an_overlong_line_keeps_at_most_keep_bytes_whether_it_arrives_whole_or_in_pieces(
    keep: int,
) -> None:
    line = b"z" * 5000
    whole = await read_all(LineReader(Chunks([line + b"\nok\n"]), 1000, keep=keep))
    pieces = await read_all(LineReader(Chunks([line[:1500], line[1500:], b"\nok\n"]), 1000, keep=keep))
    assert whole == pieces == [TooLong(b"z" * keep, 5000), b"ok"]


async def test_crlf_and_a_line_of_exactly_the_limit_are_read_and_an_overlong_last_line_is_reported() -> None:
    source = Chunks([b"a\r\n", b"b" * 8 + b"\n", b"c" * 20])
    assert await read_all(LineReader(source, 8, keep=2)) == [b"a", b"b" * 8, TooLong(b"cc", 20)]


async def test_a_stream_source_reads_a_childs_lines_until_its_end() -> None:
    code = "import sys, time; sys.stdout.write('{\"a\":1}\\n{\"b\"'); sys.stdout.flush(); time.sleep(0.1); print(':2}')"
    with anyio.fail_after(10):
        async with await anyio.open_process([sys.executable, "-c", code]) as process:
            assert process.stdout is not None
            assert await read_all(LineReader.from_stream(process.stdout, 100)) == [b'{"a":1}', b'{"b":2}']


async def test_a_descriptor_source_is_cancellable_while_waiting_and_left_blocking() -> None:
    read_fd, write_fd = os.pipe()
    try:
        with anyio.fail_after(5):  # a read in a worker thread would hang here
            with anyio.move_on_after(0.2) as scope:
                await LineReader.from_fd(read_fd, 100).receive()
        assert scope.cancelled_caught
        assert os.get_blocking(read_fd)
        os.write(write_fd, b"one\ntwo")
        os.close(write_fd)
        write_fd = -1
        assert await read_all(LineReader.from_fd(read_fd, 100)) == [b"one", b"two"]
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


async def test_a_regular_file_is_read_although_it_cannot_be_polled(tmp_path: Path) -> None:
    path = tmp_path / "input.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":2}\n')
    with path.open("rb") as stream:
        assert await read_all(LineReader.from_fd(stream.fileno(), 100)) == [b'{"a":1}', b'{"b":2}']
