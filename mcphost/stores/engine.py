"""The database: one async engine, its sessions, and bringing its schema up to date.

Owns the `AsyncEngine`, the session factories every store uses, SQLite's connection settings and the
Alembic entry points (`migrate`, `upgrade_database`). Does not own any table or query (`tables.py` and
the stores do).

Invariants:
- URLs are normalized to the async drivers: `sqlite:///x` → `sqlite+aiosqlite:///x`,
  `postgresql://…` (or `postgres://`, or any other PostgreSQL driver) → `postgresql+asyncpg://…`.
- Store methods open exactly one transaction each: `db.read()` for reads, `db.write()` for anything that
  writes. Never nest `db.write()` inside another `db.write()` (on SQLite that waits for itself).
- SQLite: every connection runs WAL, `foreign_keys=ON`, `synchronous=NORMAL` and a 30 s busy timeout
  (set in a connect listener; the writer's connection waits only on its thread, below). sqlite3's own transaction handling is switched off and SQLAlchemy emits
  `BEGIN` itself: `BEGIN IMMEDIATE` for write sessions, so a writer takes the write lock up front and
  waits for it (busy timeout) instead of failing with "database is locked" when it upgrades a read lock
  later; a plain deferred `BEGIN` for reads, which WAL never blocks. Writers of one process also queue on
  an `anyio.Lock` first, so they take turns without polling the busy handler; other processes are kept
  out by `BEGIN IMMEDIATE`.
- Transactions are shielded from cancellation: a cancelled caller's transaction commits or rolls back
  first and the cancellation lands right after, so transactions must stay short. Unshielded, a statement
  cancelled half way makes SQLAlchemy invalidate the connection with a close that is itself cancelled:
  on SQLite the connection lives on in its worker thread with the transaction open and every later
  writer fails with "database is locked" once the busy timeout runs out; on PostgreSQL asyncpg's
  connection is torn down under a pending query ("unexpected connection_lost() call").
- Database failures leave here as `StorageUnavailableError` with a fixed message, the driver error as
  its cause (`_retry.storage_error`; integrity errors pass through for the stores that expect them).
  PostgreSQL connections are pinged at checkout (`pool_pre_ping`), so one the server dropped while
  pooled is replaced instead of failing a transaction; a transaction that loses its connection half
  way is retried only by store methods marked `@idempotent` (`_retry.py`). The ping is the
  transaction's own `BEGIN` (`_checkout.begin_as_ping`): one round trip where asyncpg's ping takes three
  (`BEGIN`, `;`, `ROLLBACK`) before the transaction's `BEGIN`, a fourth; a connection checked out for
  autocommit has it rolled back when SQLAlchemy switches its isolation level.
- PostgreSQL (asyncpg): read committed; stores that need cross-process serialization take transaction
  advisory locks (`_sql.py`). Every connection refuses sequential scans where an index serves
  (`POSTGRES_SESSION_SETTINGS`, sent with the connection's startup message). The pool is fixed (`pool_size`, `[host] database_pool_size`; no overflow):
  a transaction that finds every connection busy waits for one rather than opening a connection that the
  pool closes when it comes back, because each new one costs PostgreSQL a backend start and the host
  asyncpg's setup and the lean path's prepared statements again (with SQLAlchemy's default 5 + 10
  overflow, that churn was most of PostgreSQL's CPU per run at c = 64: 7-9 ms against 2.7-3.0 ms).
  It hands out the most recently used connection first (LIFO): a host that is not saturated runs on a
  few warm connections, whose statements are already prepared, instead of cycling through all of them.
- JSON columns decode through `load_stored_json`: a stored text too deep for the parser never fails a
  whole query; it reads as a value past `MAX_JSON_DEPTH`, which readers refuse one value at a time.
- Migrations run inside one write transaction; on PostgreSQL under an advisory lock, on a SQLite file
  under an exclusive `flock` of `<file>.migrate-lock`, taken before the process opens its first
  connection and held to the commit. Replicas that start together on one file apply them once, and a
  later one never opens the file while it is still empty: its connect pragma would then try to switch
  the file to WAL after the first had, upgrading a read lock, which SQLite refuses at once with
  "database is locked" (no busy handler runs for a lock upgrade).
- On a SQLite file, hot-path write transactions (`run_write`: a run's admission and start, its result
  batches, its end, MCP audit rows, a model call's budget reservation and the usage rows of finished
  model calls, and a remote run's queue writes: enqueue, claim, posted results and end, heartbeats,
  drop) run whole on the writer's connection: one sync `sqlite3` connection of a second engine with the
  same connect listener (WAL, pragmas) and `BEGIN IMMEDIATE` (sent straight to sqlite3), queued on the
  same `anyio.Lock` as every other writer and shielded the same way, the ones a loop turn starts in one
  transaction, each body in a savepoint (`SqliteWriter.run_grouped`). With the write lock free the
  transaction runs right on the event loop (after one yield, so that a writing loop lets other tasks run
  and stays cancellable): a hand-off to a thread and back cost more than a short transaction. The loop
  never waits in SQLite: the writer's connection has no busy timeout and no auto-checkpoint
  (`_writer.SqliteWriter`, which owns all this); a `BEGIN IMMEDIATE` that finds the lock held elsewhere
  sends the transaction to the writer thread (`_writer.WriterThread`: one function at a time, handed over with a future and
  `call_soon_threadsafe`), which waits the usual busy timeout there; so do the first transaction (it
  opens the connection) and `long` ones (rows without bound, a result batch of megabytes), and every `CHECKPOINT_EVERY` transactions
  the writer, still on its turn, has the thread checkpoint the WAL. The connection stays
  open between transactions (closed and reopened after a transaction that did not roll back cleanly,
  closed on its turn by `dispose`), and a body gets a sync ORM `Session` joined to the transaction only
  when it makes an ORM call. Through aiosqlite every DBAPI call (checkout, BEGIN, each statement and
  fetch, COMMIT, reset) is its own round trip between the loop and the connection's thread. The body is
  written once for `AsyncSession`; here it gets `_sessions.ThreadSession`, whose methods never suspend,
  so `_sessions.drive` runs it to its end without awaiting the loop (a body that awaits anything else
  fails loudly). In-memory SQLite runs the same body in `write()`. `sync_engines` lists every engine.
- On PostgreSQL, `run_write` runs the same bodies on a sync `Connection` checked out of the pool (its
  pre-ping is the transaction's `BEGIN`), with `_sessions.PostgresSession` as the session: the
  hot statements go straight to asyncpg on the event loop (`core`), ORM calls get a sync `Session`
  joined to the transaction in a greenlet. The checkout, the `COMMIT` and the return to the pool run on
  the loop when they need no other I/O, else in a greenlet each (`_checkout`). Without the
  `AsyncSession` and `AsyncConnection` layers (their begin, commit and close each a greenlet hop and
  bookkeeping of their own) a transaction's own cost on the host fell from
  ~490 to ~215 µs of CPU (one indexed read, measured in one process, 3 x 3,000 transactions each way).
  The same SQLAlchemy `Connection` runs the transaction, so its events (`hooks`), error wrapping and
  invalidation of a dropped connection are unchanged.
- Engine listeners are registered at creation, never while statements run (SQLAlchemy iterates a
  mutable deque per event): statement and transaction listeners that come and go (counters, faults)
  are hooks in `hooks` (`_hooks.py`), which every engine forwards to.
- The hot bodies run SQLAlchemy Core statements built once at import (`bindparam`s for the values) on
  the session's connection (`core(session)`), not ORM statements through the session: an ORM
  statement built per call pays for its construction, its cache key and the ORM's execution and
  loading layers on every execution, several times the driver's own cost. On the writer's connection those
  statements go one step further down (`_direct`): compiled once by SQLAlchemy into a plan (SQL,
  parameter order and processors, result processors) and run straight on the sqlite3 connection —
  the same SQL, values and rows, `before_cursor_execute` listeners (and so `hooks`) called and driver errors wrapped
  as SQLAlchemy's, without the per-execution context SQLAlchemy builds; anything a plan could not
  reproduce exactly runs through `Connection.execute`. On PostgreSQL they go down the same way, to
  asyncpg (`_direct.AsyncpgConnection`): prepared once per connection through
  SQLAlchemy's asyncpg adapter, one round trip each, without SQLAlchemy's execution context and its
  greenlet hop.
- The busy timeout is given to `sqlite3.connect` itself too (`timeout`), so it covers the connect
  listener's own pragmas (switching a new file to WAL takes the write lock), which run before the
  `busy_timeout` pragma could.
"""

