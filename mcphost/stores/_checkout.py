"""PostgreSQL checkouts: the transaction's `BEGIN` as the pool's pre-ping, and the checkout and the
return to the pool on the event loop, without a greenlet, when no other I/O is due.

Owns how `Database.run_write` and `Database.run_statement` take a connection from SQLAlchemy's pool on
PostgreSQL (`checkout`) and give it back after the `COMMIT` (`give_back_committed`), and what the
pool's pre-ping sends (`begin_as_ping`: the transaction's `BEGIN`, with an advisory lock through
`locked_transaction`). Does not own the pool, the transaction's statements or its `COMMIT`
(`_direct.AsyncpgConnection.commit`).

SQLAlchemy's pool is synchronous: a checkout that must reach the server (a pre-ping, a new or recycled
connection, a wait for a busy pool) awaits asyncpg through `await_`, so the whole checkout runs in a
greenlet (`greenlet_spawn`), and so does the return, whose commit and rollback await too. A greenlet
per hop, two per transaction, cost some 20-25 µs of CPU each on a transaction's critical path (3,000
one-statement transactions, the two ways alternated in one process). Most checkouts need no I/O but the
ping: the pool holds an idle live connection. Those run straight on the loop.

Invariants:
- A checkout runs synchronously only when SQLAlchemy's pool would hand out its next idle connection
  without reaching the server (`_idle_without_io`: the record `LifoQueue` gives next is connected, and
  neither recycled, invalidated with the pool nor soft-invalidated: what `_ConnectionRecord.get_connection`
  checks). Anything else is the usual checkout in a greenlet.
- Its pre-ping is deferred (`DEFERRED_PING`), then sent on the loop: the transaction's `BEGIN`
  (with the advisory lock of `lock`, as `begin_as_ping` sends it). When that fails, the connection is
  discarded as the pre-ping's failure discards it (invalidated, closed; the whole pool invalidated for a
  disconnect, as `InvalidatePoolError` does). After a disconnect the checkout is done again the usual
  way (a dropped pooled connection is replaced, never handed to the transaction; the new one is not
  pinged, so its transaction begins without the lock, as in SQLAlchemy's own retry); any other failure
  leaves as SQLAlchemy's checkout raises it (a `DBAPIError`: a locked `BEGIN` cut short by
  `lock_timeout`).
- A connection goes back to the pool on the loop only with nothing left to send (`give_back_committed`): its
  transaction committed (`AsyncpgConnection.commit`) or never begun, no ORM session joined. SQLAlchemy's
  own commit and checkin then run (listeners, the pool's reset), and find no I/O to do. Anything else is
  returned in a greenlet.
"""

from __future__ import annotations

import functools
import time
from contextvars import ContextVar
from typing import Any, cast

from sqlalchemy import Connection, Engine
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.util import await_, greenlet_spawn

from mcphost.stores import _direct

STATEMENT_CHECKOUT: ContextVar[bool] = ContextVar("mcphost_statement_checkout", default=False)
"""Set while `Database.run_statement` checks a connection out: no `BEGIN` and no ping (see `begin_as_ping`)."""


DEFERRED_PING: ContextVar[list[Any] | None] = ContextVar("mcphost_deferred_ping", default=None)
"""Set while `_checkout.checkout` checks a connection out on the loop: the pre-ping appends the adapter
here instead of reaching the server, and the checkout sends it (`begin_deferred`)."""


CHECKOUT_LOCK: ContextVar[int | None] = ContextVar("mcphost_checkout_lock", default=None)
"""Set while `Database.run_write(..., lock=)` checks a connection out: the advisory lock key (`_sql.advisory_key`)
its transaction's `BEGIN` takes in the same round trip (see `begin_as_ping`)."""


