"""The SQLite writer thread (`mcphost/stores/_writer.py`): one function at a time in submission order,
results and exceptions back on the loop, the caller's context variables, stop and restart."""

from __future__ import annotations

import contextvars
import threading
import time

import anyio
import pytest

from mcphost.stores._writer import WriterThread

pytestmark = pytest.mark.anyio
_who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


async def test_functions_run_one_at_a_time_in_order_on_one_other_thread() -> None:
    writer = WriterThread("test-writer")
    running, ran, threads = [0], list[int](), set[int]()

    def work(i: int) -> int:
        running[0] += 1
        assert running[0] == 1, "two functions ran at once"
        threads.add(threading.get_ident())
        time.sleep(0.001)
        ran.append(i)
        running[0] -= 1
        return i * 2

    results: dict[int, int] = {}

    async def call(i: int) -> None:
        results[i] = await writer.call(work, i)

    try:
        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(call, i)
                await anyio.lowlevel.checkpoint()  # submitted in this order
    finally:
        writer.stop()
    assert ran == list(range(20))
    assert results == {i: i * 2 for i in range(20)}
    assert len(threads) == 1
    assert threading.get_ident() not in threads


async def test_an_exception_is_raised_to_the_caller_and_the_thread_goes_on() -> None:
    writer = WriterThread("test-writer")

    def fail() -> None:
        raise LookupError("from the thread")

    try:
        with pytest.raises(LookupError, match="from the thread"):
            await writer.call(fail)
        assert await writer.call(lambda: "still there") == "still there"
    finally:
        writer.stop()


async def test_the_function_sees_the_callers_context_variables() -> None:
    writer = WriterThread("test-writer")
    token = _who.set("the caller")
    try:
        assert await writer.call(_who.get) == "the caller"
    finally:
        _who.reset(token)
        writer.stop()


async def test_stop_ends_the_thread_and_a_later_call_starts_a_new_one() -> None:
    writer = WriterThread("test-writer")
    first = await writer.call(threading.current_thread)
    writer.stop()
    assert not first.is_alive()
    writer.stop()  # twice: nothing to stop
    second = await writer.call(threading.current_thread)
    try:
        assert second is not first
        assert second.is_alive()
        assert second.daemon
        assert second.name == "test-writer"
    finally:
        writer.stop()
    assert not second.is_alive()
