"""Warm sessions as the database sees them: which run a session serves, and the key of session tokens.

Owns the reads of `runs.warm_session_id` (migration 0013) and the `warm_session` secret. Does not own
writing a run's session (the start transaction in `runs.py` writes it with the run's context), naming
sessions or deriving tokens (`mcphost.warm`), nor serving the endpoint (`facts/server.py`).

Invariants:
- A session's current run is its run that is `running` with its grant not revoked, read fresh on every
  call: nothing here is cached, so a run that ended (terminal status and revoked grant, one commit)
  stops being a session's current run for every replica at that commit.
- At most one run per session is running: a session belongs to one conversation, whose runs start one
  at a time. Both reads are one probe of `(warm_session_id, created_seq)`, newest first.
- The token key is generated once per database by the first host that asks (`secrets.stored_secret`:
  insert-if-absent, then read, so hosts starting together agree) and never leaves the database and the
  hosts' memory; tokens derived from it are never stored.
"""

from __future__ import annotations

from sqlalchemy import select

from mcphost.models import RunStatus
from mcphost.stores._retry import idempotent
from mcphost.stores.engine import Database
from mcphost.stores.secrets import stored_secret
from mcphost.stores.tables import RunRow

WARM_SESSION_SECRET = "warm_session"


class WarmSessionStore:
    """Reads a warm session's runs and its token key from the database."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @idempotent
    async def key(self) -> bytes:
        """The key session tokens are derived under, the same on every host of this database."""
        return bytes.fromhex(await stored_secret(self._db, WARM_SESSION_SECRET))

    @idempotent
    async def current_run(self, session_id: str) -> str | None:
        """The id of the session's running run whose grant is not revoked; None between runs."""
        stmt = (
            select(RunRow.run_id)
            .where(
                RunRow.warm_session_id == session_id,
                RunRow.status == RunStatus.RUNNING.value,
                RunRow.revoked_at.is_(None),
            )
            .order_by(RunRow.created_seq.desc())
            .limit(1)
        )
        async with self._db.read() as session:
            return (await session.execute(stmt)).scalar_one_or_none()

    @idempotent
    async def latest_run(self, session_id: str) -> str | None:
        """The id of the session's most recently started run, whatever its status; None when no run
        ever served it (or the ones that did were deleted)."""
        stmt = (
            select(RunRow.run_id)
            .where(RunRow.warm_session_id == session_id)
            .order_by(RunRow.created_seq.desc())
            .limit(1)
        )
        async with self._db.read() as session:
            return (await session.execute(stmt)).scalar_one_or_none()
