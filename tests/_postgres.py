"""The PostgreSQL half of the tests: the server named by `MCPHOST_TEST_POSTGRES_URL` (when set) and a
database of its own per test, created and dropped (the fixtures in tests/conftest.py use it; a few tests
that need a database outside a fixture call it directly)."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncGenerator, Generator
from contextlib import asynccontextmanager, contextmanager

import anyio
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from mcphost.stores.engine import normalize_url

POSTGRES_URL = os.environ.get("MCPHOST_TEST_POSTGRES_URL")
NO_POSTGRES = (
    "MCPHOST_TEST_POSTGRES_URL is not set; set it to a PostgreSQL server URL "
    "(e.g. postgresql+asyncpg://postgres@127.0.0.1:5432/test) to run the PostgreSQL half of this test"
)


def _new_database(server_url: str) -> tuple[URL, str]:
    """The server's URL and a fresh database name on it."""
    return make_url(normalize_url(server_url)), f"mcphost_t_{secrets.token_hex(6)}"


async def _admin(url: URL, statement: str) -> None:
    """`statement` outside a transaction on the server of `url` (CREATE / DROP DATABASE)."""
    admin = create_async_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        async with admin.connect() as conn:
            await conn.exec_driver_sql(statement)
    finally:
        await admin.dispose()


def _drop(name: str) -> str:
    return f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'


@asynccontextmanager
async def fresh_postgres_database(
    server_url: str, *, template: str | None = None
) -> AsyncGenerator[str, None]:
    """A new database on the server of `server_url` (empty, or a copy of `template`), dropped on exit;
    yields its URL."""
    url, name = _new_database(server_url)
    await _admin(url, f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        await _admin(url, _drop(name))


@contextmanager
def fresh_postgres_database_sync(server_url: str) -> Generator[str, None, None]:
    """`fresh_postgres_database` for a synchronous test, e.g. one whose host is a subprocess."""
    url, name = _new_database(server_url)
    anyio.run(_admin, url, f'CREATE DATABASE "{name}"')
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        anyio.run(_admin, url, _drop(name))
