"""Shared fixtures: the anyio backend, a SQLite database file per test, and PostgreSQL when configured.

`database_url` (and `stores`, built on it) and `empty_database_url` are parametrized over `sqlite` and
`postgres`. The SQLite half is a real file under `tmp_path`. The PostgreSQL half runs only when
`MCPHOST_TEST_POSTGRES_URL` names a server (any database on it, e.g.
`postgresql+asyncpg://postgres@127.0.0.1:5432/test`): each test gets a database of its own, created for it
and dropped after it, so tests never see each other's rows. `database_url` clones a template database
migrated once per session (saving a migration per test); `empty_database_url` is really empty.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, Generator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from mcphost.stores import Database, Stores, migrate, open_stores
from tests._postgres import NO_POSTGRES, POSTGRES_URL, fresh_postgres_database
from tests.fuzz._figures import dump, merge, report


@pytest.fixture(autouse=True)
def _no_async_library_left_set(request: pytest.FixtureRequest) -> Generator[None]:
    """A synchronous test starts outside any async library, as a program's `main` does.

    With sniffio installed (LiteLLM, the `translate` extra, brings it), the async runner that anyio's
    pytest plugin keeps for the session's async fixtures leaves `sniffio.current_async_library_cvar` set
    to "asyncio" in the tests' context, and a later synchronous test calling `anyio.run` (the CLI's
    `main`, the bench) would be refused with "Already running asyncio in this thread"."""
    try:
        import sniffio
    except ImportError:
        yield
        return
    if inspect.iscoroutinefunction(getattr(request, "function", None)):
        yield
        return
    token = sniffio.current_async_library_cvar.set(None)
    try:
        yield
    finally:
        sniffio.current_async_library_cvar.reset(token)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    # SQLAlchemy's async engine and aiosqlite/asyncpg are asyncio-only.
    return "asyncio"


@pytest.fixture(scope="session")
async def postgres_template() -> AsyncGenerator[str | None, None]:
    """The name of a PostgreSQL database migrated to head, to copy per test (None without PostgreSQL)."""
    if not POSTGRES_URL:
        yield None
        return
    async with fresh_postgres_database(POSTGRES_URL) as url:
        db = Database(url)
        try:
            await migrate(db)
        finally:
            await db.dispose()  # CREATE DATABASE … TEMPLATE needs the template without connections
        yield str(make_url(url).database)


DIALECTS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=DIALECTS)
async def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncGenerator[str, None]:
    """An empty database of each dialect: a SQLite file under tmp_path, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'db' / 'mcphost.db'}"
        return
    if not POSTGRES_URL:
        pytest.skip(NO_POSTGRES)
    async with fresh_postgres_database(POSTGRES_URL) as url:
        yield url


@pytest.fixture(params=DIALECTS)
async def database_url(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_template: str | None
) -> AsyncGenerator[str, None]:
    """A database of each dialect of its own (PostgreSQL: already migrated; SQLite: an empty file)."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'db' / 'mcphost.db'}"
        return
    if not POSTGRES_URL:
        pytest.skip(NO_POSTGRES)
    async with fresh_postgres_database(POSTGRES_URL, template=postgres_template) as url:
        yield url


@pytest.fixture
async def shared_postgres(postgres_template: str | None) -> AsyncGenerator[str, None]:
    """A fresh migrated PostgreSQL database for several hosts at once (skipped without PostgreSQL)."""
    if not POSTGRES_URL:
        pytest.skip(NO_POSTGRES)
    async with fresh_postgres_database(POSTGRES_URL, template=postgres_template) as url:
        yield url


@pytest.fixture
async def stores(database_url: str, tmp_path: Path) -> AsyncGenerator[Stores, None]:
    """Every store over a migrated `database_url`, blobs on disk under tmp_path/data."""
    async with open_stores(database_url, tmp_path / "data") as opened:
        yield opened


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A pytest-xdist worker hands the fuzz suite's figures to the controller."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["fuzz_figures"] = dump()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """The controller adds up the figures of each pytest-xdist worker as it stops."""
    merge(getattr(node, "workeroutput", {}).get("fuzz_figures", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The fuzz suite prints its figures (tried, refused, 5xx, -32603, rows changed by refusals) per store."""
    lines = report()
    if lines:
        terminalreporter.section("fuzz figures")
        for line in lines:
            terminalreporter.write_line(line)
