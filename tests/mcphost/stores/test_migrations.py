"""Migrations: head equals `tables.py` on both dialects, upgrades are idempotent, and downgrade works."""

from __future__ import annotations

import fcntl
import sqlite3
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect, text

from mcphost.errors import ConfigError
from mcphost.stores import Database, _schema, engine, migrate, open_stores, upgrade_database
from mcphost.stores.engine import alembic_config, sqlite_path
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


async def test_upgrading_to_run_attempts_keeps_every_run_with_its_results_and_audit(
    empty_database_url: str,
) -> None:
    # 0003 rebuilds `runs` on SQLite; with foreign keys enforced that would cascade-delete the results
    # and audit rows of every run.
    path = sqlite_path(empty_database_url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    db = Database(empty_database_url)
    try:
        async with db.write() as session:
            connection = await session.connection()

            def _to_0002(sync: Connection) -> None:
                cfg = alembic_config(empty_database_url)
                cfg.attributes["connection"] = sync
                command.upgrade(cfg, "0002")

            await connection.run_sync(_to_0002)
            await session.execute(
                text(
                    "INSERT INTO runs (run_id, event_id, event_type, conversation_id, thread_id, status, "
                    "created_at, deadline_at, usage, \"grant\", token_hash) VALUES ('run_a', 'evt_a', "
                    "'message.received', 'c1', '', 'completed', 1, 2, '{}', '{}', 'h')"
                )
            )
            await session.execute(
                text(
                    "INSERT INTO run_results (run_id, seq, type, payload, created_at) "
                    "VALUES ('run_a', 1, 'run.completed', '{}', 1)"
                )
            )
        await migrate(db)
        async with db.read() as session:
            runs = (await session.execute(text("SELECT run_id, attempt, previous_run_id FROM runs"))).all()
            results = (await session.execute(text("SELECT run_id, seq FROM run_results"))).all()
            fk = (
                (await session.execute(text("PRAGMA foreign_keys"))).scalar() if db.dialect == "sqlite" else 1
            )
        assert [tuple(r) for r in runs] == [("run_a", 1, None)]
        assert [tuple(r) for r in results] == [("run_a", 1)]
        assert fk == 1  # the migration's connection without enforcement was not handed on
    finally:
        await db.dispose()


async def test_sqlite_checks_foreign_keys_after_an_upgrade_and_not_at_head(tmp_path: Path) -> None:
    # `PRAGMA foreign_key_check` reads every table: it belongs to a start that migrated, not to each start.
    url = f"sqlite+aiosqlite:///{tmp_path / 'mcphost.db'}"
    await anyio.to_thread.run_sync(lambda: command.upgrade(alembic_config(url), "0001"))
    db = Database(url)
    statements: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_rest: object) -> None:
        statements.append(statement)

    db.hooks.add("before_cursor_execute", record)
    try:
        await migrate(db)  # a file at the first revision: every later migration runs
        assert sum("foreign_key_check" in s for s in statements) == 1
        statements.clear()
        await migrate(db)  # at head
        assert any("alembic_version" in s for s in statements)  # the revision was read...
        assert not any("foreign_key_check" in s for s in statements)  # ...and nothing checked
        assert not any(
            s.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER"))
            for s in statements
        )
    finally:
        await db.dispose()


_OPEN_AND_WRITE = """
import sys, time
from pathlib import Path
import anyio
from mcphost.stores import open_stores

async def main(url: str, data_dir: str, name: str, go: str) -> None:
    while not Path(go).exists():  # every process is imported and waiting before any of them opens
        time.sleep(0.005)
    async with open_stores(url, Path(data_dir)) as stores:
        await stores.events.append(
            event_id=name, event_type="a.b", kind="system", source="system", payload={}
        )

anyio.run(main, *sys.argv[1:])
"""


