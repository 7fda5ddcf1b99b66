"""Prebuilt Core statements executed straight through the driver: `sqlite3` on the SQLite writer
thread, asyncpg on PostgreSQL.

Owns turning a Core statement into a plan once — its SQL for the engine's dialect, the order
of its parameters with SQLAlchemy's own bind processors (JSON encoding), the literal values it carries
(`LIMIT 1`), and its result columns with SQLAlchemy's own result processors (JSON decoding) — and
running a plan on a DBAPI connection (`execute`) or on the asyncpg connection under a session
(`execute_asyncpg`). Used by `_sessions.ThreadConnection` and `AsyncpgConnection` (what `engine.core`
gives on PostgreSQL) only, under the transaction their session began; does not own transactions, pooling
(`_checkout`: how PostgreSQL's are begun at checkout) or the statements themselves, only how a
transaction's `COMMIT` goes on PostgreSQL (`AsyncpgConnection.commit`, with a held statement).

Invariants:
- A plan is what SQLAlchemy itself would execute: the statement compiled for the same dialect with the
  same column keys, the parameters through the same processors, rows through the same processors.
  What a plan cannot reproduce exactly falls back to `Connection.execute` (`plan` returns None):
  post-compile or expanding parameters, Python-side column defaults, a missing required parameter,
  RETURNING under executemany, result column names that are not identifiers.
- `before_cursor_execute` listeners on the engine still see every statement (tests count statements
  and inject faults with them), and driver errors leave as SQLAlchemy's `DBAPIError` subclasses, as
  from `Connection.execute` (the stores catch `IntegrityError`; `_retry.storage_error` translates the
  rest).
- On asyncpg a plan runs as SQLAlchemy's asyncpg adapter runs a statement: under the adapter's
  execution lock, beginning the adapter's transaction when none is open, prepared through the
  adapter's own statement cache (so each statement is parsed once per connection), one round trip
  (`Bind`/`Execute`/`Sync`) per statement and one for a batch of rows (asyncpg's `executemany`);
  `Database.run_statement`'s one statement runs outside a transaction (`begin=False`) and commits by
  itself, on a checkout that was neither pinged nor begun (`_checkout.STATEMENT_CHECKOUT`). A
  driver error goes through the adapter's translation and then SQLAlchemy's own handling
  (`Connection._handle_dbapi_exception`): the same exception classes, and a dropped connection is
  invalidated and flagged `connection_invalidated` as `@idempotent` expects.
- A statement held for the `COMMIT` (`AsyncpgConnection.hold_for_commit`, a body's last, on a
  `run_write` transaction only) is sent with it as one simple query, its values inlined as literals
  (`inline`: `NULL`, integers, dollar-quoted strings; nothing else is held). Listeners and errors see
  it as a plan's statement; a failure leaves the transaction open and tracked for the rollback.
- Plans are cached by statement identity, column keys and dialect, at most `MAX_PLANS`; the engines
  of one dialect are all built alike (`Database.__init__`: the same driver, the same JSON
  (de)serializers), so a plan serves every one of them. Only the hot bodies' module-level statements come here (`engine.core`); a
  statement built per call would only fill the cache, after which plans are built and not kept.
"""

from __future__ import annotations

import collections
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, cast

from sqlalchemy import Connection
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.exc import DBAPIError, MultipleResultsFound, NoResultFound
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement
from sqlalchemy.util import greenlet_spawn

MAX_PLANS = 512
_MISSING = object()
Processor = Callable[[Any], Any] | None


@dataclass(frozen=True, slots=True)
class Plan:
    statement: Executable
    """Kept so that the statement's id, the cache key, is not reused while the plan is cached."""
    sql: str
    binds: tuple[tuple[str, Processor, Any], ...]
    """(name, processor, literal value or `_MISSING` when the caller must give it), in SQL order."""
    row: type[tuple[Any, ...]] | None
    """The row class (a namedtuple of the result columns) when the statement returns rows."""
    processors: tuple[Processor, ...]
    """The result columns' processors for a driver that reports no column types (sqlite3)."""
    types: tuple[Any, ...]
    """The result columns' SQLAlchemy types: on asyncpg their processors depend on the column types
    the server reports (`_asyncpg_processors`), as in SQLAlchemy's own result."""


