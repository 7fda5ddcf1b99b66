"""Audit rows of facts calls, written with group commit.

Owns `AuditWriter`: calls hand it their `AuditEntry` and wait until it is stored; a background task
stores whatever has queued up in one transaction (`AuditStore.append_many`). Under load many calls share
one write instead of taking turns at the database's single writer (SQLite) or its per-run locks. Does
not decide what an entry says (`_dispatch.py` does).

Invariants:
- `write(entry)` returns only once the entry is stored, or once storing it failed (logged), or after
  `timeout_s`; it never raises and cannot be cancelled half-way (it is shielded), so a cancelled call is
  still audited.
- A batch that fails is retried entry by entry, so one bad entry (e.g. a run deleted meanwhile) costs
  only its own row.
- Without the background task (before `run` starts, after `close`) entries are stored one by one,
  directly; nothing is dropped on the way in or out. `close` lets the task store what is queued first.
"""

from __future__ import annotations

import logging

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from mcphost.stores import AuditEntry
from mcphost.stores.audit import AuditStore

logger = logging.getLogger(__name__)

MAX_BATCH = 500


class AuditWriter:
    """Stores audit entries, batching those that arrive together."""

    def __init__(self, audit: AuditStore, *, timeout_s: float = 10.0) -> None:
        self._audit = audit
        self._timeout_s = timeout_s
        self._send: MemoryObjectSendStream[tuple[AuditEntry, anyio.Event]] | None = None
        self._stopped = anyio.Event()

    async def write(self, entry: AuditEntry) -> None:
        """Store `entry` (waiting for its batch to commit)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._timeout_s) as timeout:
            send = self._send
            stored = anyio.Event()
            try:
                if send is None:
                    raise anyio.ClosedResourceError
                send.send_nowait((entry, stored))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                await self._store_one(entry)
                return
            await stored.wait()
        if timeout.cancelled_caught:
            logger.error("storing the audit row of %s for run %s timed out", entry.tool, entry.run_id)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Store queued entries until `close` (then store what is left)."""
        send, receive = anyio.create_memory_object_stream[tuple[AuditEntry, anyio.Event]](float("inf"))
        self._send = send
        task_status.started()
        try:
            await self._drain(receive)
        finally:
            self._send = None
            self._stopped.set()

    async def _drain(self, receive: MemoryObjectReceiveStream[tuple[AuditEntry, anyio.Event]]) -> None:
        async with receive:
            async for first in receive:
                batch = [first]
                while len(batch) < MAX_BATCH:
                    try:
                        batch.append(receive.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                await self._store(batch)

    async def close(self) -> None:
        """Stop taking entries into batches and wait (bounded) until the queued ones are stored."""
        send, self._send = self._send, None
        if send is None:
            return
        send.close()
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._timeout_s):
            await self._stopped.wait()

    async def _store(self, batch: list[tuple[AuditEntry, anyio.Event]]) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self._audit.append_many([entry for entry, _ in batch])
            except Exception:
                logger.warning("an audit batch of %d rows failed; storing them one by one", len(batch))
                for entry, _ in batch:
                    await self._store_one(entry)
            finally:
                for _, stored in batch:
                    stored.set()

    async def _store_one(self, entry: AuditEntry) -> None:
        try:
            await self._audit.append(entry)
        except Exception:
            logger.exception("could not store the audit row of %s for run %s", entry.tool, entry.run_id)
