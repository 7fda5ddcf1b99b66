"""The periodic loop helper: a failing tick is logged once with a traceback, counted, backed off with a
cap, and the loop goes on; a wake ends the wait; a cancel ends the loop; a fatal error ends it too."""

from __future__ import annotations

import logging

import anyio
import pytest

from mcphost.common.periodic import FAILURES, Periodic


class Flaky:
    """A tick that fails `failures` times, then succeeds; records when each call started."""

    def __init__(self, failures: int, *, until: int = 0) -> None:
        self.failures = failures
        self.calls: list[float] = []
        self.until = until
        self.reached = anyio.Event()
        """Set at the `until`-th call."""

    async def __call__(self) -> float | None:
        self.calls.append(anyio.current_time())
        if len(self.calls) == self.until:
            self.reached.set()
        if len(self.calls) <= self.failures:
            raise RuntimeError(f"tick {len(self.calls)} broke")
        return None


async def test_a_failing_tick_is_logged_once_with_its_traceback_counted_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tick = Flaky(failures=3, until=6)
    before = FAILURES["the flaky loop"]
    loop = Periodic("the flaky loop", tick, interval_s=0.01, retry_s=0.01, max_backoff_s=0.04)
    caplog.set_level(logging.DEBUG, logger="mcphost.common.periodic")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(loop.run)
            await tick.reached.wait()
            tg.cancel_scope.cancel()
    assert FAILURES["the flaky loop"] - before == 3
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1
    assert "the flaky loop failed" in errors[0].getMessage()
    assert errors[0].exc_info is not None
    assert "tick 1 broke" in str(errors[0].exc_info[1])
    assert sum("failed again" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG) == 2
    assert any("works again after 3 failed ticks" in r.getMessage() for r in caplog.records)
    assert loop.failing == 0


async def test_failed_ticks_back_off_exponentially_up_to_the_cap_and_a_success_resets_it() -> None:
    tick = Flaky(failures=5, until=8)
    loop = Periodic("backing off", tick, interval_s=0.01, retry_s=0.05, max_backoff_s=0.2)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(loop.run)
            await tick.reached.wait()
            tg.cancel_scope.cancel()
    gaps = [b - a for a, b in zip(tick.calls, tick.calls[1:], strict=False)]
    # Waits after failures 1..5: at least 0.05, 0.1, 0.15 (the cap less its jitter), 0.15, 0.15.
    for gap, least in zip(gaps[:5], (0.05, 0.1, 0.15, 0.15, 0.15), strict=True):
        assert gap >= least * 0.95
    assert max(gaps[:5]) < 0.2 + 0.5  # the cap holds (with room for a busy machine)
    assert gaps[6] < 0.05 + 0.5  # after the success: the interval again, not the back-off
    assert min(gaps[5:7]) < 0.05


async def test_a_wake_ends_the_wait_and_one_during_a_tick_is_not_lost() -> None:
    calls: list[float] = []
    third = anyio.Event()
    loop: Periodic

    async def tick() -> float | None:
        calls.append(anyio.current_time())
        if len(calls) == 2:
            loop.wake()  # during the tick: the wait after it ends at once
        if len(calls) == 3:
            third.set()
        return None

    loop = Periodic("woken", tick, interval_s=3600)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(loop.run)
            await anyio.sleep(0.05)
            assert len(calls) == 1
            loop.wake()
            await third.wait()
            await anyio.sleep(0.05)
            assert len(calls) == 3  # then it waits its hour again
            tg.cancel_scope.cancel()


async def test_a_cancel_ends_the_loop_in_a_tick_and_in_a_wait() -> None:
    entered = anyio.Event()

    async def slow() -> float | None:
        entered.set()
        await anyio.sleep(3600)
        return None

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(Periodic("slow tick", slow, interval_s=1).run)
            await entered.wait()
            tg.cancel_scope.cancel()
        async with anyio.create_task_group() as tg:
            await tg.start(Periodic("long wait", Flaky(0), interval_s=3600, wait_first=True).run)
            await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    assert FAILURES["slow tick"] == 0


async def test_a_fatal_error_ends_the_loop() -> None:
    class RefusedError(Exception):
        pass

    async def tick() -> float | None:
        raise RefusedError("not yours")

    with anyio.fail_after(5), pytest.raises(ExceptionGroup) as raised:
        async with anyio.create_task_group() as tg:
            tg.start_soon(Periodic("refused", tick, interval_s=0.01, fatal=(RefusedError,)).run)
    assert raised.group_contains(RefusedError)


def test_an_interval_below_zero_is_refused() -> None:
    async def tick() -> float | None:
        return None

    with pytest.raises(ValueError, match="'bad' needs interval_s >= 0"):
        Periodic("bad", tick, interval_s=-1)