from __future__ import annotations

import fcntl
import json
import logging
from collections.abc import AsyncGenerator, Generator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar, cast

import anyio
import anyio.lowlevel
import pydantic_core
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.sql.base import Executable
from sqlalchemy.util import greenlet_spawn

from mcphost.errors import ConfigError
from mcphost.protocol import MAX_JSON_DEPTH
from mcphost.stores import _checkout, _direct
from mcphost.stores._hooks import EngineHooks
from mcphost.stores._retry import storage_error
from mcphost.stores._revisions import MIGRATIONS_DIR, known_revisions, migration_head
from mcphost.stores._schema import create_from_snapshot
from mcphost.stores._sessions import PostgresSession
from mcphost.stores._sql import Dialect, advisory_key, lock_in_transaction
from mcphost.stores._writer import SqliteWriter, WriteBody

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_S = 30.0
LONG_WRITE_BYTES = 128 * 1024
"""A hot write carrying more payload than this (a batch of results) is `long` (`run_write`): on a SQLite
file, encoding and writing megabytes on the event loop would stall every other task meanwhile."""
DEFAULT_POOL_SIZE = 16
"""PostgreSQL connections a process keeps open (`[host] database_pool_size`)."""
_WRITE_OPTION = "mcphost_write"
_NO_FOREIGN_KEYS_OPTION = "mcphost_no_foreign_keys"
_CORE_CONNECTION = "mcphost_core_connection"
T = TypeVar("T")


