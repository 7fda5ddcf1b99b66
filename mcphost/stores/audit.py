"""The audit log: one row per MCP call a run made through its per-run server.

Owns the `audit` table. Does not decide what a call's outcome is (the facts dispatcher does).

Invariants:
- Rows are numbered per run, 1, 2, 3, … without gaps, in the order their transactions commit. Concurrent
  appends for one run take a per-run lock inside the write transaction (`_sql.lock_in_transaction`:
  an advisory lock on PostgreSQL, `BEGIN IMMEDIATE` on SQLite), read max(seq) and insert max + 1, so
  they never collide and never retry. The (run_id, seq) primary key backs this up. `append_many` does the
  same for a batch in one transaction (group commit), taking the runs' locks in sorted order.
- `list(run_id, after=N)` reads the primary key range (run_id, seq > N): O(limit). `usage(run_id)` reads
  the run's whole range: O(calls of the run), for restoring budgets on another host process.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import case, func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from mcphost.stores._cursor import MAX_RUN_SEQ, check_after, check_limit
from mcphost.stores._sql import lock_in_transaction
from mcphost.stores.engine import Database
from mcphost.stores.tables import AuditRow

CallOutcome = Literal["ok", "error", "refused"]


class AuditEntry(BaseModel):
    """What a call did, as the dispatcher reports it."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    run_id: str
    tool: str
    args_digest: str
    """SHA-256 hex of the canonical JSON arguments (never the arguments themselves)."""
    bytes_in: int = Field(ge=0)
    bytes_out: int = Field(ge=0)
    outcome: CallOutcome
    code: str | None = None
    """The PROTOCOL §5 error code when outcome is not "ok"."""
    duration_ms: float = Field(ge=0)
    started_at: float | None = None
    """When the call began (epoch seconds; the console's run timeline places it by this). None on rows
    stored before it was kept: their call ended `duration_ms` before about `created_at`."""


class AuditRecord(AuditEntry):
    """A stored audit row."""

    seq: int
    created_at: float


def _record(row: AuditRow) -> AuditRecord:
    return AuditRecord(
        run_id=row.run_id,
        seq=row.seq,
        tool=row.tool,
        args_digest=row.args_digest,
        bytes_in=row.bytes_in,
        bytes_out=row.bytes_out,
        outcome=row.outcome,  # pyright: ignore[reportArgumentType]  # written only through CallOutcome
        code=row.code,
        duration_ms=row.duration_ms,
        started_at=row.started_at,
        created_at=row.created_at,
    )


class AuditStore:
    """Append and read audit rows."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def append(self, entry: AuditEntry) -> AuditRecord:
        """Store `entry` as the run's next audit row."""

        async def append_in(session: AsyncSession) -> AuditRecord:
            await lock_in_transaction(session, self._db.dialect, "audit", entry.run_id)
            last = (
                await session.execute(select(func.max(AuditRow.seq)).where(AuditRow.run_id == entry.run_id))
            ).scalar_one()
            record = AuditRecord(**entry.model_dump(), seq=(last or 0) + 1, created_at=time.time())
            await session.execute(insert(AuditRow).values(record.model_dump()))
            return record

        return await self._db.run_write(append_in)

    async def append_many(self, entries: Sequence[AuditEntry]) -> list[AuditRecord]:
        """Store `entries` in one transaction, each as its run's next row, in the order given."""
        if not entries:
            return []
        runs = sorted({entry.run_id for entry in entries})

        async def append_in(session: AsyncSession) -> list[AuditRecord]:
            for run_id in runs:
                await lock_in_transaction(session, self._db.dialect, "audit", run_id)
            stored = await session.execute(
                select(AuditRow.run_id, func.max(AuditRow.seq))
                .where(AuditRow.run_id.in_(runs))
                .group_by(AuditRow.run_id)
            )
            last: dict[str, int] = {row.run_id: row[1] for row in stored}
            now = time.time()
            records: list[AuditRecord] = []
            for entry in entries:
                seq = last.get(entry.run_id, 0) + 1
                last[entry.run_id] = seq
                records.append(AuditRecord(**entry.model_dump(), seq=seq, created_at=now))
            await session.execute(insert(AuditRow), [record.model_dump() for record in records])
            return records

        return await self._db.run_write(append_in)

    async def list(self, run_id: str, *, after: int = 0, limit: int = 100) -> list[AuditRecord]:
        """The run's audit rows with seq > `after`, oldest first, at most `limit` (1..1000)."""
        check_limit(limit, 1000)
        check_after(after, MAX_RUN_SEQ)
        stmt = (
            select(AuditRow)
            .where(AuditRow.run_id == run_id, AuditRow.seq > after)
            .order_by(AuditRow.seq)
            .limit(limit)
        )
        async with self._db.read() as session:
            rows = (await session.execute(stmt)).scalars().all()
        return [_record(row) for row in rows]

    async def usage(self, run_id: str) -> tuple[int, int]:
        """(calls that were not refused, bytes returned by successful calls) of a run so far."""
        stmt = select(
            func.count(case((AuditRow.outcome != "refused", 1))),
            func.coalesce(func.sum(case((AuditRow.outcome == "ok", AuditRow.bytes_out), else_=0)), 0),
        ).where(AuditRow.run_id == run_id)
        async with self._db.read() as session:
            calls, bytes_out = (await session.execute(stmt)).one()
        return int(calls), int(bytes_out)
