"""The sessions `Database.run_write` gives a write body instead of an `AsyncSession`.

Owns `ThreadSession` (the SQLite writer thread's: every method returns before its first await, so
`drive` runs a body to its end without an event loop) and `PostgresSession` (PostgreSQL's: the asyncpg
facade for `engine.core`, ORM calls in a greenlet, `end` committing and giving the connection back),
both over a sync `Connection` inside a transaction their owner began, and `ThreadConnection`, the
writer thread's facade for `core`. Does not own the transaction's start, its shielding or its queue
(`engine.Database`).
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar, cast

from sqlalchemy import Connection
from sqlalchemy.orm import Session
from sqlalchemy.util import greenlet_spawn

from mcphost.stores import _direct

T = TypeVar("T")


class JoinedSession:
    """A write body's session over a sync `Connection` inside a transaction: ORM calls get a sync
    `Session` joined to that transaction, made on first use (the hot bodies use `core` and never make
    one); the transaction's end is its owner's."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._session: Session | None = None
        self.info: dict[str, Any] = {}

    @property
    def sync_session(self) -> Session:
        if self._session is None:
            # Bound to a connection inside a transaction, the session joins it and leaves its end alone.
            self._session = Session(bind=self._connection, expire_on_commit=False)
        return self._session

    def add(self, instance: object) -> None:
        self.sync_session.add(instance)


class ThreadSession(JoinedSession):
    """The `AsyncSession` methods the stores' write bodies call, on the writer thread's connection:
    each one does its work before its first await, so a body never suspends (`drive`)."""

    def close(self) -> None:
        if self._session is not None:
            self._session.close()

    async def flush(self) -> None:
        self.sync_session.flush()

    def flush_pending(self) -> None:
        """Flush the ORM session's pending changes, if the body made one."""
        if self._session is not None:
            self._session.flush()

    async def execute(self, statement: Any, params: Any = None, **kwargs: Any) -> Any:
        return self.sync_session.execute(statement, params, **kwargs)

    async def scalar(self, statement: Any, params: Any = None, **kwargs: Any) -> Any:
        return self.sync_session.scalar(statement, params, **kwargs)

    async def scalars(self, statement: Any, params: Any = None, **kwargs: Any) -> Any:
        return self.sync_session.scalars(statement, params, **kwargs)

    async def get(self, entity: Any, ident: Any, **kwargs: Any) -> Any:
        return self.sync_session.get(entity, ident, **kwargs)

    async def refresh(self, instance: object, **kwargs: Any) -> None:
        self.sync_session.refresh(instance, **kwargs)

    async def connection(self) -> ThreadConnection:
        return ThreadConnection(self._connection)


class PostgresSession(JoinedSession):
    """The `AsyncSession` methods the stores' write bodies call, on a sync `Connection` in a transaction
    (`run_write` on PostgreSQL): `connection()` is the asyncpg facade `core` hands out; ORM calls run
    in a greenlet, as `AsyncSession` runs them. `end` commits or rolls back and gives the connection
    back to the pool, in the caller's greenlet."""

    def __init__(self, connection: Connection) -> None:
        super().__init__(connection)
        self._core = _direct.AsyncpgConnection(connection, commits=True)

    def end(self, *, commit: bool) -> None:
        connection, session = self._connection, self._session
        try:
            transaction = connection.get_transaction()
            if commit and transaction is not None:
                if session is not None:
                    session.flush()  # ORM changes left pending, as `AsyncSession`'s commit flushes them
                transaction.commit()
        finally:
            if session is not None:
                session.close()
            connection.close()  # rolls back a transaction still open, then back to the pool

    async def commit(self) -> bool:
        """On the loop, before the connection goes back: the `COMMIT` (`AsyncpgConnection.commit`, with the
        statement the body held for it, in one round trip). True when it was sent; False when ORM calls
        joined a session, whose pending changes `end` flushes before its commit (a statement held is sent
        here all the same, after that flush, and `end` then has nothing left to commit)."""
        if self._session is None:
            await self._core.commit()
            return True
        if self._core.holding:
            await self.flush()
            await self._core.commit_held()
        return False

    async def flush(self) -> None:
        await greenlet_spawn(self.sync_session.flush)

    async def execute(self, statement: Any, params: Any = None, **kwargs: Any) -> Any:
        return await greenlet_spawn(self.sync_session.execute, statement, params, **kwargs)

    async def scalar(self, statement: Any, params: Any = None, **kwargs: Any) -> Any:
        return await greenlet_spawn(self.sync_session.scalar, statement, params, **kwargs)

    async def scalars(self, statement: Any, params: Any = None, **kwargs: Any) -> Any:
        return await greenlet_spawn(self.sync_session.scalars, statement, params, **kwargs)

    async def get(self, entity: Any, ident: Any, **kwargs: Any) -> Any:
        return await greenlet_spawn(self.sync_session.get, entity, ident, **kwargs)

    async def refresh(self, instance: object, **kwargs: Any) -> None:
        await greenlet_spawn(self.sync_session.refresh, instance, **kwargs)

    async def connection(self) -> _direct.AsyncpgConnection:
        return self._core


class ThreadConnection:
    """The `AsyncConnection` methods the hot write bodies call (`core`), over the writer thread's sync
    `Connection`, each one returning at once."""

    def __init__(self, connection: Connection) -> None:
        self.sync_connection = connection

    async def execute(self, statement: Any, parameters: Any = None, **kwargs: Any) -> Any:
        if not kwargs:  # the hot bodies' prebuilt statements, straight through sqlite3 (`_direct`)
            many = isinstance(parameters, list)
            given: list[Mapping[str, Any]] = cast(
                "list[Mapping[str, Any]]", parameters if many else [parameters or {}]
            )
            keys: tuple[str, ...] = tuple(sorted(given[0])) if given else ()
            plan = _direct.plan(statement, keys, self.sync_connection.dialect, many=many)
            if plan is not None:
                result = _direct.execute(plan, self.sync_connection, given if many else given[0])
                if result is not None:
                    return result
        return self.sync_connection.execute(statement, cast(Any, parameters), **kwargs)

    async def scalar(self, statement: Any, parameters: Any = None, **kwargs: Any) -> Any:
        return self.sync_connection.scalar(statement, parameters, **kwargs)


def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends to its end, on the calling thread, without an event loop."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return cast(T, stop.value)
    coroutine.close()
    raise AssertionError("a writer-thread transaction body awaited something other than its session")