def dump_stored_json(value: Any) -> str:
    """Encode a JSON column: compact, non-ASCII as is, the text `json.dumps(value, separators=(",", ":"),
    ensure_ascii=False)` writes but for the spelling of some floats (`1e-7` for `1e-07`; the same
    value), by pydantic-core's encoder: 5-7x faster than `json.dumps` per value (1.3 against 7.3 µs
    for a 200-byte result, 5 against 35 µs for a run's context), and a run stores some fifteen."""
    return pydantic_core.to_json(value).decode()


def load_stored_json(text: str) -> Any:
    """Decode a stored JSON column. Text nested too deep for the parser (written before nesting was
    bounded, or straight into the database) decodes as a value one level deeper than `MAX_JSON_DEPTH`,
    so every reader's depth check refuses that one value, as it does any other too-deep value, instead
    of the whole query failing with a `RecursionError`."""
    try:
        return json.loads(text)
    except RecursionError:
        marker: Any = "nested too deep to parse"
        for _ in range(MAX_JSON_DEPTH + 1):
            marker = [marker]
        return marker


def normalize_url(url: str) -> str:
    """The async-driver form of a database URL.

    Raises:
        ValueError: for a database other than SQLite or PostgreSQL.
    """
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    elif backend in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+asyncpg")
    else:
        raise ValueError(
            f"Unsupported database URL scheme {parsed.drivername!r}; use sqlite:///path/to/file.db "
            "or postgresql://user@host/dbname."
        )
    return parsed.render_as_string(hide_password=False)


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL, or None for PostgreSQL and in-memory SQLite."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def _sqlite_on_connect(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    # Let SQLAlchemy emit BEGIN (see _sqlite_on_begin) instead of sqlite3's legacy implicit BEGIN,
    # which starts transactions only at the first DML statement and never for SELECT.
    dbapi_connection.isolation_level = None  # type: ignore[attr-defined]  # the aiosqlite adapter has it
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
    finally:
        cursor.close()