async def test_hosts_starting_together_on_a_new_sqlite_file_all_open_it(tmp_path: Path) -> None:
    # Replicas started at once used to race for a new file's first locks: one of them could fail with
    # "database is locked" before its busy timeout was even set. Now the first migrates under a file
    # lock while the others wait for it, and every one of them opens the file and writes.
    url = f"sqlite+aiosqlite:///{tmp_path / 'db' / 'mcphost.db'}"
    go = tmp_path / "go"
    processes = [
        await anyio.open_process(
            [sys.executable, "-c", _OPEN_AND_WRITE, url, str(tmp_path / "data"), f"host-{i}", str(go)]
        )
        for i in range(5)
    ]
    await anyio.sleep(1.0)  # let them import; they wait for `go` either way
    go.touch()
    failures: list[str] = []
    with anyio.fail_after(120):
        for process in processes:
            code = await process.wait()
            assert process.stderr is not None
            if code != 0:
                failures.append((await process.stderr.receive()).decode(errors="replace"))
    assert not failures, failures
    async with open_stores(url, tmp_path / "data") as stores, stores.db.read() as session:
        names = (await session.execute(text("SELECT event_id FROM events ORDER BY event_id"))).scalars()
        assert list(names) == [f"host-{i}" for i in range(5)]


async def test_a_sqlite_migration_waits_for_the_one_already_under_way(tmp_path: Path) -> None:
    path = tmp_path / "mcphost.db"
    db = Database(f"sqlite+aiosqlite:///{path}")
    try:
        with open(f"{path}.migrate-lock", "a+b") as held:  # noqa: ASYNC230  # another process migrating
            fcntl.flock(held.fileno(), fcntl.LOCK_EX)
            async with anyio.create_task_group() as tg:
                tg.start_soon(migrate, db)
                await anyio.sleep(0.5)
                assert not path.exists() or not _tables(path)  # it has not touched the schema
                fcntl.flock(held.fileno(), fcntl.LOCK_UN)
        async with db.engine.connect() as connection:
            head = ScriptDirectory.from_config(alembic_config(db.url)).get_current_head()
            assert await connection.run_sync(_current) == head
    finally:
        await db.dispose()