_PLANS: dict[tuple[int, tuple[str, ...], str], Plan | None] = {}


def plan(statement: Executable, keys: tuple[str, ...], dialect: Dialect, *, many: bool) -> Plan | None:
    """The plan of `statement` given parameters named `keys`, or None to let SQLAlchemy run it."""
    cache_key = (id(statement), keys, dialect.name)
    found = _PLANS.get(cache_key, _MISSING)
    if found is _MISSING:
        try:
            found = _build(statement, keys, dialect)
        except Exception:
            found = None
        if len(_PLANS) < MAX_PLANS:
            _PLANS[cache_key] = found
    if not isinstance(found, Plan) or found.statement is not statement:
        return None
    if many and found.row is not None:
        return None
    return found


def _build(statement: Executable, keys: tuple[str, ...], dialect: Dialect) -> Plan | None:
    if not isinstance(statement, ClauseElement):
        return None
    compiled = statement.compile(dialect=dialect, column_keys=list(keys))
    if not isinstance(compiled, SQLCompiler) or not compiled.positional or compiled.positiontup is None:
        return None
    if compiled.literal_execute_params or compiled.post_compile_params:
        return None
    if getattr(compiled, "insert_prefetch", None) or getattr(compiled, "update_prefetch", None):
        return None  # Python-side column defaults: SQLAlchemy's execution context computes them
    # What SQLAlchemy's own execution context uses, from the same compiled statement.
    processors = compiled._bind_processors  # pyright: ignore[reportPrivateUsage]
    binds: list[tuple[str, Processor, Any]] = []
    for name in compiled.positiontup:
        bind = compiled.binds[name]
        if bind.callable is not None or bind.expanding:
            return None
        literal = _MISSING if bind.required else bind.effective_value
        binds.append((name, cast(Processor, processors.get(name)), literal))
    row: type[tuple[Any, ...]] | None = None
    result_processors: tuple[Processor, ...] = ()
    types: tuple[Any, ...] = ()
    columns = compiled._result_columns  # pyright: ignore[reportPrivateUsage]
    if columns:
        names = [entry[0] for entry in columns]
        try:
            row = collections.namedtuple("Row", names)  # pyright: ignore[reportUntypedNamedTuple]
        except ValueError:
            return None
        types = tuple(entry[3] for entry in columns)
        if dialect.name == "sqlite":
            result_processors = tuple(
                type_._cached_result_processor(dialect, None)  # pyright: ignore[reportPrivateUsage]
                for type_ in types
            )
    return Plan(statement, compiled.string, tuple(binds), row, result_processors, types)


def _positional(plan_: Plan, params: Mapping[str, Any], *, none: bool = False) -> tuple[Any, ...] | None:
    """The values in SQL order, through their processors; None too when `none` (as SQLAlchemy does: a
    JSON column's None binds JSON `null`), else None binds SQL NULL (the SQLite writer's plans)."""
    values: list[Any] = []
    for name, processor, literal in plan_.binds:
        value = params.get(name, literal)
        if value is _MISSING:
            return None
        values.append(value if processor is None or (value is None and not none) else processor(value))
    return tuple(values)


