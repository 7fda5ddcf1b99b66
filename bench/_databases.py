"""The databases a benchmark runs on: a SQLite file, and PostgreSQL when a server is configured.

Owns creating a fresh database per use and removing it afterwards. SQLite: a new file in a new
temporary folder (a real file, never `:memory:`, which shares one connection and hides locking).
PostgreSQL: a new database `mcphost_bench_<hex>` on the server named by `MCPHOST_BENCH_POSTGRES_URL` (or
`MCPHOST_TEST_POSTGRES_URL`), dropped `WITH (FORCE)` on exit, whatever happened.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from mcphost.stores.engine import normalize_url

DialectName = Literal["sqlite", "postgres"]
POSTGRES_ENV = ("MCPHOST_BENCH_POSTGRES_URL", "MCPHOST_TEST_POSTGRES_URL")


def postgres_server_url() -> str | None:
    """The configured PostgreSQL server, or None."""
    for name in POSTGRES_ENV:
        value = os.environ.get(name)
        if value:
            return value
    return None


def dialects(only_sqlite: bool = False) -> list[DialectName]:
    """SQLite always; PostgreSQL too when a server is configured."""
    if only_sqlite or postgres_server_url() is None:
        return ["sqlite"]
    return ["sqlite", "postgres"]


@dataclass(frozen=True)
class Workspace:
    """Where one benchmark's host lives: its database URL and a data folder for blobs."""

    dialect: DialectName
    database_url: str
    data_dir: Path


@asynccontextmanager
async def workspace(dialect: DialectName, root: Path | None = None) -> AsyncGenerator[Workspace, None]:
    """A fresh database of `dialect` and a fresh data folder, both removed on exit."""
    folder = Path(tempfile.mkdtemp(prefix="mcphost-bench-", dir=root))
    try:
        if dialect == "sqlite":
            url = f"sqlite+aiosqlite:///{(folder / 'bench.db').as_posix()}"
            yield Workspace(dialect, url, folder / "data")
        else:
            server = postgres_server_url()
            if server is None:
                raise RuntimeError(f"PostgreSQL needs one of {', '.join(POSTGRES_ENV)} set to a server URL")
            async with fresh_postgres_database(server) as url:
                yield Workspace(dialect, url, folder / "data")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@asynccontextmanager
async def fresh_postgres_database(server_url: str) -> AsyncGenerator[str, None]:
    """A new, empty database on the server of `server_url`, dropped on exit; yields its URL."""
    url = make_url(normalize_url(server_url))
    name = f"mcphost_bench_{secrets.token_hex(6)}"
    admin = create_async_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        try:
            yield url.set(database=name).render_as_string(hide_password=False)
        finally:
            with anyio.CancelScope(shield=True):
                async with admin.connect() as conn:
                    await conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        with anyio.CancelScope(shield=True):
            await admin.dispose()
