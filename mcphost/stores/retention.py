"""Retention: deleting rows older than their kind's maximum age, in bounded batches.

Owns the deletes of `mcphost gc` for the row kinds it covers: run results, audit, the event log and the
transcript. Does not own the maximum ages (`[retention]` in `config.py`) or when collection runs.

Invariants:
- Nothing an active (queued or running) run references is deleted: results and audit rows only of runs
  that ended before the cutoff; event-log and transcript rows only when their run is not active, and an
  event only when no active run (a queued retry too) was admitted for its `event_id`.
- Deletes go in batches of at most `BATCH` rows, one short transaction each, so a large backlog never
  holds a long write lock.
- A dry run counts what would go and deletes nothing.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Select, delete, func, or_, select, tuple_

from mcphost.stores.engine import Database
from mcphost.stores.runs import ACTIVE_STATUSES
from mcphost.stores.tables import AuditRow, EventRow, RunResultRow, RunRow, TranscriptRow

BATCH = 500
KINDS: tuple[str, ...] = ("run_results", "audit", "events", "transcript")


class Collected(BaseModel):
    """What one kind's collection deleted (or, in a dry run, would delete)."""

    model_config = ConfigDict(frozen=True)

    kind: str
    rows: int
    cutoff: float


def _ended_runs(cutoff: float) -> Select[str]:
    return select(RunRow.run_id).where(RunRow.status.not_in(ACTIVE_STATUSES), RunRow.ended_at < cutoff)


def _candidates(kind: str, cutoff: float) -> tuple[Select[*tuple[Any, ...]], Any]:
    """The keys of the rows of `kind` that may go, and their table."""
    if kind == "run_results":
        return select(RunResultRow.run_id, RunResultRow.seq).where(
            RunResultRow.run_id.in_(_ended_runs(cutoff))
        ), RunResultRow
    if kind == "audit":
        return select(AuditRow.run_id, AuditRow.seq).where(AuditRow.run_id.in_(_ended_runs(cutoff))), AuditRow
    active = select(RunRow.run_id).where(RunRow.status.in_(ACTIVE_STATUSES))
    if kind == "events":
        active_events = select(RunRow.event_id).where(RunRow.status.in_(ACTIVE_STATUSES))
        return select(EventRow.seq).where(
            EventRow.created_at < cutoff,
            or_(EventRow.run_id.is_(None), EventRow.run_id.not_in(active)),
            EventRow.event_id.not_in(active_events),
        ), EventRow
    assert kind == "transcript", kind
    return select(TranscriptRow.seq).where(
        TranscriptRow.created_at < cutoff,
        or_(TranscriptRow.run_id.is_(None), TranscriptRow.run_id.not_in(active)),
    ), TranscriptRow


class RetentionStore:
    """Delete expired rows, kind by kind."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def collect(self, kind: str, cutoff: float, *, dry_run: bool = False) -> Collected:
        """Delete the rows of `kind` older than `cutoff` (epoch seconds) that no active run references."""
        keys, table = _candidates(kind, cutoff)
        if dry_run:
            async with self._db.read() as session:
                count = await session.scalar(select(func.count()).select_from(keys.subquery()))
            return Collected(kind=kind, rows=int(count or 0), cutoff=cutoff)
        total = 0
        while True:
            async with self._db.write() as session:
                batch = (await session.execute(keys.limit(BATCH))).all()
                if not batch:
                    break
                pk = list(table.__table__.primary_key.columns)
                await session.execute(delete(table).where(tuple_(*pk).in_([tuple(row) for row in batch])))
                total += len(batch)
            if len(batch) < BATCH:
                break
        return Collected(kind=kind, rows=total, cutoff=cutoff)