def execute(
    plan_: Plan, connection: Connection, parameters: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None
) -> DirectResult | None:
    """Run `plan_` on `connection`'s DBAPI connection; None when a required parameter is missing (the
    caller then lets SQLAlchemy run the statement and raise its own error)."""
    many = isinstance(parameters, Sequence) and not isinstance(parameters, Mapping)
    if many:
        rows = [_positional(plan_, p) for p in parameters]  # type: ignore[union-attr]  # a sequence here
        if any(r is None for r in rows):
            return None
        args: Any = rows
    else:
        args = _positional(plan_, parameters or {})  # type: ignore[arg-type]  # a mapping here
        if args is None:
            return None
    dbapi_connection: Any = connection.connection.dbapi_connection
    cursor = dbapi_connection.cursor()
    dispatch = connection.dispatch.before_cursor_execute
    try:
        for listener in dispatch:
            listener(connection, cursor, plan_.sql, args, None, many)
        if many:
            cursor.executemany(plan_.sql, args)
            return DirectResult((), cursor.rowcount)
        cursor.execute(plan_.sql, args)
        rows_: list[tuple[Any, ...]] = []
        if plan_.row is not None:
            make, processors = plan_.row, plan_.processors
            rows_ = [
                make(*(v if p is None else p(v) for p, v in zip(processors, raw, strict=True)))
                for raw in cursor.fetchall()
            ]
        return DirectResult(rows_, cursor.rowcount)
    except connection.dialect.loaded_dbapi.Error as exc:
        raise_wrapped(exc, plan_.sql, args, connection.dialect)
    finally:
        cursor.close()


async def execute_asyncpg(
    plan_: Plan,
    connection: Connection,
    parameters: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    begin: bool = True,
) -> DirectResult | None:
    """Run `plan_` on the asyncpg connection under `connection` (see the module docstring); None when a
    required parameter is missing, as `execute`. Called on the event loop (not in a greenlet). Without
    `begin`, a statement outside a transaction is its own (autocommit: `Database.run_statement`)."""
    many = not isinstance(parameters, Mapping)
    if many:
        rows = [_positional(plan_, p, none=True) for p in parameters]
        if any(r is None for r in rows):
            return None
        args: Any = rows
    else:
        args = _positional(plan_, parameters, none=True)
        if args is None:
            return None
    sync = connection
    # The pooled connection under it: at hand unless it was invalidated, when asking for it reconnects.
    fairy: Any = sync._dbapi_connection or await greenlet_spawn(getattr, sync, "connection")  # pyright: ignore[reportPrivateUsage]
    adapter: Any = fairy.dbapi_connection
    dialect: Any = sync.dialect
    try:
        _listened(sync, plan_.sql, args, many=many)
        async with adapter._execute_mutex:
            try:
                if begin and adapter._transaction is None:
                    await adapter._start_transaction()
                prepared, attributes = await adapter._prepare(
                    plan_.sql, dialect._invalidate_schema_cache_asof
                )
                if many:
                    await adapter._connection.executemany(plan_.sql, args)
                    return DirectResult((), -1)
                records = await prepared.fetch(*args)
                status = prepared.get_statusmsg() or ""
            except Exception as error:
                _raise_adapted(adapter, error)
    except dialect.loaded_dbapi.Error as exc:
        await greenlet_spawn(_raise_handled, sync, exc, plan_.sql, args)
        raise AssertionError("unreachable: SQLAlchemy raised") from exc  # pragma: no cover
    rows_: list[tuple[Any, ...]] = []
    if plan_.row is not None:
        make, processors = plan_.row, _asyncpg_processors(plan_, dialect, attributes)
        rows_ = [
            make(*(v if p is None else p(v) for p, v in zip(processors, record, strict=True)))
            for record in records
        ]
    count = status.rpartition(" ")[2]
    return DirectResult(rows_, int(count) if count.isdigit() else -1)


_ASYNCPG_PROCESSORS: dict[tuple[tuple[Any, ...], tuple[int, ...]], tuple[Processor, ...]] = {}


def _listened(connection: Connection, sql: str, args: Any, *, many: bool) -> None:
    """The engine's `before_cursor_execute` listeners, told of a statement sent outside SQLAlchemy."""
    for listener in connection.dispatch.before_cursor_execute:
        listener(connection, None, sql, args, None, many)


