"""Leases: a named job that one host at a time may run, across every process sharing the database.

Owns the `leases` table (migration 0006). Does not own what a lease guards (the retention job,
`mcphost/retention.py`; a webhook body's replay window, `api/_hooks.py`, names `hook:<hash>`) or how
long a holder needs it.

Invariants:
- `acquire` is one write transaction serialized per lease name (`lock_in_transaction`), so of hosts
  racing for a free or lapsed lease exactly one gets it; a holder that acquires again extends its own.
- A lease lapses at `expires_at`: a host that dies holding it blocks the job for at most its term.
- `release` ends only the caller's own lease (a lapsed one another host took since stays theirs).
- `sweep(prefix)` deletes lapsed leases of one name prefix by a primary-key range, never a held one.
"""

from __future__ import annotations

import time

from sqlalchemy import delete, select, update

from mcphost.stores._sql import insert_ignoring, lock_in_transaction
from mcphost.stores.engine import Database
from mcphost.stores.tables import LeaseRow


class LeaseStore:
    """Take, extend and give back named leases."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def acquire(self, name: str, holder: str, *, term_s: float) -> bool:
        """Hold `name` for `term_s` seconds from now: True when it was free, lapsed or already `holder`'s."""
        assert term_s > 0, term_s
        now = time.time()
        async with self._db.write() as session:
            await lock_in_transaction(session, self._db.dialect, "lease", name)
            current = (
                await session.execute(
                    select(LeaseRow.holder, LeaseRow.expires_at).where(LeaseRow.name == name)
                )
            ).one_or_none()
            if current is None:
                values = {"name": name, "holder": holder, "expires_at": now + term_s}
                await session.execute(insert_ignoring(self._db.dialect, LeaseRow, values, ["name"]))
                return True
            if current.holder != holder and current.expires_at > now:
                return False
            await session.execute(
                update(LeaseRow).where(LeaseRow.name == name).values(holder=holder, expires_at=now + term_s)
            )
            return True

    async def release(self, name: str, holder: str) -> None:
        """End `holder`'s lease on `name` now (nothing when someone else holds it)."""
        async with self._db.write() as session:
            await session.execute(delete(LeaseRow).where(LeaseRow.name == name, LeaseRow.holder == holder))

    async def sweep(self, prefix: str) -> None:
        """Delete the lapsed leases whose name starts with `prefix` (a name range of the primary key)."""
        assert prefix, "a sweep names a prefix"
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        async with self._db.write() as session:
            await session.execute(
                delete(LeaseRow).where(
                    LeaseRow.name >= prefix, LeaseRow.name < upper, LeaseRow.expires_at <= time.time()
                )
            )

    async def holder(self, name: str) -> str | None:
        """Who holds `name` now, or None when it is free or lapsed."""
        async with self._db.read() as session:
            row = (
                await session.execute(
                    select(LeaseRow.holder, LeaseRow.expires_at).where(LeaseRow.name == name)
                )
            ).one_or_none()
        return None if row is None or row.expires_at <= time.time() else row.holder
