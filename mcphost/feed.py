"""Live delivery inside one host process: wake-up signals and each active run's result feed.

Owns `Signal` (a wake-up that is never lost), `RunSignals` (a signal per run that readers here are
waiting on, woken by other processes' wake-ups, `stores/wakeups.py`) and `ResultFeed`, the results of one run this process
executes, handed to the readers of this process in memory as they are persisted. Does not persist
anything (the journal does, then publishes here) and does not serve runs of other processes, nor
resumes past what the feed keeps: those readers read the store (`Orchestrator.results`).

Invariants:
- Persist, then publish: `ResultFeed.publish` is called with results after their transaction
  committed, so a reader never sees a result the store does not have.
- A feed holds host sequences without gaps, oldest first; it keeps at least the newest `FEED_KEPT`
  (older ones are dropped in chunks); `after(seq)` answers None when results after `seq` are not
  in it (dropped, or persisted without being published), and the reader reads those from the store.
- `close()` is called once the run's end is written; readers drain what is left, then stop.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from contextlib import contextmanager

import anyio

from mcphost.models import Run
from mcphost.stores.results import StoredResult

FEED_KEPT = 1000
"""Results a feed keeps for readers that fall behind (further back they read the store)."""


class Signal:
    """A wake-up that is never lost: `notify()` wakes every waiter holding a ticket taken before it.

    Take `ticket()` *before* reading the state the signal guards, then `wait(ticket)`: a notify that
    lands between the read and the wait has already set the ticket, so the wait returns at once.
    """

    def __init__(self) -> None:
        self._event = anyio.Event()

    def ticket(self) -> anyio.Event:
        return self._event

    def notify(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    @staticmethod
    async def wait(ticket: anyio.Event, timeout: float) -> None:
        with anyio.move_on_after(timeout):
            await ticket.wait()


class RunSignals:
    """A `Signal` per run id while someone waits on it (`watch`); `notify` of an unwatched id is free."""

    def __init__(self) -> None:
        self._signals: dict[str, tuple[Signal, int]] = {}

    @contextmanager
    def watch(self, run_id: str) -> Generator[Signal]:
        signal, users = self._signals.get(run_id, (None, 0))
        signal = signal or Signal()
        self._signals[run_id] = (signal, users + 1)
        try:
            yield signal
        finally:
            signal, users = self._signals[run_id]
            if users == 1:
                del self._signals[run_id]
            else:
                self._signals[run_id] = (signal, users - 1)

    def notify(self, run_id: str) -> None:
        if (entry := self._signals.get(run_id)) is not None:
            entry[0].notify()

    def notify_all(self) -> None:
        for signal, _ in self._signals.values():
            signal.notify()


class ResultFeed:
    """One active run's persisted results, in memory, for this process's readers."""

    def __init__(self) -> None:
        self.signal = Signal()
        self.closed = False
        self.run: Run | None = None
        """The run as its end was recorded (set by `close`; None when that record is unknown)."""
        self._items: list[StoredResult] = []

    def publish(self, stored: Sequence[StoredResult]) -> None:
        """Add results that are now persisted (contiguous with the ones before) and wake readers."""
        if stored:
            if self._items and stored[0].seq != self._items[-1].seq + 1:
                # A batch whose commit was not acknowledged and never published: start afresh, so
                # a reader behind this point reads the store.
                self._items.clear()
            self._items.extend(stored)
            if len(self._items) >= 2 * FEED_KEPT:
                del self._items[: len(self._items) - FEED_KEPT]
        self.signal.notify()

    def close(self, run: Run | None) -> None:
        """The run's end is written (`run`, when known): readers take what is left and stop."""
        self.run = run
        self.closed = True
        self.signal.notify()

    def after(self, seq: int) -> list[StoredResult] | None:
        """The results after host sequence `seq`; None when some of them are no longer kept."""
        if not self._items:
            # Nothing published yet: nothing dropped either, unless `seq` is ahead of the run.
            return []
        first = self._items[0].seq
        if seq + 1 < first:
            return None
        return self._items[seq + 1 - first :]