def _asyncpg_processors(plan_: Plan, dialect: Dialect, attributes: Any) -> tuple[Processor, ...]:
    """The result processors of `plan_`'s columns for the type oids the server reported, as SQLAlchemy's
    result builds them from the cursor's description; kept per column types (the key holds them) and oids."""
    oids = tuple(attribute.type.oid for attribute in attributes)
    key = (plan_.types, oids)
    found = _ASYNCPG_PROCESSORS.get(key)
    if found is None:
        found = tuple(
            type_._cached_result_processor(dialect, oid)  # pyright: ignore[reportPrivateUsage]
            for type_, oid in zip(plan_.types, oids, strict=True)
        )
        if len(_ASYNCPG_PROCESSORS) < MAX_PLANS:
            _ASYNCPG_PROCESSORS[key] = found
    return found


def _raise_adapted(adapter: Any, error: Exception) -> NoReturn:
    """The adapter's DBAPI error for asyncpg's `error` (SQLAlchemy's asyncpg adapter translates it)."""
    adapter._handle_exception(error)
    raise AssertionError("unreachable: the adapter raised") from error  # pragma: no cover


def _raise_handled(connection: Connection, exc: Exception, sql: str | None, args: Any) -> NoReturn:
    """SQLAlchemy's handling of a driver error raised while it executed `sql`: wrapped, and the
    connection invalidated when it was dropped."""
    connection._handle_dbapi_exception(exc, sql, args, None, None)  # pyright: ignore[reportPrivateUsage]
    raise AssertionError("unreachable: SQLAlchemy raised")  # pragma: no cover


def raise_wrapped(exc: Exception, sql: str | None, args: Any, dialect: Dialect) -> NoReturn:
    """`exc`, a driver error raised by `sql` run outside SQLAlchemy, raised as SQLAlchemy would raise it
    on the host's engines (`hide_parameters`: its text names the SQL, not the values bound)."""
    raise DBAPIError.instance(
        sql, args, exc, dialect.loaded_dbapi.Error, hide_parameters=True, dialect=dialect
    ) from exc