POSTGRES_SESSION_SETTINGS = {"enable_seqscan": "off"}
"""The session settings of every PostgreSQL connection of the host, in its startup message (asyncpg's
`server_settings`: no statement of their own, so nothing can fail between the connect and them, and a
`RESET` returns to them): no sequential scan where an index can serve.
The hot statements are prepared once per connection and PostgreSQL keeps their generic plans until the
next ANALYZE of their tables; a plan made while a table's statistics said it was empty (a fresh
database, or one growing faster than autovacuum samples it) read whole tables on every admission until
the next ANALYZE. No host statement needs a sequential scan (`tests/mcphost/stores/test_query_plans.py`
asserts it on a generated database), so a plan's choice no longer depends on how fresh the statistics
are; a table with no usable index is still scanned. A report that aggregates a whole table lifts it for
its own transaction (`_sql.scan_whole_tables`)."""


def _sqlite_on_begin(conn: Connection) -> None:
    options = conn.get_execution_options()
    if options.get(_NO_FOREIGN_KEYS_OPTION, False):
        conn.exec_driver_sql("PRAGMA foreign_keys=OFF")  # before BEGIN: inside a transaction it is a no-op
    conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get(_WRITE_OPTION, False) else "BEGIN")


class Database:
    """One database: the async engine plus read and write session factories.

    `dialect` is "sqlite" or "postgresql"; stores branch on it only where SQL differs.
    """

    def __init__(self, url: str, *, pool_size: int = DEFAULT_POOL_SIZE) -> None:
        self.url = normalize_url(url)
        backend = make_url(self.url).get_backend_name()
        self.dialect: Dialect = "sqlite" if backend == "sqlite" else "postgresql"
        # PostgreSQL: a pooled connection the server dropped (restart, failover, pg_terminate_backend)
        # is found by a ping at checkout and replaced, instead of failing the next transaction.
        self.engine: AsyncEngine = create_async_engine(
            self.url,
            pool_pre_ping=self.dialect == "postgresql",
            **(
                {"pool_size": pool_size, "max_overflow": 0, "pool_use_lifo": True}
                if self.dialect == "postgresql"
                else {}
            ),
            json_serializer=dump_stored_json,
            json_deserializer=load_stored_json,
            connect_args=(
                {"timeout": SQLITE_BUSY_TIMEOUT_S}
                if self.dialect == "sqlite"
                else {"server_settings": POSTGRES_SESSION_SETTINGS}
            ),
            hide_parameters=True,  # a driver error's text names its SQL, never the user text it bound
        )
        if self.dialect == "postgresql":
            self.engine.sync_engine.dialect.do_ping = _checkout.begin_as_ping  # type: ignore[method-assign]
        if self.dialect == "sqlite":
            event.listen(self.engine.sync_engine, "connect", _sqlite_on_connect)
            event.listen(self.engine.sync_engine, "begin", _sqlite_on_begin)
        self.hooks = EngineHooks()
        """Listeners on every engine (statements, transactions), changeable while statements run."""
        self.hooks.attach(self.engine.sync_engine)
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        """Sessions for reads (a deferred BEGIN on SQLite)."""
        self.write_sessions = async_sessionmaker(
            self.engine.execution_options(**{_WRITE_OPTION: True}), expire_on_commit=False
        )
        """Sessions for writes (BEGIN IMMEDIATE on SQLite). Prefer `write()`, which also queues."""
        # Free, it is taken without a checkpoint: `_writer_turn` checks for cancellation right after.
        self._write_lock = anyio.Lock(fast_acquire=True) if self.dialect == "sqlite" else None
        self._writer: SqliteWriter | None = None
        """A SQLite file's writer: its connection, and where its transactions run (`_writer.py`)."""
        self.sync_engines: list[Engine] = [self.engine.sync_engine]
        """Every engine this database runs statements on (listeners go through `hooks`)."""
        if self.dialect == "sqlite" and sqlite_path(self.url) is not None:
            writer = create_engine(
                make_url(self.url).set(drivername="sqlite+pysqlite"),
                json_serializer=dump_stored_json,
                json_deserializer=load_stored_json,
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False},
                hide_parameters=True,
            )
            event.listen(writer, "connect", _sqlite_on_connect)  # before the writer's own listeners
            self._writer = SqliteWriter(writer, busy_timeout_s=lambda: SQLITE_BUSY_TIMEOUT_S)
            self.hooks.attach(writer)
            self.sync_engines.append(writer)

    def read(self) -> AbstractAsyncContextManager[AsyncSession]:
        """A session inside a read transaction, committed on exit."""
        return self._shielded(self.sessions)

    @asynccontextmanager
    async def write(self) -> AsyncGenerator[AsyncSession, None]:
        """A session inside a write transaction: committed on exit, rolled back on an exception."""
        async with self._write_lock or nullcontext(), self._shielded(self.write_sessions) as session:
            yield session

    async def run_write(
        self, body: WriteBody[T], *, long: bool = False, lock: tuple[str, str] | None = None
    ) -> T:
        """`body`'s result, run inside a write transaction as `write()` would (committed on return,
        rolled back on an exception, shielded, queued). On a SQLite file, on the writer's connection:
        right here on the event loop when the write lock is free, else (or for a `long` body, one that
        may write rows without bound, such as a conversation's deletion) on the writer thread.

        `lock` is the (namespace, value) the body locks first (`_sql.lock_in_transaction`): on
        PostgreSQL the transaction's `BEGIN` takes it in the same round trip (`_checkout.CHECKOUT_LOCK`),
        and the body's own lock statement is skipped. The body must still take it: a connection new to
        the pool is not pinged, so its transaction begins without the lock."""
        if self._writer is None:
            if self.dialect == "postgresql":
                return await self._run_write_postgres(body, lock)
            async with self.write() as session:
                return await body(session)
        if not long:  # grouped with the others of this loop turn (`_writer.SqliteWriter.run_grouped`)
            assert self._write_lock is not None
            with _storage_errors():
                return await self._writer.run_grouped(body, self._write_lock)
        # A long body, on the thread: yield first, so that a task writing in a loop lets the others
        # run and can be cancelled (before its transaction, never inside it).
        await anyio.lowlevel.checkpoint()
        async with self._writer_turn():
            return await self._writer.run_long(body)

    async def run_statement(self, statement: Executable, params: Mapping[str, Any]) -> Any:
        """`statement` with `params` in a write transaction of its own, as `run_write` would run it; its
        result (rows already fetched). On PostgreSQL one round trip: the checkout is neither pinged nor
        begun and the statement autocommits (no `BEGIN`, no `COMMIT`). Only for a store method that is
        `@idempotent` (a dropped connection fails the statement itself; see `_checkout.begin_as_ping`)."""
        if self.dialect != "postgresql":

            async def one(session: AsyncSession) -> Any:
                return _direct.fetched(await (await core(session)).execute(statement, params))

            return await self.run_write(one)
        async with self._writer_turn():
            connection = await _checkout.checkout(self.engine.sync_engine, statement=True)
            try:
                return await _direct.AsyncpgConnection(connection, autocommit=True).execute(
                    statement, dict(params)
                )
            finally:
                await _checkout.give_back_committed(connection)

    async def _run_write_postgres(self, body: WriteBody[T], lock: tuple[str, str] | None) -> T:
        # The transaction on a sync `Connection` straight from the pool, without the `AsyncSession` and
        # `AsyncConnection` around it (see the module docstring); its checkout, `COMMIT` and return on the
        # loop when they need no other I/O (`_checkout`), else in a greenlet.
        async with self._writer_turn():  # no queue on PostgreSQL: shielded, and errors translated
            key = None if lock is None else advisory_key(*lock)
            connection = await _checkout.checkout(self.engine.sync_engine, lock=key)
            session = PostgresSession(connection)
            try:
                connection.begin()
                result = await body(cast(AsyncSession, session))
                committed = await session.commit()
            except BaseException:
                await greenlet_spawn(session.end, commit=False)
                raise
            if committed:
                await _checkout.give_back_committed(connection)
            else:
                await greenlet_spawn(session.end, commit=True)
            return result

    @asynccontextmanager
    async def _writer_turn(self) -> AsyncGenerator[None, None]:
        """The writer queue (SQLite), then a shielded scope (as in `_shielded`: a cancelled caller is
        stopped before its transaction, never inside it)."""
        async with self._write_lock or nullcontext():
            await anyio.lowlevel.checkpoint_if_cancelled()
            with _storage_errors(), anyio.CancelScope(shield=True):
                yield

    @staticmethod
    @asynccontextmanager
    async def _shielded(
        factory: async_sessionmaker[AsyncSession],
    ) -> AsyncGenerator[AsyncSession, None]:
        # See the module docstring: a transaction is never abandoned half way. A cancelled caller is
        # stopped here, before it starts one: a loop of transactions must stay cancellable.
        await anyio.lowlevel.checkpoint_if_cancelled()
        with _storage_errors(), anyio.CancelScope(shield=True):
            async with factory.begin() as session:
                yield session

    async def dispose(self) -> None:
        """Close every pooled connection."""
        await self.engine.dispose()
        if self._writer is not None:
            await self._writer.close()  # a later write opens it again
        for engine in self.sync_engines[1:]:
            engine.dispose()


