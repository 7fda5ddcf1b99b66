"""The SQLite writer: the one connection a SQLite file's hot-path write transactions run on, where each
of them runs (on the event loop, or on the writer thread), and that thread.

Owns the writer's connection (`SqliteWriter`): its pragmas beyond the engine's (`_on_connect`: no busy
timeout, no auto-checkpoint), its `BEGIN IMMEDIATE`, running a transaction body on it and the WAL
checkpoints; and the thread (`WriterThread`): `call` puts a function on the thread's queue with the
caller's context variables and awaits its result on the loop; the thread runs one function at a time,
in the order they came, and settles the caller's future through `call_soon_threadsafe`. Does not own
the writers' queue on the loop or the shielding of a transaction's caller
(`engine.Database._writer_turn`), nor what the bodies do (the stores).

Where a transaction runs: on the event loop when the write lock is free (`BEGIN IMMEDIATE` succeeds at
once) — a hand-off to a thread and back costs more than a short transaction — else on the thread, which
waits for the lock in SQLite's busy handler; the first transaction (it opens the connection) and `long`
ones (rows without bound) go to the thread too. The loop never waits inside SQLite: the connection has
`busy_timeout=0` except while the thread runs a transaction, and `wal_autocheckpoint=0`; every
`CHECKPOINT_EVERY` transactions on the loop the thread checkpoints, on the writers' turn.

Grouped transactions (`run_grouped`, every hot write but `long` ones): the first caller yields to the
rest of its loop turn, then for whole loop turns until one brings no new member (at most `GROUP_TURNS`)
or until it is full (`GROUP_MEMBERS`); the callers that start a write meanwhile join its group (they
await a future, shielded); the first then takes the writers' turn and runs every member's body in one
transaction (on the loop, or on the thread as above), each body in a `SAVEPOINT` of its own and in its
own caller's context variables, and commits once. One commit writes the pages the members share (index and table tails) to
the WAL once, where a commit each wrote them again each time.

Why not `anyio.to_thread.run_sync` for the thread: per call it enters a cancel scope, takes a capacity
limiter on behalf of the task, picks an idle worker or starts one, and goes through a `queue.Queue` (a
lock and a condition) each way. Here a call is a future, a `SimpleQueue.put` and one
`call_soon_threadsafe`.

Invariants:
- One transaction at a time on the connection (the caller holds the writers' lock), never used by two
  threads at once: the loop uses it only between awaits, the thread only while the loop awaits it.
- The thread runs one function at a time, in submission order. A caller that awaits `call` gets the
  function's return value or its exception, raised on the loop; the function runs in a copy of the
  caller's context (as `anyio.to_thread.run_sync` runs it).
- The thread starts on the first call and ends on `stop` (after the functions queued before it have
  run); a call after `stop` starts a new one. It is a daemon thread: an interpreter that exits without
  `stop` is not held up by it.
- A result for a loop that has closed meanwhile is dropped (nobody is waiting for it any more).
- A transaction that fails without rolling back cleanly closes the connection; the next one opens a
  fresh one (on the thread).
- A grouped body that raises has its writes rolled back to its savepoint, and its caller gets the
  exception; the others are kept. A failed commit, or an error after which SQLite rolled the whole
  transaction back (no transaction is open any more), fails every member: none is told a lost write was
  kept. A member's caller gets its outcome only once the group's transaction has ended. A group of one
  runs in a transaction of its own, without a savepoint.
- A caller cancelled before it starts or joins a group writes nothing; once in one, its body runs and
  the cancellation lands after the commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar, TypeVarTuple, cast

import anyio
import anyio.lowlevel
from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.pool import ConnectionPoolEntry

from mcphost.stores._direct import raise_wrapped
from mcphost.stores._sessions import ThreadSession, drive

log = logging.getLogger(__name__)
T = TypeVar("T")
U = TypeVar("U")
Args = TypeVarTuple("Args")
WriteBody = Callable[[AsyncSession], Coroutine[Any, Any, T]]
"""A write transaction's body: its statements through the session it is given, no other awaits."""
Outcome = tuple[bool, Any]
"""A grouped body's result as (True, value), or its exception as (False, exc)."""
GROUP_TURNS = 32
"""The most loop turns the first caller of a group waits for others to join (`run_grouped`)."""
GROUP_MEMBERS = 64
"""The most bodies in one group: its transaction runs them back to back on the event loop, which nothing
else uses meanwhile (64 bodies that each store one event took 1.7-2.0 ms here; a run's admission is
several times one)."""
CHECKPOINT_EVERY = 32
"""Transactions the writer commits on the event loop between two checkpoints on its thread: about the
WAL pages (~1,000, SQLite's own `wal_autocheckpoint`) of 32 of a run's transactions."""
_Job = tuple[
    contextvars.Context, Callable[..., Any], tuple[Any, ...], asyncio.AbstractEventLoop, asyncio.Future[Any]
]


