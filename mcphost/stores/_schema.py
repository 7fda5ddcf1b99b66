"""A brand-new SQLite database gets the migrated schema in one step, without Alembic.

Owns `migrations/sqlite_schema.json`: the schema that Alembic's migrations leave in an empty SQLite
database (every `sqlite_master` statement in the order to replay it: tables, then indexes, triggers and
views), and the head revision it was taken at. `create_from_snapshot` replays it on an empty database
and stamps that revision; `dump` writes it. Does not own the migrations nor when they run (`engine.py`),
nor PostgreSQL, whose new databases are migrated by Alembic as before.

Invariants:
- Only an empty database (no object in `sqlite_master`) and only a snapshot taken at the current head
  (`_revisions.migration_head()`) are replayed; anything else is left to Alembic.
- The replay is the migrated schema, object for object and statement for statement (up to the order
  of a rebuilt table's constraint lines, which Alembic's batch mode writes in set order): a test builds
  one database each way and compares their whole `sqlite_master` and `alembic_version`, so a new
  migration without a new snapshot fails it (regenerate with `python -m mcphost.stores._schema`).
- The shadow tables of a full-text virtual table are created with it, so they are not in the snapshot.

Why: importing Alembic and running every migration on a new file is most of a first `mcphost run`'s
database time; replaying some 80 statements costs a few milliseconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Connection

SNAPSHOT = Path(__file__).parent / "migrations" / "sqlite_schema.json"
_ORDER = {"table": 0, "index": 1, "trigger": 2, "view": 3}


def dump(connection: Connection) -> dict[str, object]:
    """The snapshot of the schema `connection`'s database is at: its revision and its statements."""
    rows = connection.exec_driver_sql(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"
    ).all()
    virtual = [
        str(name) for kind, name, sql in rows if kind == "table" and str(sql).startswith("CREATE VIRTUAL")
    ]
    kept = [
        (str(kind), str(sql))
        for kind, name, sql in rows
        if not str(name).startswith("sqlite_")
        and not (kind == "table" and any(str(name).startswith(f"{v}_") for v in virtual))
    ]
    kept.sort(key=lambda row: _ORDER[row[0]])  # stable: rowid order within each kind
    revision = connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalar_one()
    return {"revision": str(revision), "statements": [sql for _, sql in kept]}


def create_from_snapshot(connection: Connection, head: str) -> bool:
    """On an empty database, replay the snapshot and stamp its revision; whether it did (False: the
    database has objects already, or the snapshot is not at `head`)."""
    if connection.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar_one():
        return False
    snapshot = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    if snapshot["revision"] != head:
        return False
    for statement in snapshot["statements"]:
        connection.exec_driver_sql(statement)
    connection.exec_driver_sql("INSERT INTO alembic_version (version_num) VALUES (?)", (head,))
    return True


def _main() -> None:
    """Migrate a scratch database with Alembic and write its snapshot (after adding a migration)."""
    import tempfile

    from alembic import command
    from sqlalchemy import create_engine

    from mcphost.stores.engine import alembic_config

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "schema.db"
        command.upgrade(alembic_config(f"sqlite:///{path}"), "head")
        engine = create_engine(f"sqlite:///{path}")
        with engine.connect() as connection:
            snapshot = dump(connection)
        engine.dispose()
    SNAPSHOT.write_text(json.dumps(snapshot, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT} at revision {snapshot['revision']}")


if __name__ == "__main__":
    _main()