class AsyncpgConnection:
    """The `AsyncConnection` methods the hot bodies call (`core`) on PostgreSQL, over a sync `Connection`
    in a transaction: their prebuilt statements run straight on asyncpg (`execute_asyncpg`), anything
    else through SQLAlchemy in a greenlet (as `AsyncConnection` runs it). With `autocommit`, on a checkout
    that was not begun, each statement is a transaction of its own (`Database.run_statement`): a plan runs
    outside any transaction, anything else is committed after it, its rows fetched first."""

    def __init__(self, connection: Connection, *, autocommit: bool = False, commits: bool = False) -> None:
        self.sync_connection = connection
        self.autocommit = autocommit
        self.commits = commits
        """Its transaction ends through `commit_held` (`run_write`'s `PostgresSession`): a body's last
        statement may be held for its `COMMIT` (`hold_for_commit`)."""
        self._held: tuple[Plan, tuple[Any, ...], str] | None = None

    @property
    def holding(self) -> bool:
        """A statement is held for the `COMMIT` (`hold_for_commit`)."""
        return self._held is not None

    async def execute(self, statement: Any, parameters: Any = None, **kwargs: Any) -> Any:
        if not kwargs:
            many = isinstance(parameters, list)
            given: list[Mapping[str, Any]] = cast(
                "list[Mapping[str, Any]]", parameters if many else [parameters or {}]
            )
            if given:
                keys = tuple(sorted(given[0]))
                found = plan(statement, keys, self.sync_connection.dialect, many=many)
                if found is not None:
                    one = given if many else given[0]
                    result = await execute_asyncpg(
                        found, self.sync_connection, one, begin=not self.autocommit
                    )
                    if result is not None:
                        return result
        if self.autocommit:
            return await greenlet_spawn(
                _execute_committed, self.sync_connection, statement, parameters, kwargs
            )
        return await greenlet_spawn(self.sync_connection.execute, statement, parameters, **kwargs)

    def hold_for_commit(self, statement: Executable, parameters: Mapping[str, Any]) -> bool:
        """Hold `statement` to go with the transaction's `COMMIT`, in one round trip (`commit_held`),
        instead of sending it now: for a body's last statement, one that returns no rows. False when it
        cannot be held (no `commit_held` will run, one is held already, it has no plan, or a value is of
        a type not written as a literal here): the caller then executes it."""
        if not self.commits or self.autocommit or self._held is not None:
            return False
        found = plan(statement, tuple(sorted(parameters)), self.sync_connection.dialect, many=False)
        if found is None or found.row is not None:
            return False
        args = _positional(found, parameters, none=True)
        inlined = None if args is None else inline(found.sql, args)
        if args is None or inlined is None:
            return False
        self._held = (found, args, inlined)
        return True

    async def commit_held(self) -> bool:
        """The held statement and the transaction's `COMMIT` in one simple query, one round trip; False
        when none is held (the caller commits as usual). Its listeners see the statement as a plan's
        (its SQL with placeholders and its values); a failure leaves as `execute_asyncpg`'s would, with
        the transaction still open for the caller's rollback."""
        held, self._held = self._held, None
        if held is None:
            return False
        found, args, inlined = held
        sync = self.sync_connection
        fairy: Any = sync._dbapi_connection  # pyright: ignore[reportPrivateUsage]  # the transaction's own
        adapter: Any = fairy.dbapi_connection
        dialect: Any = sync.dialect
        try:
            _listened(sync, found.sql, args, many=False)
            async with adapter._execute_mutex:
                transaction: Any = adapter._transaction
                connection: Any = adapter._connection
                top = connection._top_xact
                if top is transaction:
                    connection._top_xact = None  # as asyncpg's `Transaction.commit` leaves it
                try:
                    await connection.execute(f"{inlined}; COMMIT;")
                except Exception as error:
                    connection._top_xact = top  # still open: the caller rolls it back
                    _raise_adapted(adapter, error)
                transaction._state = _committed()
                adapter._transaction = None  # as the adapter's commit discards it: SQLAlchemy's is a no-op
        except dialect.loaded_dbapi.Error as exc:
            await greenlet_spawn(_raise_handled, sync, exc, found.sql, args)
            raise AssertionError("unreachable: SQLAlchemy raised") from exc  # pragma: no cover
        return True

    async def commit(self) -> None:
        """The transaction's `COMMIT`, on the loop: with the held statement (`commit_held`), else alone, as
        the adapter's own commit sends it (the driver's transaction discarded, whatever the outcome).
        SQLAlchemy's commit then has nothing left to send, and runs on the loop
        (`_checkout.give_back_committed`): its listeners follow the `COMMIT`. A failure leaves as from
        SQLAlchemy's commit (wrapped; a dropped connection invalidated). Nothing to do when the connection
        has no transaction, or was invalidated (then SQLAlchemy's commit raises, as it would)."""
        if await self.commit_held():
            return
        sync = self.sync_connection
        fairy: Any = sync._dbapi_connection  # pyright: ignore[reportPrivateUsage]
        adapter: Any = None if fairy is None else fairy.dbapi_connection
        if adapter is None or adapter._transaction is None:
            return
        dialect: Any = sync.dialect
        try:
            try:
                await adapter._call_and_discard(adapter._transaction.commit)
            except Exception as error:
                _raise_adapted(adapter, error)
        except dialect.loaded_dbapi.Error as exc:
            await greenlet_spawn(_raise_handled, sync, exc, None, None)
            raise AssertionError("unreachable: SQLAlchemy raised") from exc  # pragma: no cover

    def holds_lock(self, key: int) -> bool:
        """Whether this transaction's `BEGIN` took the advisory lock `key` (`begin_as_ping`)."""
        fairy: Any = self.sync_connection._dbapi_connection  # pyright: ignore[reportPrivateUsage]
        transaction: Any = None if fairy is None else fairy.dbapi_connection._transaction
        return getattr(transaction, "lock_key", None) == key  # `_checkout.locked_transaction`

    async def scalar(self, statement: Any, parameters: Any = None, **kwargs: Any) -> Any:
        return await greenlet_spawn(self.sync_connection.scalar, statement, parameters, **kwargs)


