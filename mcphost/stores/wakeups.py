"""Wake-ups between host processes on one PostgreSQL database: `NOTIFY` in the writing transaction,
`LISTEN` on one dedicated connection per process.

Owns the channel, the payload format and the listening connection. Does not own what a wake-up means
(the orchestrator decides which readers, queued runs or cancels to wake) or any polling.

Invariants:
- A wake-up is sent by `announce`, inside the write transaction whose change it announces, so it is
  delivered only if that transaction commits, and after its change is visible. On SQLite it is a no-op:
  one process per database file runs runs, and it wakes its own waiters in memory.
- Wake-ups are hints, never facts: a listener may miss some (its connection dropped, or it had not
  connected yet), so every waiter still polls, slowly, and re-reads the store when woken. After the
  listening connection is (re)established, `Listener` calls `on_wake(None)`: "anything may have
  changed", so every waiter looks again.
- `Listener.run` keeps one connection with `LISTEN` for as long as it runs: when the server drops it
  (`pg_terminate_backend`, a restart, a network cut found by the check every `CHECK_S`), it reconnects
  with jittered exponential back-off.
- Payloads are "KIND RUN_ID" (`WakeKind`); anything else on the channel is ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any, Literal, Protocol, get_args

import anyio
import anyio.abc
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from mcphost.common.backoff import Backoff
from mcphost.stores._sql import Dialect, discard_connection
from mcphost.stores.engine import Database

log = logging.getLogger(__name__)

CHANNEL = "mcphost_wake"
WakeKind = Literal["results", "end", "cancel"]
"""`results`: a run has new results; `end`: a run ended (its conversation's next run may start), and
may have new results too (a run's last batch and its end are one statement, announced once: a
listener wakes the run's readers on either); `cancel`: a run was asked to cancel (or park)."""
KINDS: frozenset[str] = frozenset(get_args(WakeKind))
CHECK_S = 5.0
"""How often the listening connection is checked when the server did not say it closed it."""
RECONNECT_INITIAL_S = 0.1
RECONNECT_MAX_S = 5.0

Wake = tuple[WakeKind, str]
OnWake = Callable[[Wake | None], None]
"""Called on the event loop for each wake-up, and with None when wake-ups may have been missed."""


async def announce(session: AsyncSession, dialect: Dialect, kind: WakeKind, run_id: str) -> None:
    """Wake the other processes' waiters on `run_id` once the current write transaction commits.

    The hot statements that announce what they write do it within themselves on PostgreSQL (a
    `pg_notify` in their own statement: a result batch, a run's end), without this round trip."""
    if dialect == "postgresql":
        await session.execute(select(func.pg_notify(CHANNEL, wake_payload(kind, run_id))))


def wake_payload(kind: WakeKind, run_id: str) -> str:
    """The notification's payload for a wake-up of `kind` on `run_id` (`parse` reads it)."""
    return f"{kind} {run_id}"


def parse(payload: str) -> Wake | None:
    """The wake-up in `payload`, or None for one this version does not know."""
    kind, _, run_id = payload.partition(" ")
    if kind not in KINDS or not run_id:
        return None
    return kind, run_id  # pyright: ignore[reportReturnType]  # kind is checked against WakeKind's values above


class _Connection(Protocol):
    """What this module uses of an `asyncpg.Connection` (whose own annotations are incomplete)."""

    def add_termination_listener(self, callback: Callable[[Any], None]) -> None: ...
    async def add_listener(self, channel: str, callback: Callable[[Any, int, str, str], None]) -> None: ...
    def get_server_pid(self) -> int: ...
    async def execute(self, query: str) -> str: ...


class Listener:
    """One `LISTEN` connection for this process, kept open until `run` is cancelled."""

    def __init__(self, db: Database, on_wake: OnWake) -> None:
        self._db = db
        self._on_wake = on_wake
        self._backoff = Backoff(RECONNECT_INITIAL_S, RECONNECT_MAX_S)
        self.connects = 0
        """How many times the connection was (re)established (tests watch it)."""
        self.server_pid: int | None = None
        """The server process of the current connection, None while disconnected."""

    def _received(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        wake = parse(payload)
        if wake is not None:
            self._on_wake(wake)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; started (`task_status`) after the first attempt to connect."""
        started = False
        while True:
            held: AsyncConnection | None = None
            try:
                held = await self._db.engine.connect()
                held = await held.execution_options(isolation_level="AUTOCOMMIT")
                driver = (await held.get_raw_connection()).driver_connection
                if driver is None:
                    raise RuntimeError("the pool handed out a connection without a driver connection")
                conn: _Connection = driver
                lost = anyio.Event()
                conn.add_termination_listener(partial(_closed, lost))
                await conn.add_listener(CHANNEL, self._received)
                self.server_pid = conn.get_server_pid()
                self.connects += 1
                self._backoff.reset()
                if self.connects > 1:
                    log.info("listening for wake-ups again")
                self._on_wake(None)  # anything sent while not listening is missed: look again
                if not started:
                    started = True
                    task_status.started()
                await _until_lost(conn, lost)
                log.warning("the wake-up connection was closed by the server; reconnecting")
            except Exception as exc:  # the driver's errors, unwrapped: the connection is gone either way
                log.warning("the wake-up connection failed (%r); waiters poll until it is back", exc)
            finally:
                self.server_pid = None
                if held is not None:
                    await discard_connection(held)
            if not started:
                started = True
                task_status.started()
            await anyio.sleep(self._backoff.next())


def _closed(lost: anyio.Event, _conn: object) -> None:
    lost.set()


async def _until_lost(conn: _Connection, lost: anyio.Event) -> None:
    """Return when the server closed `conn` (it said so, or the check every `CHECK_S` failed)."""
    while not lost.is_set():
        with anyio.move_on_after(CHECK_S):
            await lost.wait()
        if not lost.is_set():
            with anyio.fail_after(CHECK_S):
                await conn.execute("SELECT 1")
