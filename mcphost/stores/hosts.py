"""Host liveness, and failing the runs of hosts that stopped without finishing them.

Owns the `hosts` table and the liveness proof. Does not run or cancel anything (the orchestrator calls
`recover_abandoned` at start-up, inside `alive`).

How a host proves it is alive:
- PostgreSQL: `alive(host_id)` holds a session-level `pg_advisory_lock` on a key derived from the
  host id, on a dedicated connection kept for the host's lifetime. The server drops that lock when
  the connection goes away, so a killed host (or one whose machine vanished) stops holding it; another
  host proves it dead when `pg_try_advisory_xact_lock` on the same key succeeds (a transaction-level
  lock, gone when that check's transaction ends). The host checks that connection every
  `LIVENESS_CHECK_S`; when the server dropped it (a restart, `pg_terminate_backend`, a network cut)
  the lock went with it, so the host reconnects and takes the lock again. In the gap (at most about
  `LIVENESS_CHECK_S` plus a reconnect) a recovering peer could judge it dead and fail its running runs
  `host.restarted`; their own ends then find them failed (the first terminal status wins).
- SQLite (one machine): the `hosts` row records pid and hostname. A host is dead when its row is
  missing, or it is on this machine and no process has its pid. A row from another machine counts as
  alive (nothing here can prove otherwise). A recycled pid makes a dead host look alive: recovery is
  then late, never wrong.

Invariants:
- Recovery only ever touches runs of hosts proven dead, plus queued runs that no host owns and that
  were admitted before the recovering host started. Of those:
  - a `running` run executing on a runtime (it has a queue row, `stores/dispatch.py`) lives on there:
    it is *re-adopted* by the recovering host (the same conditional update, status `running`), which
    follows its queue row again (`runtimes/remote.py`); its grant, token hash and deadline unchanged;
  - any other `running` run (its executor is gone, its results may be partial) is moved to `failed`
    (`host.restarted`) through `RunStore.finish`, which also revokes its grant;
  - a `queued` run that was asked to cancel (or interrupted by a newer event) is moved to `cancelled`;
  - any other `queued` run never started: it is *re-queued*, adopted by the recovering host (a
    conditional update of `host_id`, so of two recovering hosts only one adopts it) with its status,
    `created_seq` (its place in its conversation's FIFO) and deadline unchanged. The caller runs it.
  A run that finished (or was adopted) meanwhile is skipped.
- The recovering host never judges itself.
- A live host re-adopts the remote runs of dead hosts periodically too (`readopt_remote`, every
  `READOPT_S` of the orchestrator), so a replica that dies does not leave its runs on runtimes unfollowed
  until some host starts.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import AsyncGenerator, Iterable
from contextlib import asynccontextmanager
from functools import partial

import anyio
from pydantic import BaseModel, ConfigDict
from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from mcphost.common.periodic import Periodic
from mcphost.errors import ConflictError
from mcphost.models import RunFailure, RunStatus
from mcphost.stores._sql import advisory_key, discard_connection, upsert
from mcphost.stores.engine import Database
from mcphost.stores.runs import ACTIVE_STATUSES, RESTARTABLE_CODE, RunStore
from mcphost.stores.tables import HostRow, RunRow, RuntimeRunRow

log = logging.getLogger(__name__)

HOST_RESTARTED = RunFailure(
    code=RESTARTABLE_CODE,
    message="The host that ran this run stopped before it finished. Submit its event again (same "
    "event_id) to run it as a new attempt.",
)
_LOCK_NAMESPACE = "host"
LIVENESS_CHECK_S = 1.0
"""How often a PostgreSQL host checks the connection that holds its liveness lock."""


class Recovery(BaseModel):
    """What `recover_abandoned` did, by run id (each list in admission order)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    failed: list[str] = []
    """Were running: failed `host.restarted`."""
    cancelled: list[str] = []
    """Were queued with a cancel request: cancelled."""
    requeued: list[str] = []
    """Were queued: now owned by the recovering host, still queued, for it to run."""
    readopted: list[str] = []
    """Were running on a runtime: now owned by the recovering host, still running, for it to follow."""


CANCELLED_BEFORE_RESTART = RunFailure(
    code="cancelled",
    message="Run cancelled: its cancel was requested before the host that queued it stopped.",
)


class HostRecord(BaseModel):
    """A registered host process."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    host_id: str
    pid: int
    hostname: str
    started_at: float
    heartbeat_at: float


def pid_alive(pid: int) -> bool:
    """Whether a process with `pid` exists on this machine."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, it is just not ours
    return True