def begin_as_ping(dbapi_connection: DBAPIConnection) -> bool:
    """PostgreSQL's pre-ping (SQLAlchemy's `do_ping`): begin the transaction the checkout is for.

    A connection the server dropped fails its `BEGIN` as it would fail asyncpg's own ping (SQLAlchemy
    then replaces it), and a live one has its transaction begun, which the first statement would
    otherwise do (SQLAlchemy's asyncpg adapter begins lazily, and only when none is open). With
    `CHECKOUT_LOCK` set, the `BEGIN` takes that advisory lock too, in the same round trip
    (`locked_transaction`): the body's own lock statement is then skipped (`AsyncpgConnection.holds_lock`).

    A checkout for one autocommit statement (`STATEMENT_CHECKOUT`, set by the task; SQLAlchemy's
    greenlets run in the task's context) is neither pinged nor begun: the statement is the first round
    trip, and a dropped connection fails it as it would fail the ping. SQLAlchemy then invalidates the
    pool, and the caller, an `@idempotent` store method, retries on a new connection."""
    if STATEMENT_CHECKOUT.get():
        return True
    deferred = DEFERRED_PING.get()
    if deferred is not None:
        deferred.append(dbapi_connection)
        return True
    await_(begin_deferred(dbapi_connection, CHECKOUT_LOCK.get()))
    return True


async def begin_deferred(adapted: Any, key: int | None) -> None:
    """`begin_as_ping`'s round trip on the adapter `adapted`, awaited (on the loop for a checkout that
    deferred it, `DEFERRED_PING`): its failure leaves as the adapter's DBAPI error."""
    if adapted._transaction is None and adapted.isolation_level != "autocommit":
        if key is None or adapted.isolation_level is not None or adapted.readonly or adapted.deferrable:
            await adapted._start_transaction()
        else:
            await _start_locked(adapted, key)
        return
    try:  # the adapter's own `ping`
        await adapted._async_ping()
    except Exception as error:
        adapted._handle_exception(error)


@functools.cache
def locked_transaction() -> type[Any]:
    """`LockedTransaction`: an asyncpg transaction whose `BEGIN` also takes a transaction advisory lock,
    in one simple query, `BEGIN; SELECT pg_advisory_xact_lock(key)`, where `Transaction.start` sends
    `BEGIN` alone and the lock would be a round trip of its own. Otherwise asyncpg's own (commit,
    rollback, state checks). Built on first use: asyncpg is imported only where PostgreSQL is used.

    The key is an integer formatted here (`int`), never text from a caller: the query has no
    parameters, so that both statements go in one `Query` message."""
    from asyncpg.exceptions import InterfaceError  # pyright: ignore[reportMissingTypeStubs]  # asyncpg ships no types
    from asyncpg.transaction import Transaction, TransactionState  # pyright: ignore[reportMissingTypeStubs]

    class LockedTransaction(Transaction):
        __slots__ = ("lock_key",)

        def __init__(self, connection: Any, lock_key: int) -> None:
            super().__init__(connection, None, False, False)
            self.lock_key = int(lock_key)

        async def start(self) -> None:
            """`Transaction.start` for a top-level transaction at the default isolation, with the lock."""
            connection: Any = self._connection
            if connection._top_xact is not None or connection.is_in_transaction():
                raise InterfaceError("cannot begin a locked transaction inside another transaction")
            connection._top_xact = self
            try:
                await connection.execute(f"BEGIN; SELECT pg_advisory_xact_lock({self.lock_key});")
            except BaseException:
                self._state = TransactionState.FAILED
                raise
            self._state = TransactionState.STARTED

    return LockedTransaction


async def _start_locked(adapted: Any, key: int) -> None:
    """The adapter's `_start_transaction` with a `LockedTransaction`: a failure is translated by the
    adapter (a dropped connection fails this ping), and the transaction is tracked once it began."""
    transaction = locked_transaction()(adapted._connection, key)
    try:
        await transaction.start()
    except Exception as error:
        adapted._handle_exception(error)
    adapted._transaction = transaction


