"""Leases (`stores/leases.py`) on both stores, between two hosts opened on one database: one holder at a
time, a holder extends its own, a lapsed lease is taken over, and release frees only one's own."""

from __future__ import annotations

from pathlib import Path

import anyio
from sqlalchemy import update

from mcphost.stores import Stores, open_stores
from mcphost.stores.leases import LeaseStore
from mcphost.stores.tables import LeaseRow


async def test_one_host_holds_a_lease_until_it_releases_or_the_lease_lapses(
    stores: Stores, database_url: str, tmp_path: Path
) -> None:
    async with open_stores(database_url, tmp_path / "other") as other:
        a, b = LeaseStore(stores.db), LeaseStore(other.db)
        assert await a.acquire("job", "host-a", term_s=600)
        assert not await b.acquire("job", "host-b", term_s=600)
        assert await a.acquire("job", "host-a", term_s=600)  # the holder extends its own
        await b.release("job", "host-b")  # not b's: nothing happens
        assert await b.holder("job") == "host-a"
        await a.release("job", "host-a")
        assert await a.holder("job") is None
        assert await b.acquire("job", "host-b", term_s=600)
        assert not await a.acquire("job", "host-a", term_s=600)
        async with stores.db.write() as session:  # b died: its lease lapses
            await session.execute(update(LeaseRow).where(LeaseRow.name == "job").values(expires_at=1.0))
        assert await a.holder("job") is None
        assert await a.acquire("job", "host-a", term_s=600)
        assert await b.holder("job") == "host-a"
        assert await b.acquire("other-job", "host-b", term_s=600)  # names are independent


async def test_of_many_hosts_racing_for_a_free_lease_exactly_one_wins(
    stores: Stores, database_url: str, tmp_path: Path
) -> None:
    async with open_stores(database_url, tmp_path / "other") as other:
        winners: list[str] = []

        async def race(store: LeaseStore, holder: str) -> None:
            if await store.acquire("job", holder, term_s=600):
                winners.append(holder)

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(race, LeaseStore((stores if i % 2 else other).db), f"host-{i}")
        assert len(winners) == 1
        assert await LeaseStore(stores.db).holder("job") == winners[0]
