"""Live delivery inside one host process: wake-up signals, each active run's result feed, and the
readers of a run's results and end.

Owns `RunSignals` (a `common.tickets.Signal` per run that readers here are
waiting on, woken by other processes' wake-ups, `stores/wakeups.py`), `ResultFeed`, the results of one
run this process executes, handed to the readers of this process in memory as they are persisted, and
`RunReader` (`Orchestrator.results` and `wait`): a run active here is read from its feed, any other
(another process's, an ended one, or past what the feed keeps) from the store. Does not persist
anything (the journal does, then publishes here), nor know which runs are active here (the
orchestrator tells the reader, `RunReader.__init__`).

Invariants:
- Persist, then publish: `ResultFeed.publish` is called with results after their transaction
  committed, so a reader never sees a result the store does not have.
- A feed holds host sequences without gaps, oldest first; it keeps at least the newest `FEED_KEPT`
  (older ones are dropped in chunks); `after(seq)` answers None when results after `seq` are not
  in it (dropped, or persisted without being published), and the reader reads those from the store.
- `close()` is called once the run's end is written; readers drain what is left, then stop.
- A reader that resumes after sequence N gets every later result exactly once, whichever way it reads.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Sequence
from contextlib import aclosing, contextmanager

from mcphost.common.tickets import Signal
from mcphost.models import Run
from mcphost.stores import Stores
from mcphost.stores.results import StoredResult

FEED_KEPT = 1000
"""Results a feed keeps for readers that fall behind (further back they read the store)."""


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


class RunReader:
    """A run's results and its end, for readers in this process (`Orchestrator.results`, `wait`)."""

    def __init__(
        self,
        stores: Stores,
        *,
        local: Callable[[str], ResultFeed | None],
        ended: Callable[[str], Run | None],
        remote: RunSignals,
        poll_s: Callable[[], float],
        recheck_s: Callable[[], float],
        page: Callable[[], int],
    ) -> None:
        self._stores = stores
        self._local = local
        """The feed of a run active on this process, else None."""
        self._ended = ended
        """A run this process ended lately, as recorded, else None."""
        self._remote = remote
        self._poll_s = poll_s
        """How long a reader of another process's run sleeps between reads of the store."""
        self._recheck_s = recheck_s
        """How long a reader of a run active here waits for its signal before looking again."""
        self._page = page

    async def wait(self, run_id: str) -> Run:
        """Wait until the run is terminal (the latest ends of this process are answered from memory)."""
        feed = self._local(run_id)
        if feed is not None:
            # Active here: its feed is closed, with the run as it ended, once its end is written.
            while not feed.closed:
                await Signal.wait(feed.signal.ticket(), self._recheck_s())
        if (recent := self._ended(run_id)) is not None:
            return recent
        with self._remote.watch(run_id) as signal:  # another host's run (or one whose end was not recorded)
            while True:
                ticket = signal.ticket()
                run = await self._stores.runs.get(run_id)
                if run.status.is_terminal:
                    return run
                await Signal.wait(ticket, self._poll_s())

    async def results(self, run_id: str, *, after: int = 0) -> AsyncGenerator[StoredResult, None]:
        """Every persisted result of the run after host sequence `after`, live, until the run ends.

        A run active on this process is followed in memory (its `ResultFeed`: persist, then publish),
        with no reads unless the reader is further behind than the feed keeps; any other run (another
        replica's, or one that has ended) by reading the store, polling while it is active.
        """
        async with aclosing(self.batches(run_id, after=after)) as batches:
            async for batch in batches:
                for item in batch:
                    yield item

    async def batches(self, run_id: str, *, after: int = 0) -> AsyncGenerator[list[StoredResult], None]:
        """The results of `results`, in the batches they are at hand in: what the run's feed published
        since the reader last looked, or a page of the store; never empty."""
        feed = self._local(run_id)
        if feed is not None:
            async for batch in self._follow(feed, run_id, after):
                after = batch[-1].seq
                yield batch
            if feed.run is not None and feed.run.status.is_terminal:
                return
            # Its end could not be recorded: follow the store until the sweeper records it.
        else:
            await self._stores.runs.get(run_id)  # RunNotFoundError for unknown ids
        with self._remote.watch(run_id) as signal:
            while True:
                ticket = signal.ticket()  # before reading: another process's wake-up after it sets it
                batch = await self._stores.results.list(run_id, after=after, limit=self._page())
                if batch:
                    after = batch[-1].seq
                    yield batch
                    continue
                run = await self._stores.runs.get(run_id)
                if run.status.is_terminal:
                    if rest := await self._stores.results.list(run_id, after=after, limit=self._page()):
                        yield rest
                    return
                await Signal.wait(ticket, self._poll_s())

    async def _follow(self, feed: ResultFeed, run_id: str, after: int) -> AsyncIterator[list[StoredResult]]:
        """The results of a run active here after `after`, from its feed, until its end is written."""
        while True:
            ticket = feed.signal.ticket()  # before reading: a publish after this sets it
            closed = feed.closed
            batch = feed.after(after)
            if batch is None:  # behind what the feed keeps: catch up from the store
                batch = await self._stores.results.list(run_id, after=after, limit=self._page())
            if batch:
                after = batch[-1].seq
                yield batch  # a list of its own (a slice of the feed, or a page)
                continue
            if closed:
                return
            await Signal.wait(ticket, self._recheck_s())