@contextmanager
def _storage_errors() -> Generator[None, None, None]:
    """Database failures leave as `StorageUnavailableError` (see the module docstring)."""
    try:
        yield
    except Exception as exc:
        translated = storage_error(exc)
        if translated is None:
            raise
        raise translated from exc


async def core(session: AsyncSession) -> AsyncConnection:
    """The connection under a write body's session, for SQLAlchemy Core statements (see the module
    docstring): on the writer thread its facade, on PostgreSQL the asyncpg facade, elsewhere the
    session's `AsyncConnection`, asked for once per session (each transaction has a session of its own)."""
    connection = session.info.get(_CORE_CONNECTION)
    if connection is None:
        connection: Any = await session.connection()  # on the writer thread, `_sessions.ThreadConnection`
        if isinstance(connection, AsyncConnection) and connection.dialect.driver == "asyncpg":
            sync = connection.sync_connection
            assert sync is not None  # a session's connection has started
            connection = _direct.AsyncpgConnection(sync)
        session.info[_CORE_CONNECTION] = connection
    return cast(AsyncConnection, connection)


# -- migrations ---------------------------------------------------------------------------------------


def alembic_config(url: str) -> Config:
    """An Alembic config for `url` built in code: no alembic.ini is needed at runtime.

    Developers create a new revision with
    `command.revision(alembic_config(url), autogenerate=True, message="...")` against a database at head.
    """
    from alembic.config import Config  # Alembic is imported only when a migration is pending

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    # ConfigParser interpolation treats % specially (URL-encoded passwords).
    cfg.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return cfg