async def checkout(engine: Engine, *, lock: int | None = None, statement: bool = False) -> Connection:
    """A connection of `engine`'s pool in a begun transaction (whose `BEGIN` took the advisory lock
    `lock`), or, for one autocommit `statement`, neither pinged nor begun (`STATEMENT_CHECKOUT`)."""
    if _idle_without_io(engine.pool):
        connection, deferred = _checkout_now(engine, statement=statement)
        if deferred is None:
            return connection
        try:
            await begin_deferred(deferred, lock)
        except BaseException as error:
            if not await greenlet_spawn(_discard, engine, connection, error):
                if isinstance(error, Exception):
                    _direct.raise_wrapped(error, None, None, engine.dialect)
                raise
            # A dropped connection: checked out again below, as SQLAlchemy's checkout retries.
        else:
            return connection
    unpinged = STATEMENT_CHECKOUT.set(statement)
    locked = CHECKOUT_LOCK.set(lock)
    try:
        return await greenlet_spawn(engine.connect)  # the ping is its BEGIN
    finally:
        CHECKOUT_LOCK.reset(locked)
        STATEMENT_CHECKOUT.reset(unpinged)


async def give_back_committed(connection: Connection) -> None:
    """Return `connection` to its pool after its transaction committed on the loop (or, for a statement
    checkout, was never begun): on the loop when the driver has no transaction left, so that
    SQLAlchemy's commit (its listeners) and checkin find nothing to send; else in a greenlet."""
    fairy: Any = connection._dbapi_connection  # pyright: ignore[reportPrivateUsage]
    if fairy is not None and fairy.dbapi_connection._transaction is None:
        _end(connection)
    else:
        await greenlet_spawn(_end, connection)


def _end(connection: Connection) -> None:
    try:
        transaction = connection.get_transaction()
        if transaction is not None:
            transaction.commit()
    finally:
        connection.close()


def _checkout_now(engine: Engine, *, statement: bool) -> tuple[Connection, Any]:
    """The pool's idle connection, checked out synchronously; with the adapter whose pre-ping was deferred
    (None when the pool did not ping it: a fresh connection, or a `statement` checkout)."""
    deferred: list[Any] = []
    token = DEFERRED_PING.set(deferred)
    marker = STATEMENT_CHECKOUT.set(statement)
    try:
        connection = engine.connect()
    finally:
        STATEMENT_CHECKOUT.reset(marker)
        DEFERRED_PING.reset(token)
    return connection, (deferred[0] if deferred else None)


def _idle_without_io(pool: Any) -> bool:
    """Whether the pool's next checkout takes an idle connection as it is (`_ConnectionRecord.get_connection`
    would neither connect nor recycle it), so that only its pre-ping would reach the server."""
    queue: Any = getattr(pool, "_pool", None)  # `AsyncAdaptedQueuePool`'s `AsyncAdaptedQueue`
    waiting: Any = getattr(queue, "_queue", None)  # its asyncio queue
    records: Any = getattr(waiting, "_queue", None)  # the idle records, in the queue's order
    if not records:
        return False
    record = records[-1] if queue.use_lifo else records[0]
    if record.dbapi_connection is None:
        return False
    recycle = pool._recycle
    if recycle > -1 and time.time() - record.starttime > recycle:
        return False
    return pool._invalidate_time <= record.starttime and record._soft_invalidate_time <= record.starttime


def _discard(engine: Engine, connection: Connection, error: BaseException) -> bool:
    """What SQLAlchemy's checkout does with a connection whose pre-ping failed: invalidated (and, for a
    disconnect, the pool with it: every connection older than now reconnects on its next checkout), then
    back to the pool. Whether the failure was a disconnect (the checkout is then done again)."""
    fairy: Any = connection._dbapi_connection  # pyright: ignore[reportPrivateUsage]
    dialect = engine.dialect
    disconnect = (
        fairy is not None
        and isinstance(error, dialect.loaded_dbapi.Error)
        and dialect.is_disconnect(error, fairy.dbapi_connection, None)
    )
    if disconnect:
        engine.pool._invalidate(cast(Any, fairy), error, _checkin=False)  # pyright: ignore[reportPrivateUsage]
    try:
        connection.invalidate(error)
    finally:
        connection.close()
    return disconnect