@dataclass(eq=False)
class _Member:
    """A body in a group (`SqliteWriter.run_grouped`)."""

    body: WriteBody[Any]
    context: contextvars.Context | None
    """The caller's context variables, run in the first member's task; None for the first member."""
    future: asyncio.Future[Any] | None
    """Settled with the body's outcome once the group has committed; None for the first member."""

    def call(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` in the member's caller's context variables."""
        return function(*args) if self.context is None else self.context.run(function, *args)


class WriterThread:
    """A thread that runs the functions it is given one at a time (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        """The running thread's queue (each thread has its own: a stopping one takes no new call)."""
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    async def call(self, function: Callable[[*Args], T], *args: *Args) -> T:
        """`function(*args)` run on the thread; its result, or its exception raised here."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._started().put((contextvars.copy_context(), function, args, loop, future))
        return await future

    def stop(self) -> None:
        """End the thread once the functions queued so far have run, and wait for it (no-op when none)."""
        with self._guard:
            thread, self._thread = self._thread, None
            if thread is None:
                return
            self._jobs.put(None)
        thread.join()

    def _started(self) -> queue.SimpleQueue[_Job | None]:
        """The running thread's queue, starting a thread when none runs."""
        if self._thread is None:
            with self._guard:
                if self._thread is None:
                    self._jobs = queue.SimpleQueue()
                    thread = threading.Thread(
                        target=self._main, args=(self._jobs,), name=self._name, daemon=True
                    )
                    thread.start()
                    self._thread = thread
        return self._jobs

    @staticmethod
    def _main(jobs: queue.SimpleQueue[_Job | None]) -> None:
        while (job := jobs.get()) is not None:
            context, function, args, loop, future = job
            try:
                result = context.run(function, *args)
            except BaseException as exc:  # handed to the caller, raised there
                _settle(loop, future, None, exc)
            else:
                _settle(loop, future, result, None)
            del job, context, function, args, future  # nothing of a finished call outlives it here


def _settle(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], result: Any, error: BaseException | None
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed: nobody awaits the result any more
        loop.call_soon_threadsafe(_resolve, future, result, error)


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled (never inside a shielded transaction)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class SqliteWriter:
    """The writer's connection of a SQLite file and where its transactions run (see the module docstring)."""

    def __init__(self, engine: Engine, *, busy_timeout_s: Callable[[], float]) -> None:
        self._engine = engine
        self._busy_timeout_s = busy_timeout_s
        """How long the thread's transaction waits for the write lock (read when it runs)."""
        self._connection: Connection | None = None
        """Kept open between transactions: a session and a checkout per transaction cost more than most
        of its statements."""
        self._thread = WriterThread("mcphost-sqlite-writer")
        self._commits = 0
        """Transactions committed on the event loop since the last checkpoint (a group counts each)."""
        self._forming: list[_Member] | None = None
        """The group of this loop turn, while its first member yields for the others to join."""
        event.listen(engine, "connect", _on_connect)
        event.listen(engine, "begin", _on_begin)

    async def run_long(self, body: WriteBody[T]) -> T:
        """`body`'s result, run in a transaction of its own on the thread: a `long` body, which may write
        rows without bound (the caller holds the writers' turn)."""
        return await self._thread.call(self._run_on_thread, self._run_begun, body)

    async def run_grouped(self, body: WriteBody[T], turn: anyio.Lock) -> T:
        """`body`'s result, run in the transaction of the group it joins or starts (see the module
        docstring): a group's first caller waits for others to join, takes the writers' `turn`, runs its
        own body and theirs, each in a savepoint, and commits once."""
        await anyio.lowlevel.checkpoint_if_cancelled()
        forming = self._forming
        if forming is not None:
            future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
            forming.append(_Member(body, contextvars.copy_context(), future))
            if len(forming) >= GROUP_MEMBERS:  # full: the next caller starts a group of its own
                self._forming = None
            with anyio.CancelScope(shield=True):  # the group's transaction runs this body: never cancelled
                return await future
        group = self._forming = [_Member(body, None, None)]
        outcomes: list[Outcome] = []
        with anyio.CancelScope(shield=True):  # nothing cancels this scope: it never ends the block early
            outcomes = await self._run_group(group, turn)
        for member, (ok, value) in zip(group[1:], outcomes[1:], strict=True):
            assert member.future is not None
            _resolve(member.future, value if ok else None, None if ok else value)
        ok, value = outcomes[0]
        if not ok:
            raise value
        return cast(T, value)

    async def _run_group(self, group: list[_Member], turn: anyio.Lock) -> list[Outcome]:
        """Each member's outcome, once the callers that start a write in the loop turns it waits have
        joined `group`. One yield saw only the callers later in the first turn: runs that start their
        writes one turn apart went one to a group, and two turns at c = 64 gave 0.81x the host CPU per
        run of one (`bench.revisions`); a group that stops after a turn with no one new gave 0.79x with
        no cost at c = 1 (an echo run's writes follow one another), with at most 8 turns; at most 32
        took 0.93x of that, 128 no less."""
        try:
            await asyncio.sleep(0)  # the callers later in this loop turn join
            size = len(group)
            for _ in range(GROUP_TURNS - 1):  # then whole loop turns, until one brings no one new
                await asyncio.sleep(0)
                if len(group) == size or len(group) >= GROUP_MEMBERS:
                    break
                size = len(group)
        finally:
            if self._forming is group:  # not closed full, with another group forming since
                self._forming = None
        try:
            async with turn:
                return await self._run_group_in_turn(group)
        except BaseException as exc:  # the turn or the hand-off to the thread failed: all of it did
            return [(False, exc)] * len(group)

    async def _run_group_in_turn(self, group: list[_Member]) -> list[Outcome]:
        connection = self._connection
        if connection is None or not _begun_at_once(connection):
            return await self._thread.call(self._run_on_thread, self._run_group_begun, group)
        outcomes = self._run_group_begun(connection, group)
        self._commits += len(group)
        if self._commits >= CHECKPOINT_EVERY:  # still the writers' turn: nothing is written meanwhile
            self._commits = 0
            await self._thread.call(self._checkpoint)
        return outcomes

    async def close(self) -> None:
        """Close the connection (on the thread, between transactions) and stop the thread."""
        if self._connection is not None:
            await self._thread.call(self._close_connection)
        self._thread.stop()

    def _run_on_thread(self, run: Callable[[Connection, U], T], what: U) -> T:
        """On the thread: `run(connection, what)` for a transaction that found the write lock taken (or
        the first, which opens the connection, or a long one), waiting for the lock in SQLite's busy
        handler."""
        connection = self._connection
        if connection is None:
            connection = self._connection = self._engine.connect()
        _execute_raw(connection, f"PRAGMA busy_timeout={int(self._busy_timeout_s() * 1000)}")
        try:
            return run(connection, what)
        finally:
            if self._connection is connection:  # not closed after a failed rollback
                _execute_raw(connection, "PRAGMA busy_timeout=0")

    def _run_group_begun(self, connection: Connection, group: list[_Member]) -> list[Outcome]:
        """Each member's outcome, its body run in a savepoint of one transaction (a group of one runs
        in a transaction of its own, without a savepoint). A body that raises has its own writes rolled back and the others go on; a
        failed commit, or an error after which SQLite rolled the whole transaction back, fails them all."""
        if len(group) == 1:
            member = group[0]
            try:
                return [(True, member.call(self._run_begun, connection, member.body))]
            except Exception as exc:
                return [(False, exc)]
        dbapi_connection: Any = connection.connection.dbapi_connection
        outcomes: list[Outcome] = []
        try:
            with connection.begin():
                for member in group:
                    outcomes.append(member.call(_in_savepoint, connection, dbapi_connection, member.body))
                    if not dbapi_connection.in_transaction:  # an error made SQLite roll all of it back
                        return [(False, outcomes[-1][1])] * len(group)
        except Exception as exc:  # nothing of the group was kept
            if connection.invalidated or connection.in_transaction() or dbapi_connection.in_transaction:
                self._close_connection()  # not rolled back cleanly
            return [(False, exc)] * len(group)
        return outcomes

    def _run_begun(self, connection: Connection, body: WriteBody[T]) -> T:
        session = ThreadSession(connection)
        try:
            with connection.begin():
                # The facade has the AsyncSession methods the stores call, each one returning at once.
                result = drive(body(cast(AsyncSession, session)))
                session.flush_pending()  # ORM changes left pending, as `AsyncSession`'s commit flushes them
                return result
        except BaseException:
            dbapi_connection: Any = None if connection.invalidated else connection.connection.dbapi_connection
            if dbapi_connection is None or connection.in_transaction() or dbapi_connection.in_transaction:
                self._close_connection()  # not rolled back cleanly
            raise
        finally:
            session.close()

    def _close_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def _checkpoint(self) -> None:
        """On the thread, on the writers' turn: copy the WAL's pages into the database file, as SQLite's own
        `wal_autocheckpoint` would in a commit, but off the event loop. `PASSIVE` waits for no reader;
        with every page copied, the next transaction writes the WAL from its start again instead of
        growing it."""
        connection = self._connection
        if connection is None:
            return
        dbapi_connection: Any = connection.connection.dbapi_connection
        try:
            dbapi_connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:  # the next one tries again; no write depends on it
            log.warning("SQLite checkpoint failed: %s", exc)


def _in_savepoint(connection: Connection, dbapi_connection: Any, body: WriteBody[Any]) -> Outcome:
    """A grouped body's outcome, run inside a savepoint of the group's transaction: released when the
    body returns, rolled back to when it raises."""
    _execute_raw(connection, "SAVEPOINT mcphost_member")
    session = ThreadSession(connection)
    try:
        result = drive(body(cast(AsyncSession, session)))
        session.flush_pending()
    except Exception as exc:
        session.close()
        if dbapi_connection.in_transaction:
            _execute_raw(connection, "ROLLBACK TO mcphost_member")
            _execute_raw(connection, "RELEASE mcphost_member")
        return (False, exc)
    session.close()
    _execute_raw(connection, "RELEASE mcphost_member")  # raises if the body ended the transaction itself
    return (True, result)


def _on_connect(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    # After the engine's own connect listener: the writer never waits in SQLite's busy handler (on the
    # event loop it would stall every task) and never checkpoints in a commit (`_checkpoint` does).
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA busy_timeout=0")
        cursor.execute("PRAGMA wal_autocheckpoint=0")
    finally:
        cursor.close()


def _on_begin(conn: Connection) -> None:
    # Every transaction writes: BEGIN IMMEDIATE straight on the sqlite3 connection, without an execution
    # context of SQLAlchemy's around it (unless `_begun_at_once` has sent it).
    dbapi_connection: Any = conn.connection.dbapi_connection
    assert dbapi_connection is not None
    if not dbapi_connection.in_transaction:
        _execute_raw(conn, "BEGIN IMMEDIATE")


def _execute_raw(connection: Connection, sql: str) -> None:
    """`sql` straight on the sqlite3 connection; its failure raised as SQLAlchemy's error for it, as a
    statement SQLAlchemy ran would raise it (SQLAlchemy does not wrap what a `begin` listener raises, and
    the stores translate only its errors: "database is locked" after the busy timeout was a 500)."""
    dbapi_connection: Any = connection.connection.dbapi_connection
    try:
        dbapi_connection.execute(sql)
    except sqlite3.Error as exc:
        raise_wrapped(exc, sql, (), connection.dialect)


def _begun_at_once(connection: Connection) -> bool:
    """`BEGIN IMMEDIATE` if the write lock is free right now; False when another connection holds it (or
    the attempt failed otherwise: the thread's own begin will say how)."""
    dbapi_connection: Any = connection.connection.dbapi_connection
    try:
        dbapi_connection.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return False
    return True