_PLACEHOLDER = re.compile(r"\$(\d+)")
"""A positional parameter in a plan's SQL for asyncpg (`$1::JSON`)."""


def inline(sql: str, args: Sequence[Any]) -> str | None:
    """`sql` (a plan's, for asyncpg) with each `$n` replaced by `args[n-1]` as a literal: None as `NULL`,
    an integer in decimal, a string dollar-quoted with a tag it does not hold (no escapes, whatever the
    server's `standard_conforming_strings`). None for a value of any other type. A string with NUL,
    which no PostgreSQL text holds, fails on the server as its parameter would."""
    literals: list[str] = []
    for value in args:
        if value is None:
            literals.append("NULL")
        elif type(value) is int:
            literals.append(str(value))
        elif type(value) is str:
            # The string ends where its tag first appears after it opens: not inside it, and not across
            # its end either (a string ending in `$m` would end early at `$m` + `$m$`).
            tag, n = "$m$", 0
            while (value + tag).find(tag) != len(value):
                tag, n = f"$m{n}$", n + 1
            literals.append(f"{tag}{value}{tag}")
        else:
            return None
    try:
        return _PLACEHOLDER.sub(lambda m: literals[int(m.group(1)) - 1], sql)
    except IndexError:
        return None


@functools.cache
def _committed() -> Any:
    from asyncpg.transaction import TransactionState  # pyright: ignore[reportMissingTypeStubs]  # asyncpg ships no types

    return TransactionState.COMMITTED


def _execute_committed(
    connection: Connection, statement: Any, parameters: Any, kwargs: dict[str, Any]
) -> Any:
    """`statement` through SQLAlchemy, its rows fetched, then committed (SQLAlchemy began for it)."""
    rows = fetched(connection.execute(statement, parameters, **kwargs))
    connection.commit()
    return rows


def fetched(result: Any) -> DirectResult:
    """`result` with its rows read: a statement's cursor must be done before its transaction commits."""
    if isinstance(result, DirectResult):
        return result
    return DirectResult(result.all() if result.returns_rows else [], result.rowcount)


class DirectResult:
    """The part of SQLAlchemy's `Result` the hot bodies use, over rows already fetched."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: Sequence[tuple[Any, ...]], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def all(self) -> list[Any]:
        return list(self._rows)

    def first(self) -> Any:
        return self._rows[0] if self._rows else None

    def one_or_none(self) -> Any:
        if len(self._rows) > 1:
            raise _multiple()
        return self.first()

    def one(self) -> Any:
        if len(self._rows) != 1:
            raise _multiple() if self._rows else _none()
        return self._rows[0]

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalar_one_or_none(self) -> Any:
        row = self.one_or_none()
        return None if row is None else row[0]

    def scalar_one(self) -> Any:
        return self.one()[0]

    def scalars(self) -> _Scalars:
        return _Scalars([row[0] for row in self._rows])


class _Scalars:
    __slots__ = ("_values",)

    def __init__(self, values: list[Any]) -> None:
        self._values = values

    def all(self) -> list[Any]:
        return list(self._values)

    def first(self) -> Any:
        return self._values[0] if self._values else None


def _multiple() -> Exception:
    return MultipleResultsFound("Multiple rows were found when one or none was required")


def _none() -> Exception:
    return NoResultFound("No row was found when one was required")
