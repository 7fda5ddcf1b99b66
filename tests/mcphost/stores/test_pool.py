"""PostgreSQL's connection pool is fixed (`[host] database_pool_size`): concurrent transactions share the
kept connections and wait for one when all are busy, instead of opening connections the pool closes
again (each one a backend start on the server and the driver's setup on the host)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import text

from mcphost.app import open_database
from mcphost.stores import open_stores
from tests.mcphost.hostkit import host_settings


async def test_concurrent_transactions_share_the_pools_connections_and_never_open_more(
    database_url: str, tmp_path: Path
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite has no server connections to keep")
    async with open_stores(database_url, tmp_path / "data", pool_size=2) as stores:
        engine = stores.db.engine
        backends: set[int] = set()

        async def transaction() -> None:
            async with engine.connect() as conn:
                backends.add(int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()))
                await conn.execute(text("SELECT pg_sleep(0.01)"))

        async with anyio.create_task_group() as tg:
            for _ in range(40):
                tg.start_soon(transaction)
        assert len(backends) <= 2, f"{len(backends)} backends served 40 transactions on a pool of 2"

        async with engine.connect(), engine.connect():
            with anyio.move_on_after(0.5) as waited:
                async with engine.connect():
                    pass
            assert waited.cancelled_caught, "a third connection was opened past the pool's two"


async def test_the_host_keeps_the_configured_number_of_connections(database_url: str, tmp_path: Path) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite has no server connections to keep")
    settings = host_settings(database_url, tmp_path / "data", database_pool_size=5)
    async with open_database(settings) as stores:
        pool: Any = stores.db.engine.pool
        assert pool.size() == 5
        assert pool._max_overflow == 0  # none past them (a white-box read: the pool tells it no other way)
