"""Periodic background loops: one helper, and one failure policy for every loop that works on a timer.

Owns `Periodic`: call a tick, wait, call it again, until cancelled, and what happens when a tick raises.
Does not own what a tick does, its clock (a tick says how long to wait before the next one) or the task
that runs the loop (its owner starts `run` in a task group it entered).

Invariants:
- A tick that raises an `Exception` never ends the loop (unless its type is one of the loop's `fatal`
  ones, which propagate): the first failure of a streak is logged with the loop's name and its
  traceback; later failures of the same streak are logged at debug level only, and the first success
  after a streak logs how many ticks failed. Every failure is counted in `FAILURES` by loop name (the
  `/metrics` counter `mcphost_loop_failures_total`, read when scraped).
- After a failure the loop waits a jittered exponential back-off (`common/backoff.py`) from `retry_s`
  (default: the loop's interval) up to `max_backoff_s` (default: 8 times `retry_s`, at most a minute,
  never less than `retry_s`); the first success resets it.
- Cancellation ends the loop at once, in a wait or in a tick: only `Exception` is caught, never the
  cancellation.
- `wake()` ends the current wait at once; a `wake()` during a tick ends the wait after it, so a wake
  is never lost.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc
import anyio.lowlevel

from mcphost.common.backoff import Backoff

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 60.0
"""The longest wait after failed ticks, unless a loop says otherwise (or its `retry_s` is longer)."""
BACKOFF_FACTOR = 8
"""Nor, by default, more than this many times the loop's `retry_s`: a fast loop stays fast."""

FAILURES: Counter[str] = Counter()
"""Failed ticks in this process by loop name, since it started (shared by the hosts of one process)."""

Tick = Callable[[], Awaitable[float | None]]
"""One pass of a loop; returns the seconds to wait before the next pass (None: the loop's interval)."""


class Periodic:
    """A loop that calls `tick` every `interval_s` (or as each tick says), until cancelled."""

    def __init__(
        self,
        name: str,
        tick: Tick,
        *,
        interval_s: float,
        retry_s: float | None = None,
        max_backoff_s: float | None = None,
        wait_first: bool = False,
        fatal: tuple[type[Exception], ...] = (),
    ) -> None:
        """Args:
        name: says which loop failed in logs and metrics ("the run sweep").
        retry_s: the first wait after a failed tick (default `interval_s`), doubled per failure.
        max_backoff_s: the longest wait after failed ticks (default `BACKOFF_FACTOR` times `retry_s`, at
            most `MAX_BACKOFF_S`; never below `retry_s`).
        wait_first: wait an interval before the first tick.
        fatal: exception types that end the loop (they propagate) instead of being retried.
        """
        if interval_s < 0:
            raise ValueError(f"loop {name!r} needs interval_s >= 0, got {interval_s!r}")
        retry = interval_s if retry_s is None else retry_s
        retry = retry if retry > 0 else 0.1
        self.name = name
        self.interval_s = interval_s
        self._tick = tick
        self._wait_first = wait_first
        self._fatal = fatal
        cap = min(MAX_BACKOFF_S, BACKOFF_FACTOR * retry) if max_backoff_s is None else max_backoff_s
        self._backoff = Backoff(retry, max(retry, cap))
        self._woken = anyio.Event()
        FAILURES.update({name: 0})  # present (at 0) before the first failure, as every counter label is

    @property
    def failing(self) -> int:
        """Ticks failed in a row until now (0 after a success)."""
        return self._backoff.failures

    def wake(self) -> None:
        """End the current wait now (or the next one, when a tick is running)."""
        self._woken.set()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Tick until cancelled; started (`task_status`) before the first tick."""
        task_status.started()
        if self._wait_first:
            await self._wait(self.interval_s)
        while True:
            self._woken = anyio.Event()  # a wake from now on ends the wait after this tick
            try:
                delay = await self._tick()
            except self._fatal:
                raise
            except Exception:
                delay = self._failed()
            else:
                if self._backoff.failures:
                    log.info("%s works again after %d failed ticks", self.name, self._backoff.failures)
                    self._backoff.reset()
                if delay is None:
                    delay = self.interval_s
            await self._wait(delay)

    def _failed(self) -> float:
        """Count and log the failure being handled; the wait before the next tick."""
        FAILURES[self.name] += 1
        delay = self._backoff.next()
        if self._backoff.failures == 1:
            log.exception(
                "%s failed; retrying in %.3g s, backing off up to %.3g s while it fails",
                self.name,
                delay,
                self._backoff.max_s,
            )
        else:
            log.debug(
                "%s failed again (%d in a row); retrying in %.3g s", self.name, self._backoff.failures, delay
            )
        return delay

    async def _wait(self, delay: float) -> None:
        if delay <= 0:
            await anyio.lowlevel.checkpoint()
            return
        with anyio.move_on_after(delay):
            await self._woken.wait()
