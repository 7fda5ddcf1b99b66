"""Installation secrets kept in the database, so every host on one database shares them.

Owns the `secrets` table and `cursor_codec`, which gives the stores their cursor key. Does not own what a
secret signs (`_cursor.py`) or the `[host] cursor_secret` setting (`config.py`).

Why the database and not `data_dir`: replicas share a PostgreSQL database but not a disk; a secret per
host would make a cursor issued by one replica a 400 on the next. The first host to start generates the
secret (`INSERT … ON CONFLICT DO NOTHING`, then a read, so concurrent first starts agree on one value).
A configured `cursor_secret` takes precedence and is never written to the database. A schema older than
migration 0005 (opened with `migrate=False`) has no `secrets` table: cursors are then signed with a
random key of this process only, and a warning says so.
"""

from __future__ import annotations

import logging
import secrets
import time

from sqlalchemy import inspect, select

from mcphost.stores._cursor import CursorCodec
from mcphost.stores._sql import insert_ignoring
from mcphost.stores.engine import Database
from mcphost.stores.tables import SecretRow

log = logging.getLogger(__name__)

CURSOR_SECRET = "cursor"


async def stored_secret(db: Database, name: str) -> str:
    """The secret `name`, generated (32 random bytes, hex) by the first caller on this database."""
    async with db.read() as session:
        value = await session.scalar(select(SecretRow.value).where(SecretRow.name == name))
    if value is not None:
        return value
    row = {"name": name, "value": secrets.token_hex(32), "created_at": time.time()}
    async with db.write() as session:
        await session.execute(insert_ignoring(db.dialect, SecretRow, row, ["name"]))
        value = await session.scalar(select(SecretRow.value).where(SecretRow.name == name))
    assert value is not None
    return value


async def cursor_codec(db: Database, configured: str | None = None) -> CursorCodec:
    """The codec for `configured` when given, else for the database's own cursor secret."""
    if configured is not None:
        return CursorCodec.of(configured)
    async with db.read() as session:
        connection = await session.connection()
        has_table = await connection.run_sync(lambda c: inspect(c).has_table(SecretRow.__tablename__))
    if not has_table:
        log.warning(
            "the database has no %r table (schema older than migration 0005): cursors are signed with a "
            "key of this process only; run `mcphost db upgrade`",
            SecretRow.__tablename__,
        )
        return CursorCodec.of(secrets.token_hex(32))
    return CursorCodec.of(await stored_secret(db, CURSOR_SECRET))
