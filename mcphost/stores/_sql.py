"""The few statements whose SQL differs between SQLite and PostgreSQL.

Owns "insert unless it exists", "insert or update", transaction-scoped serialization locks, and
discarding a dedicated (session-locked or listening) connection. Stores
call these instead of branching on the dialect themselves.

Invariants:
- `lock_in_transaction` serializes transactions that lock the same (namespace, value) across every
  process sharing the database. On PostgreSQL it is `pg_advisory_xact_lock` on a 64-bit key derived
  from both strings (released at commit/rollback); on SQLite it is a no-op because write sessions begin
  with `BEGIN IMMEDIATE`, which already serializes all writers of the file. Call it only inside
  `db.write()`.
- SQLAlchemy's PostgreSQL dialect (and asyncpg's with it) is imported by `pg_insert`, on the first
  PostgreSQL statement built, never at import: a SQLite host does not load it. Statements built once
  per dialect are built on first use for that dialect (`functools.cache`), not for both at import.
- Advisory keys are a BLAKE2b digest of "namespace\\0value": different namespaces never share a key in
  practice (2**-64), and the session-level host locks (`hosts.py`) use the same derivation.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import anyio
from sqlalchemy import Insert, Table, bindparam, func, literal_column, select, text
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.sql.elements import ColumnElement

from mcphost.stores import _direct

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql

log = logging.getLogger(__name__)

Dialect = Literal["sqlite", "postgresql"]


def advisory_key(namespace: str, value: str) -> int:
    """A signed 64-bit PostgreSQL advisory lock key for (namespace, value)."""
    digest = hashlib.blake2b(f"{namespace}\0{value}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


_CONSTANT = re.compile(r"[a-z][a-z_]*")


def among(column: ColumnElement[Any], constants: Sequence[str]) -> ColumnElement[bool]:
    """`column IN ('a', 'b')`, the values written into the SQL: constants of the code (statuses), never a
    caller's value (`ValueError` for anything but lowercase words). Not `column.in_(values)`: SQLAlchemy
    expands an `IN` of parameters at each execution, which the prebuilt plans cannot (`_direct.plan`).
    Not an `OR` of equalities: PostgreSQL 15 reads that as one index scan per value and a bitmap of their
    rows, where an `IN` is one index scan (SQLite reads both as one index search)."""
    for value in constants:
        if not _CONSTANT.fullmatch(value):
            raise ValueError(f"among() takes constants of the code (lowercase words), not {value!r}")
    return column.in_([literal_column(f"'{value}'") for value in constants])


_ADVISORY_XACT_LOCK = select(func.pg_advisory_xact_lock(bindparam("w_advisory_key")))
"""Built once: a statement built per call pays its construction and cache key on every lock."""


async def lock_in_transaction(session: AsyncSession, dialect: Dialect, namespace: str, value: str) -> None:
    """Hold a lock on (namespace, value) until the current write transaction ends. Nothing to send when
    the transaction's `BEGIN` took it (`Database.run_write(..., lock=)` on PostgreSQL)."""
    if dialect == "postgresql":
        from mcphost.stores.engine import core  # engine imports this module

        key = advisory_key(namespace, value)
        connection = await core(session)
        if isinstance(connection, _direct.AsyncpgConnection) and connection.holds_lock(key):
            return
        await connection.execute(_ADVISORY_XACT_LOCK, {"w_advisory_key": key})


async def scan_whole_tables(session: AsyncSession, dialect: Dialect) -> None:
    """Let the current read transaction's statements scan a table sequentially: for a report that
    aggregates a whole table (or most of it), where reading it in index order costs several times a
    sequential (and parallel) scan. Every PostgreSQL connection of the host refuses sequential scans
    where an index serves (`engine.POSTGRES_SESSION_SETTINGS`); this lifts that until the transaction
    ends. Nothing on SQLite, whose planner has no such setting."""
    if dialect == "postgresql":
        await session.execute(_SCAN_WHOLE_TABLES)


_SCAN_WHOLE_TABLES = text("SET LOCAL enable_seqscan = on")


def insert_ignoring(
    dialect: Dialect, table: type[DeclarativeBase], values: Mapping[str, Any], conflict: Sequence[str]
) -> Insert:
    """`INSERT … ON CONFLICT (conflict) DO NOTHING`: race-safe "insert unless it exists".

    With `.returning(...)`, no row comes back when the row already existed.
    """
    if dialect == "postgresql":
        return pg_insert(table).values(dict(values)).on_conflict_do_nothing(index_elements=conflict)
    return sqlite.insert(table).values(dict(values)).on_conflict_do_nothing(index_elements=conflict)


def ignoring_insert(dialect: Dialect, table: Table[Any], conflict: Sequence[str]) -> Insert:
    """`insert_ignoring` without its values, to build once and execute with each row's parameters."""
    insert = pg_insert(table) if dialect == "postgresql" else sqlite.insert(table)
    return insert.on_conflict_do_nothing(index_elements=conflict)


def upsert(
    dialect: Dialect,
    table: type[DeclarativeBase],
    values: Mapping[str, Any],
    conflict: Sequence[str],
    update: Sequence[str],
) -> Insert:
    """`INSERT … ON CONFLICT (conflict) DO UPDATE SET update = excluded.update`."""
    if dialect == "postgresql":
        pg = pg_insert(table).values(dict(values))
        return pg.on_conflict_do_update(
            index_elements=conflict, set_={name: pg.excluded[name] for name in update}
        )
    lite = sqlite.insert(table).values(dict(values))
    return lite.on_conflict_do_update(
        index_elements=conflict, set_={name: lite.excluded[name] for name in update}
    )


def upserting_insert(
    dialect: Dialect, table: Table[Any], conflict: Sequence[str], update: Sequence[str]
) -> Insert:
    """`upsert` without its values, to build once and execute with each row's parameters."""
    if dialect == "postgresql":
        pg = pg_insert(table)
        return pg.on_conflict_do_update(index_elements=conflict, set_={n: pg.excluded[n] for n in update})
    lite = sqlite.insert(table)
    return lite.on_conflict_do_update(index_elements=conflict, set_={n: lite.excluded[n] for n in update})


def pg_insert(table: type[DeclarativeBase] | Table[Any]) -> postgresql.Insert:
    """PostgreSQL's `INSERT` (with `ON CONFLICT`): its dialect package, and the asyncpg dialect with it, is
    imported on a PostgreSQL database's first such statement, not when a SQLite host imports the stores."""
    from sqlalchemy.dialects import postgresql

    return postgresql.insert(table)


async def discard_connection(conn: AsyncConnection) -> None:
    """Close a dedicated connection for good, never back to the pool: closing its server session is what
    releases its session locks and `LISTEN`s, whatever state the connection is in."""
    with anyio.CancelScope(shield=True):
        try:
            await conn.invalidate()
            await conn.close()
        except (SQLAlchemyError, OSError):
            log.debug("closing a dedicated connection failed", exc_info=True)
