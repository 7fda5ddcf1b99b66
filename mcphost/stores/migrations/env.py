"""Alembic environment for mcphost, async-URL aware and usable without alembic.ini.

The host calls `mcphost.stores.engine.migrate(db)`, which hands this script a live connection inside a
write transaction (`config.attributes["connection"]`). Without one (e.g. a developer running Alembic
commands with a config from `engine.alembic_config(url)`), it opens its own `Database` on the async URL.
SQLite uses batch mode so later migrations can alter tables. Autogenerate skips the full-text objects
`tables.described_by_metadata` names (dialect-specific; migrations write them by hand).
"""

from __future__ import annotations

import anyio
from alembic import context
from sqlalchemy import Connection

from mcphost.stores.engine import Database
from mcphost.stores.tables import described_by_metadata, metadata

config = context.config


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_name=described_by_metadata,
    )


def run_with_connection(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


async def run_with_own_database() -> None:
    db = Database(config.get_main_option("sqlalchemy.url") or "")
    try:
        async with db.write() as session:
            connection = await session.connection()
            await connection.run_sync(run_with_connection)
    finally:
        await db.dispose()


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
elif (shared := config.attributes.get("connection")) is not None:
    run_with_connection(shared)
else:
    anyio.run(run_with_own_database)
