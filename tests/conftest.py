"""Shared fixtures: the anyio backend, a SQLite database file per test, and PostgreSQL when configured."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    # SQLAlchemy's async engine and aiosqlite/asyncpg are asyncio-only.
    return "asyncio"


POSTGRES_URL = os.environ.get("MCPHOST_TEST_POSTGRES_URL")
