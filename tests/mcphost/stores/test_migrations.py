"""Migrations: head equals `tables.py` on both dialects, upgrades are idempotent, and downgrade works."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect, text

from mcphost.stores import Database, migrate, open_stores, upgrade_database
from mcphost.stores.engine import alembic_config
from mcphost.stores.tables import described_by_metadata, metadata


def _diffs(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(
        connection,
        opts={"compare_type": True, "compare_server_default": True, "include_name": described_by_metadata},
    )
    return compare_metadata(context, metadata)


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


async def test_the_migrated_schema_equals_the_table_definitions(
    empty_database_url: str, tmp_path: Path
) -> None:
    async with open_stores(empty_database_url, tmp_path) as stores, stores.db.engine.connect() as conn:
        diffs = await conn.run_sync(_diffs)
        current = await conn.run_sync(_current)
    assert diffs == []
    assert current == ScriptDirectory.from_config(alembic_config(empty_database_url)).get_current_head()


async def test_state_and_storage_keys_sort_bytewise_on_postgres(database_url: str, tmp_path: Path) -> None:
    async with open_stores(database_url, tmp_path) as stores, stores.db.engine.connect() as conn:
        if stores.db.dialect == "postgresql":
            rows = await conn.execute(
                text(
                    "SELECT table_name, collation_name FROM information_schema.columns "
                    "WHERE column_name = 'key' AND table_name IN ('state', 'storage') ORDER BY table_name"
                )
            )
            assert rows.all() == [("state", "C"), ("storage", "C")]
        else:
            columns = await conn.run_sync(lambda c: inspect(c).get_columns("state"))
            assert [c["name"] for c in columns if c["name"] == "key"] == ["key"]


async def test_upgrade_database_is_the_sync_entry_point_and_is_idempotent(
    database_url: str, tmp_path: Path
) -> None:
    await anyio.to_thread.run_sync(upgrade_database, database_url)
    await anyio.to_thread.run_sync(upgrade_database, database_url)
    async with open_stores(database_url, tmp_path, migrate=False) as stores:
        await stores.events.append(event_id="e", event_type="a.b", kind="system", source="system", payload={})
        await migrate(stores.db)
        assert (await stores.events.get("e")).event_id == "e"


async def test_downgrade_to_base_and_upgrade_again(database_url: str) -> None:
    await anyio.to_thread.run_sync(upgrade_database, database_url)
    db = Database(database_url)
    try:
        async with db.write() as session:
            connection = await session.connection()

            def _down_and_up(sync: Connection) -> list[str]:
                cfg = alembic_config(database_url)
                cfg.attributes["connection"] = sync
                command.downgrade(cfg, "base")
                left = inspect(sync).get_table_names()
                command.upgrade(cfg, "head")
                return left

            left = await connection.run_sync(_down_and_up)
        assert left == ["alembic_version"]
        async with db.engine.connect() as conn:
            assert await conn.run_sync(_diffs) == []
    finally:
        await db.dispose()