def _tables(path: Path) -> list[str]:
    with closing(sqlite3.connect(path)) as connection:
        return [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


async def test_a_sqlite_file_locked_past_the_busy_timeout_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mcphost.db"
    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_S", 0.2)
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("CREATE TABLE t (x)")
        other.execute("BEGIN EXCLUSIVE")  # a rollback-journal file held by another process
        with pytest.raises(ConfigError, match="another process kept it locked") as caught:
            async with open_stores(f"sqlite:///{path}", tmp_path / "data"):
                pass
        other.execute("ROLLBACK")
    assert "Make the file" not in str(caught.value)


def _constraints_sorted(sql: str | None) -> str | None:
    """A statement with its table constraints in one order: Alembic's batch mode writes a rebuilt table's
    UNIQUE constraints in set order, which differs from one interpreter to the next (hash seed)."""
    if sql is None:
        return None
    lines = [line.removesuffix(", ") for line in sql.split("\n")]
    columns = [line for line in lines if not line.startswith("\tCONSTRAINT")]
    constraints = sorted(line for line in lines if line.startswith("\tCONSTRAINT"))
    return "\n".join([*columns[:-1], *constraints, columns[-1]])


def _schema_of(path: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Every object of a SQLite file's schema (its statement text included) and its revision."""
    with closing(sqlite3.connect(path)) as connection:
        rows = connection.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
        revision = connection.execute("SELECT version_num FROM alembic_version").fetchall()
    master = [(kind, name, table, _constraints_sorted(sql)) for kind, name, table, sql in rows]
    return sorted(master, key=repr), revision


async def test_a_new_sqlite_database_gets_exactly_the_schema_the_migrations_build(tmp_path: Path) -> None:
    migrated, replayed = tmp_path / "migrated.db", tmp_path / "replayed.db"
    await anyio.to_thread.run_sync(lambda: command.upgrade(alembic_config(f"sqlite:///{migrated}"), "head"))
    async with open_stores(f"sqlite+aiosqlite:///{replayed}", tmp_path / "data"):
        pass
    master, revision = _schema_of(replayed)
    assert any(kind == "trigger" for kind, *_ in master)  # the full-text objects are there too
    assert revision == [(engine.migration_head(),)]
    assert (master, revision) == _schema_of(migrated), (
        "the SQLite schema snapshot is stale: run `uv run python -m mcphost.stores._schema`"
    )


async def test_a_new_sqlite_database_is_created_without_alembic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_alembic(*_args: object) -> bool:
        raise AssertionError("Alembic ran on a new database")

    monkeypatch.setattr(engine, "_upgrade_on", no_alembic)
    async with open_stores(f"sqlite+aiosqlite:///{tmp_path / 'mcphost.db'}", tmp_path / "data") as stores:
        await stores.events.append(event_id="e", event_type="a.b", kind="system", source="system", payload={})
        assert (await stores.events.get("e")).event_id == "e"


async def test_a_snapshot_of_another_revision_or_a_database_with_objects_goes_through_alembic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = tmp_path / "stale.json"
    stale.write_text('{"revision": "0001", "statements": ["CREATE TABLE wrong (x)"]}', encoding="utf-8")
    monkeypatch.setattr(_schema, "SNAPSHOT", stale)
    async with open_stores(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}", tmp_path / "data"):
        pass
    assert "wrong" not in _tables(tmp_path / "a.db")
    with closing(sqlite3.connect(tmp_path / "b.db")) as other:
        other.execute("CREATE TABLE mine (x)")
    monkeypatch.undo()
    async with open_stores(f"sqlite+aiosqlite:///{tmp_path / 'b.db'}", tmp_path / "data"):
        pass
    master, _ = _schema_of(tmp_path / "b.db")
    assert {"mine", "runs"} <= {name for _, name, *_ in master}


def test_the_cheap_head_read_from_the_files_is_alembics_head() -> None:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert engine.migration_head() == script.get_current_head()
    assert {engine.migration_head()} == set(script.get_heads())


def test_the_cheap_head_refuses_migrations_with_two_heads(tmp_path: Path) -> None:
    for name, revision, down in (
        ("a.py", "0001", "None"),
        ("b.py", "0002", '"0001"'),
        ("c.py", "0003", '"0001"'),
    ):
        (tmp_path / name).write_text(f'revision: str = "{revision}"\ndown_revision: str | None = {down}\n')
    with pytest.raises(RuntimeError, match=r"2 heads \(\['0002', '0003'\]\)"):
        engine.migration_head(tmp_path)


_OPEN_AND_LIST_MODULES = """
import sys, anyio
from pathlib import Path
from mcphost.stores import open_stores
async def main() -> None:
    async with open_stores(sys.argv[1], Path(sys.argv[2])):
        pass
anyio.run(main)
print(sorted(m for m in sys.modules if m == "alembic" or m.startswith("alembic.")))
"""


async def test_opening_a_database_at_head_does_not_import_alembic(database_url: str, tmp_path: Path) -> None:
    async with open_stores(database_url, tmp_path):
        pass  # migrated to head here
    opened = await anyio.run_process(
        [sys.executable, "-c", _OPEN_AND_LIST_MODULES, database_url, str(tmp_path)], check=False
    )
    assert opened.returncode == 0, opened.stderr.decode()
    assert opened.stdout.decode().strip() == "[]"


async def test_a_database_one_revision_behind_is_upgraded_through_alembic(
    database_url: str, tmp_path: Path
) -> None:
    await anyio.to_thread.run_sync(upgrade_database, database_url)
    head = engine.migration_head()
    db = Database(database_url)
    try:
        async with db.write() as session:
            connection = await session.connection()

            def _down_one(sync: Connection) -> str | None:
                cfg = alembic_config(database_url)
                cfg.attributes["connection"] = sync
                command.downgrade(cfg, "-1")
                return _current(sync)

            assert await connection.run_sync(_down_one) not in (None, head)
        await migrate(db)
        async with db.engine.connect() as conn:
            assert await conn.run_sync(_current) == head
            assert await conn.run_sync(_diffs) == []
    finally:
        await db.dispose()
