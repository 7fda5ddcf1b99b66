"""A plugin connection's writes to the plugin's stdin (`Connection.send`, `pump_stdin`, `close_stdin`).

The plugin here is a fake process whose stdin records each write: what these tests check is how lines
are grouped into writes, which a real plugin's buffered reads cannot tell. The real plugin processes,
with many runs in flight, are `test_process.py`'s.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, cast

import anyio
import anyio.abc
import pytest

from mcphost.plugins._wire import BrokenConnectionError, Connection, RunRoute


class RecordingStdin:
    """A plugin's stdin: each `send` is one write, recorded; `stuck` makes writes wait for good (a
    plugin that stopped reading), `broken` makes them fail (a plugin that closed its stdin)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.stuck = False
        self.broken = False
        self.closed = False

    async def send(self, item: bytes) -> None:
        if self.broken:
            raise anyio.BrokenResourceError
        self.writes.append(item)
        if self.stuck:
            await anyio.sleep_forever()
        await anyio.lowlevel.cancel_shielded_checkpoint()  # as anyio's own stream does after a write

    async def aclose(self) -> None:
        self.closed = True


class FakeProcess:
    def __init__(self) -> None:
        self.stdin = RecordingStdin()
        self.pid = 4242


@contextmanager
def connection(runs: int) -> Generator[tuple[Connection, RecordingStdin], None, None]:
    """A connection to a fake process with `runs` runs in flight."""
    process = FakeProcess()
    conn = Connection("fake", cast(anyio.abc.Process, process), on_diagnostic=lambda: None)
    send, receive = anyio.create_memory_object_stream[Any](1)
    with send, receive:
        for i in range(runs):
            conn.runs[f"run-{i}"] = RunRoute(send)
        yield conn, process.stdin


@asynccontextmanager
async def pumping(conn: Connection) -> AsyncGenerator[None, None]:
    async with anyio.create_task_group() as tg:
        tg.start_soon(conn.pump_stdin)
        yield
        conn.stdin_scope.cancel()


def lines(chunk: bytes) -> list[bytes]:
    return chunk.splitlines()


async def test_the_lines_sent_in_one_loop_turn_with_runs_in_flight_go_out_in_one_write_in_order() -> None:
    with connection(runs=3) as (conn, stdin):
        async with pumping(conn), anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(conn.notify, "runner/cancel", {"run_id": f"run-{i}"})
        assert len(stdin.writes) == 1
        assert lines(stdin.writes[0]) == [
            b'{"jsonrpc":"2.0","method":"runner/cancel","params":{"run_id":"run-%d"}}' % i for i in range(3)
        ]


async def test_a_run_alone_on_the_process_is_written_in_its_own_step_without_the_pump() -> None:
    with connection(runs=1) as (conn, stdin):  # no `pump_stdin` running: a queued line would never be written
        with anyio.fail_after(5):
            await conn.notify("runner/cancel", {"run_id": "run-0"})
        assert stdin.writes == [b'{"jsonrpc":"2.0","method":"runner/cancel","params":{"run_id":"run-0"}}\n']


async def test_lines_queued_while_a_write_is_under_way_follow_it_together() -> None:
    with connection(runs=0) as (conn, stdin):
        async with pumping(conn), anyio.create_task_group() as tg:
            for i in range(4):  # the first goes at once; the other three queue behind its write
                tg.start_soon(conn.notify, "n", {"i": i})
        assert [len(lines(w)) for w in stdin.writes] == [1, 3]
        assert [line for w in stdin.writes for line in lines(w)] == [
            b'{"jsonrpc":"2.0","method":"n","params":{"i":%d}}' % i for i in range(4)
        ]


async def test_a_queued_request_whose_write_fails_hears_of_it_and_later_sends_fail_at_once() -> None:
    with connection(runs=2) as (conn, stdin):
        stdin.broken = True
        async with pumping(conn):
            with anyio.fail_after(5), pytest.raises(BrokenConnectionError, match="stopped reading its stdin"):
                await conn.request("runner/run", {"run_id": "run-0"})
        assert conn.broken is not None
        assert conn.closed.is_set()
        with pytest.raises(BrokenConnectionError):
            await conn.notify("runner/cancel", {"run_id": "run-1"})


async def test_closing_stdin_does_not_wait_for_a_plugin_that_stopped_reading() -> None:
    with connection(runs=2) as (conn, stdin):
        stdin.stuck = True
        async with pumping(conn):
            await conn.notify("n", {"i": 1})  # the pump's write of it never returns
            await anyio.wait_all_tasks_blocked()
            assert len(stdin.writes) == 1
            with anyio.fail_after(5):
                await conn.close_stdin()
        assert stdin.closed


async def test_a_sender_waits_while_the_queue_is_over_its_limit_until_the_stdin_closes() -> None:
    with connection(runs=2) as (conn, stdin):
        stdin.stuck = True
        big = {"text": "x" * (600 * 1024)}
        released = anyio.Event()

        async def third() -> None:
            await conn.notify("n", big)  # past 1 MiB queued: waits for the pump
            released.set()

        async with pumping(conn), anyio.create_task_group() as tg:
            await conn.notify("n", big)  # taken by the pump, whose write then waits for good
            await anyio.wait_all_tasks_blocked()
            await conn.notify("n", big)  # queued: 600 KiB, under the limit
            tg.start_soon(third)
            await anyio.wait_all_tasks_blocked()
            assert not released.is_set()
            with anyio.fail_after(5):
                await conn.close_stdin()
                await released.wait()
        assert len(stdin.writes) == 1