class HostStore:
    """Register this host, and recover runs of hosts that died."""

    def __init__(self, db: Database, runs: RunStore) -> None:
        self._db = db
        self._runs = runs

    @asynccontextmanager
    async def alive(self, host_id: str) -> AsyncGenerator[HostRecord, None]:
        """Register `host_id` and keep it provably alive until the block ends.

        Raises:
            ConflictError: another live process already holds `host_id` (PostgreSQL).
        """
        now = time.time()
        record = HostRecord(
            host_id=host_id, pid=os.getpid(), hostname=socket.gethostname(), started_at=now, heartbeat_at=now
        )
        if self._db.dialect == "sqlite":
            await self._register(record)
            try:
                yield record
            finally:
                await self._unregister(host_id)
            return
        key = advisory_key(_LOCK_NAMESPACE, host_id)
        holder = await self._lock(key)
        if holder is None:
            raise ConflictError(f"Host {host_id!r} is already alive in another process; use a new host id.")
        held: list[AsyncConnection | None] = [holder]
        keeper = Periodic(
            "the host liveness check",
            partial(self._keep_lock, host_id, key, held),
            interval_s=LIVENESS_CHECK_S,
            retry_s=LIVENESS_CHECK_S / 4,
            max_backoff_s=LIVENESS_CHECK_S,
            wait_first=True,
        )
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(keeper.run)
                try:
                    await self._register(record)
                    yield record
                finally:
                    tg.cancel_scope.cancel()
                    await self._unregister(host_id)
        finally:
            if held[0] is not None:
                await discard_connection(held[0])

    async def _lock(self, key: int) -> AsyncConnection | None:
        """A dedicated connection holding the session lock `key`, or None when another session holds it."""
        conn = await self._db.engine.connect()
        try:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            if (await conn.execute(select(func.pg_try_advisory_lock(key)))).scalar_one():
                return conn
        except BaseException:
            await discard_connection(conn)
            raise
        await discard_connection(conn)
        return None

    async def _keep_lock(self, host_id: str, key: int, held: list[AsyncConnection | None]) -> float | None:
        """One check of the lock's connection (the `Periodic` ticks every `LIVENESS_CHECK_S`); when it was
        dropped, retake the lock, again shortly while a peer's check holds the key. A reconnect that
        raises is retried with the loop's back-off."""
        conn = held[0]
        if conn is not None:
            try:
                await conn.execute(select(1))
                return None
            except (SQLAlchemyError, OSError):
                log.warning("host %s lost the connection that proves it alive; reconnecting", host_id)
            held[0] = None
            await discard_connection(conn)
        holder = await self._lock(key)
        if holder is None:
            # A peer's check holds the key for the length of its transaction: try again shortly.
            return LIVENESS_CHECK_S / 4
        held[0] = holder
        log.info("host %s holds its liveness lock again", host_id)
        return None

    async def _register(self, record: HostRecord) -> None:
        stmt = upsert(
            self._db.dialect,
            HostRow,
            record.model_dump(),
            ["host_id"],
            ["pid", "hostname", "started_at", "heartbeat_at"],
        )
        async with self._db.write() as session:
            await session.execute(stmt)

    async def _unregister(self, host_id: str) -> None:
        with anyio.CancelScope(shield=True):
            async with self._db.write() as session:
                await session.execute(delete(HostRow).where(HostRow.host_id == host_id))

    async def heartbeat(self, host_id: str) -> None:
        """Record that `host_id` is still working (for operators; liveness does not depend on it)."""
        async with self._db.write() as session:
            await session.execute(
                update(HostRow).where(HostRow.host_id == host_id).values(heartbeat_at=time.time())
            )

    async def get(self, host_id: str) -> HostRecord | None:
        """The registration of `host_id`, or None."""
        async with self._db.read() as session:
            row = (
                await session.execute(select(HostRow).where(HostRow.host_id == host_id))
            ).scalar_one_or_none()
        return None if row is None else HostRecord.model_validate(row, from_attributes=True)

    async def is_alive(self, host_id: str) -> bool:
        """Whether `host_id` provably still runs (see the module docstring)."""
        if self._db.dialect == "postgresql":
            # The transaction-level try-lock conflicts with the host's session-level lock and goes
            # away with the transaction, so no connection is ever left holding a dead host's key.
            key = advisory_key(_LOCK_NAMESPACE, host_id)
            async with self._db.read() as session:
                return not (await session.execute(select(func.pg_try_advisory_xact_lock(key)))).scalar_one()
        host = await self.get(host_id)
        if host is None:
            return False
        return host.hostname != socket.gethostname() or pid_alive(host.pid)

    async def recover_abandoned(self, host_id: str) -> Recovery:
        """Fail, cancel or re-queue the unfinished runs of dead hosts (see the module docstring).

        `host_id` is the recovering host (normally inside `alive(host_id)`); its own runs are never
        touched. Queued runs without a host that were admitted before it started are recovered too.
        """
        me = await self.get(host_id)
        started_at = me.started_at if me is not None else time.time()
        dead = await self._dead(host_id)
        async with self._db.read() as session:
            rows = (
                await session.execute(
                    select(RunRow.run_id, RunRow.status, RunRow.host_id, RunRow.cancel_requested_at)
                    .where(
                        RunRow.status.in_(ACTIVE_STATUSES),
                        RunRow.host_id.in_(dead)
                        | (
                            RunRow.host_id.is_(None)
                            & (RunRow.status == RunStatus.QUEUED.value)
                            & (RunRow.created_at < started_at)
                        ),
                    )
                    .order_by(RunRow.created_seq)
                )
            ).all()
        remote = await self._remote(row.run_id for row in rows if row.status == RunStatus.RUNNING.value)
        failed: list[str] = []
        cancelled: list[str] = []
        requeued: list[str] = []
        readopted: list[str] = []
        for row in rows:
            if row.status == RunStatus.QUEUED.value and row.cancel_requested_at is None:
                if await self._runs.adopt(row.run_id, host_id=host_id, from_host=row.host_id):
                    requeued.append(row.run_id)
                continue
            if row.run_id in remote:
                if await self._runs.adopt(
                    row.run_id, host_id=host_id, from_host=row.host_id, status=RunStatus.RUNNING
                ):
                    readopted.append(row.run_id)
                continue
            status, error, into = (
                (RunStatus.FAILED, HOST_RESTARTED, failed)
                if row.status == RunStatus.RUNNING.value
                else (RunStatus.CANCELLED, CANCELLED_BEFORE_RESTART, cancelled)
            )
            ended = await self._runs.finish(row.run_id, status, error=error)
            if ended.status is status and ended.error == error:  # not a run that ended on its own meanwhile
                into.append(row.run_id)
        if dead:
            async with self._db.write() as session:
                await session.execute(delete(HostRow).where(HostRow.host_id.in_(dead)))
        if failed or cancelled or requeued or readopted:
            log.warning(
                "runs abandoned by stopped host(s) %s: %d failed (were running), %d cancelled, %d re-queued, "
                "%d re-adopted (running on runtimes)",
                ", ".join(dead) or "(none registered)",
                len(failed),
                len(cancelled),
                len(requeued),
                len(readopted),
            )
        return Recovery(failed=failed, cancelled=cancelled, requeued=requeued, readopted=readopted)

    async def _dead(self, host_id: str) -> list[str]:
        """The hosts other than `host_id` that own active runs or are registered, proven dead."""
        async with self._db.read() as session:
            active_hosts = (
                await session.execute(
                    select(RunRow.host_id)
                    .where(RunRow.status.in_(ACTIVE_STATUSES), RunRow.host_id.is_not(None))
                    .distinct()
                )
            ).scalars()
            registered = (await session.execute(select(HostRow.host_id))).scalars()
            others = {h for h in [*active_hosts, *registered] if h is not None and h != host_id}
        return [other for other in sorted(others) if not await self.is_alive(other)]

    async def readopt_remote(self, host_id: str) -> list[str]:
        """A live host's periodic share of recovery: the runs executing on runtimes of hosts proven dead,
        re-adopted by `host_id` (as `recover_abandoned` does), in admission order. Their other runs are
        left to the next host that starts, as are their registrations."""
        dead = await self._dead(host_id)
        if not dead:
            return []
        async with self._db.read() as session:
            rows = (
                await session.execute(
                    select(RunRow.run_id, RunRow.host_id)
                    .join(RuntimeRunRow, RuntimeRunRow.run_id == RunRow.run_id)
                    .where(RunRow.status == RunStatus.RUNNING.value, RunRow.host_id.in_(dead))
                    .order_by(RunRow.created_seq)
                )
            ).all()
        readopted = [
            row.run_id
            for row in rows
            if await self._runs.adopt(
                row.run_id, host_id=host_id, from_host=row.host_id, status=RunStatus.RUNNING
            )
        ]
        if readopted:
            log.warning(
                "%d run(s) executing on runtimes for stopped host(s) %s re-adopted",
                len(readopted),
                ", ".join(dead),
            )
        return readopted

    async def _remote(self, run_ids: Iterable[str]) -> set[str]:
        """Those of `run_ids` that execute on runtimes (they have a queue row)."""
        wanted = list(run_ids)
        if not wanted:
            return set()
        async with self._db.read() as session:
            found = await session.execute(
                select(RuntimeRunRow.run_id).where(RuntimeRunRow.run_id.in_(wanted))
            )
            return set(found.scalars())