def _revision(connection: Connection) -> str | None:
    """The database's revision from `alembic_version` (None: not migrated yet, or more than one head)."""
    if not connection.dialect.has_table(connection, "alembic_version"):
        return None
    rows = connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalars().all()
    return str(rows[0]) if len(rows) == 1 else None


def _upgrade_on(connection: Connection, url: str) -> bool:
    """Upgrade to head; whether the revision changed (False when the schema was at head already)."""
    from alembic import command

    before, shown = _revision(connection), make_url(url).render_as_string(hide_password=True)
    if before is not None and before not in known_revisions():
        raise ConfigError(
            f"The database {shown} is at schema revision {before!r}, which this mcphost does not know: a "
            "newer mcphost migrated it. Run that version of mcphost against it, or point database_url at "
            "another database. Nothing was changed."
        )
    if before is None and connection.dialect.has_table(connection, "runs"):  # migrating would recreate it
        raise ConfigError(
            f"The database {shown} holds mcphost's tables but no single schema revision (its "
            "alembic_version table is missing, empty or holds several rows). Restore its revision row, or "
            "point database_url at another database. Nothing was changed."
        )
    cfg = alembic_config(url)
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, "head")
    return _revision(connection) != before


async def _at_head(db: Database) -> bool:
    async with db.engine.connect() as conn:
        return await conn.run_sync(_revision) == migration_head()


