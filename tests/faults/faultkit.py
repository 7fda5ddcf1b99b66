"""Storage faults for the fault suite, injected where the real fault would need root or a second machine.

`SqlFault` makes chosen SQL statements of one host's engine fail with the driver's own
`OperationalError` (as a full disk, a read-only file or a refused write would), so the whole path above
the driver runs for real: SQLAlchemy wraps it (SQL text in its `str`, the parameters hidden), the
engine translates it, stores retry or not, and the orchestrator and the API decide what a client sees.
`PostgresKiller` terminates the server backends of one test database (never another database's, never
its own), which is what a failover, a restart or an operator's `pg_terminate_backend` does to a host.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from sqlalchemy import text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.engine.interfaces import DBAPICursor, ExecutionContext
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from mcphost.stores import Database


class SqlFault:
    """While armed, statements that `matches` accepts fail (at most `times` of them when given)."""

    def __init__(self, db: Database, matches: Callable[[str], bool], *, message: str) -> None:
        self._db = db
        self._matches = matches
        self._message = message
        self._left: int | None = None
        self.armed = False
        self.failures = 0
        """How many statements this fault has failed so far."""

    def arm(self, times: int | None = None) -> None:
        self._left = times
        self.armed = True

    def disarm(self) -> None:
        self.armed = False

    def _before(
        self,
        conn: Connection,
        cursor: DBAPICursor,
        statement: str,
        parameters: Any,
        context: ExecutionContext | None,
        executemany: bool,
    ) -> None:
        if not self.armed or not self._matches(statement):
            return
        if self._left is not None:
            if self._left <= 0:
                return
            self._left -= 1
        self.failures += 1
        raise conn.dialect.loaded_dbapi.OperationalError(self._message)

    @asynccontextmanager
    async def installed(self) -> AsyncGenerator[SqlFault, None]:
        # Every engine's (on a SQLite file the writer's too), added while the host serves.
        with self._db.hooks.added("before_cursor_execute", self._before):
            yield self


def terminal_run_update(statement: str) -> bool:
    """The UPDATE that moves a run to a terminal status (it also sets `ended_at`), or on PostgreSQL a
    run's last batch that carries it (a part of its one statement, `results._APPEND_ENDING`)."""
    flat = " ".join(statement.split()).lower()
    if flat.startswith("with ") and " as (update runs set status = " in flat:
        return "ended_at = " in flat.partition(" as (update runs set status = ")[2].partition(" where ")[0]
    return flat.startswith("update runs set") and "ended_at=" in flat.partition(" where ")[0]


def result_insert(statement: str) -> bool:
    """A statement storing run results: an INSERT, or on PostgreSQL the batch's one statement (an INSERT
    inside a WITH, `stores/results.py`)."""
    flat = " ".join(statement.split()).lower()
    return flat.startswith("insert into run_results") or (
        flat.startswith("with ") and "insert into run_results" in flat
    )


def run_insert(statement: str) -> bool:
    """A statement admitting a run: an INSERT, or on PostgreSQL the admission's one statement (an INSERT
    inside a WITH, `stores/_admit.py`)."""
    flat = " ".join(statement.split()).lower()
    return flat.startswith("insert into runs ") or (flat.startswith("with ") and "insert into runs " in flat)


def result_read(statement: str) -> bool:
    flat = " ".join(statement.split()).lower()
    return flat.startswith("select") and "from run_results" in flat


class PostgresKiller:
    """Terminates every backend of one database except its own session's."""

    def __init__(self, database_url: str) -> None:
        self._url = make_url(database_url)
        self._engine = create_async_engine(self._url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
        self.killed = 0
        """How many backends it has terminated so far."""

    async def kill_all(self) -> int:
        """Terminate the database's other backends now; how many there were."""
        async with self._engine.connect() as conn:
            pids = (
                await conn.execute(
                    text(
                        "SELECT pid FROM pg_stat_activity WHERE datname = :name AND pid <> pg_backend_pid()"
                    ),
                    {"name": self._url.database},
                )
            ).scalars()
            count = 0
            for pid in list(pids):
                if (await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})).scalar_one():
                    count += 1
        self.killed += count
        return count

    async def keep_killing(self, interval_s: float, until: anyio.Event) -> None:
        """`kill_all` every `interval_s` until `until` is set."""
        while not until.is_set():
            await self.kill_all()
            with anyio.move_on_after(interval_s):
                await until.wait()

    async def aclose(self) -> None:
        await self._engine.dispose()
