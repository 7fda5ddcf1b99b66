"""`UsageWriter`: the usage rows of finished model calls, written in batches off the request path.

Owns when a finished call's rows reach the `model_calls` table: a call is handed over (`add`) once its
answer is relayed, and a writer task writes what has gathered in one transaction (`ModelCallStore.record`)
at most `FLUSH_DELAY_S` later, at once when `MAX_BATCH` calls wait or when a run is settled. Does not own
what a row says (the proxy builds it) nor budgets (a reserved call's row is already in the table and
counts at its reservation until its usage replaces it).

Invariants:
- A call handed over is never dropped while the database can take it: a batch it refuses for being
  unavailable is retried with back-off, a batch in flight is finished even when the writer is cancelled,
  and the writer's exit (the host stopping) writes what is left, shielded and bounded by `CLOSE_WAIT_S`.
- `settle(run_id)` returns once every call of the run handed over before it was called is written (or
  after `SETTLE_WAIT_S`, logged): the orchestrator calls it as the run begins to close, before its end is
  recorded, so a run's usage rows are in the table before the run reads as ended.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

import anyio

from mcphost.errors import StorageUnavailableError
from mcphost.stores.usage import FinishedCall, ModelCallStore

logger = logging.getLogger(__name__)

FLUSH_DELAY_S = 0.05
"""How long a finished call may wait for others to share its transaction."""
MAX_BATCH = 256
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 2.0
"""The longest pause between two tries of a batch the database refused."""
SETTLE_WAIT_S = 30.0
CLOSE_WAIT_S = 30.0


class UsageWriter:
    """Gathers finished calls and writes them in batches; `running()` owns the writer task."""

    def __init__(self, usage: ModelCallStore) -> None:
        self._usage = usage
        self._waiting: list[FinishedCall] = []
        self._pending: Counter[str] = Counter()
        """Calls handed over and not yet written, by run."""
        self._wake = anyio.Event()
        self._written = anyio.Event()
        self._urgent = False
        self._running = False

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[UsageWriter]:
        async with anyio.create_task_group() as tg:
            self._running = True
            tg.start_soon(self._write_forever)
            try:
                yield self
            finally:
                self._running = False
                tg.cancel_scope.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_WAIT_S) as waited:
            while self._waiting:
                if not await self._write_batch():
                    await anyio.sleep(RETRY_FIRST_S)
        if waited.cancelled_caught:
            logger.error("%d model calls could not be recorded before the host stopped", len(self._waiting))

    def add(self, call: FinishedCall) -> None:
        """Hand over a finished call; it is written within `FLUSH_DELAY_S` (or as the writer stops)."""
        self._waiting.append(call)
        self._pending[call.start.run_id] += 1
        if len(self._waiting) >= MAX_BATCH:
            self._urgent = True
        self._wake.set()

    async def settle(self, run_id: str) -> None:
        """Return once the run's calls handed over so far are written."""
        if not self._pending[run_id]:
            return
        if not self._running:
            raise RuntimeError("the usage writer is not running: settle a run inside `running()`")
        with anyio.move_on_after(SETTLE_WAIT_S) as waited:
            while self._pending[run_id]:
                self._urgent = True
                self._wake.set()
                written = self._written
                await written.wait()
        if waited.cancelled_caught:
            logger.error(
                "run %s: %d model calls are not recorded yet after %g s; the run ends before them "
                "(they are still written when the database takes them)",
                run_id,
                self._pending[run_id],
                SETTLE_WAIT_S,
            )

    async def _write_forever(self) -> None:
        pause = RETRY_FIRST_S
        while True:
            if not self._waiting:
                await self._wake.wait()
            self._wake = anyio.Event()
            if not self._urgent:  # let the calls finishing meanwhile share the transaction
                with anyio.move_on_after(FLUSH_DELAY_S):
                    while not self._urgent:
                        await self._wake.wait()
                        self._wake = anyio.Event()
            self._urgent = False
            written = False
            with anyio.CancelScope(shield=True):  # a batch in flight is finished, not abandoned
                written = await self._write_batch()
            if written:
                pause = RETRY_FIRST_S
                self._urgent = len(self._waiting) >= MAX_BATCH
            else:
                await anyio.sleep(pause)  # the calls stay waiting: the next try, or the exit, writes them
                pause = min(pause * 2, RETRY_MAX_S)

    async def _write_batch(self) -> bool:
        """Try once to write the waiting calls (at most `MAX_BATCH`); False when the database refused."""
        batch = self._waiting[:MAX_BATCH]
        try:
            await self._usage.record(batch)
        except StorageUnavailableError as exc:
            logger.warning(
                "could not record %d model calls (will retry): %s", len(batch), exc.__cause__ or exc.message
            )
            return False
        except Exception:
            # Not the database being away but a row it will never take: retrying cannot help, and the
            # writer must go on for every other call.
            logger.exception("dropped %d model calls the database refused to record", len(batch))
        del self._waiting[: len(batch)]
        for call in batch:
            run_id = call.start.run_id
            self._pending[run_id] -= 1
            if self._pending[run_id] <= 0:
                del self._pending[run_id]
        written, self._written = self._written, anyio.Event()
        written.set()
        return True