async def migrate(db: Database) -> None:
    """Apply every pending migration in one write transaction (a no-op at head).

    A schema already at head is only read (the `alembic_version` row against `migration_head()`; no
    lock, no write transaction, no Alembic import). An empty SQLite database gets the head schema from
    its snapshot (`_schema.py`), also without Alembic. Otherwise, on SQLite, the transaction runs with
    foreign key enforcement off, as SQLite's table-rebuild procedure requires
    (dropping a parent table would otherwise cascade-delete its children's rows); when a migration was
    applied it fails and rolls back if `PRAGMA foreign_key_check` (linear in the database's size) finds a
    dangling reference, and its connection is discarded afterwards so no store ever gets one without
    enforcement.
    """
    if db.dialect == "sqlite":
        await _migrate_sqlite(db)
    elif not await _at_head(db):  # the schema never moves backwards under us
        async with db.write() as session:
            await lock_in_transaction(session, db.dialect, "migrate", "schema")
            connection = await session.connection()
            await connection.run_sync(_upgrade_on, db.url)
    log.info("database schema is at head (%s)", db.dialect)


async def _migrate_sqlite(db: Database) -> None:
    path = sqlite_path(db.url)
    if path is None:  # in-memory: one process only
        await _migrate_sqlite_locked(db)
        return
    lock_file = _open_lock_file(path)
    if lock_file is None:  # a read-only folder: opening the database fails next, with the precise reason
        await _migrate_sqlite_locked(db)
        return
    with lock_file:  # the lock goes with the file, crash included
        while True:  # polled, not a blocking call in a thread, so a cancelled start-up stops at once
            try:
                fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await anyio.sleep(0.05)
        await _migrate_sqlite_locked(db)


def _open_lock_file(path: Path) -> BinaryIO | None:
    try:
        return open(f"{path}.migrate-lock", "a+b")  # the caller closes it
    except OSError:
        return None


async def _migrate_sqlite_locked(db: Database) -> None:
    if await _at_head(db):  # the schema never moves backwards under us
        return
    head = migration_head()
    assert db._write_lock is not None  # pyright: ignore[reportPrivateUsage]  # the same module's writer queue
    async with db._write_lock, db.engine.connect() as conn:  # pyright: ignore[reportPrivateUsage]  # as above
        await conn.execution_options(**{_WRITE_OPTION: True, _NO_FOREIGN_KEYS_OPTION: True})
        try:
            with anyio.CancelScope(shield=True):
                async with conn.begin():
                    if await conn.run_sync(create_from_snapshot, head):
                        return  # a new database: the migrated schema in one step, no Alembic
                    if not await conn.run_sync(_upgrade_on, db.url):
                        return  # another process brought it to head meanwhile
                    dangling = (await conn.exec_driver_sql("PRAGMA foreign_key_check")).all()
                    if dangling:
                        raise RuntimeError(
                            f"A migration left {len(dangling)} row(s) with a dangling foreign key "
                            f"(first: {tuple(dangling[0])!r}); nothing was changed."
                        )
        finally:
            with anyio.CancelScope(shield=True):
                await conn.invalidate()


def upgrade_database(url: str) -> None:
    """Apply pending migrations to the database at `url` (for `mcphost db upgrade`; not async-safe)."""

    async def _run() -> None:
        path = sqlite_path(url)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        db = Database(url)
        try:
            await migrate(db)
        finally:
            await db.dispose()

    anyio.run(_run)
