"""The grant cache: read through to the runs table, trusted for a TTL, ended locally at once."""

from __future__ import annotations

from mcphost.facts._grants import GrantCache
from mcphost.models import RunStatus
from mcphost.stores import Stores
from tests.mcphost.facts._helpers import admit_run


async def test_unknown_runs_are_none_and_not_cached(stores: Stores) -> None:
    cache = GrantCache(stores.runs, ttl_s=60)
    assert await cache.get("run_unknown") is None
    run = await admit_run(stores)
    record = await cache.get(run.run_id)
    assert record is not None
    assert record.grant == run.grant
    assert record.active


async def test_a_revocation_in_the_database_is_seen_after_the_ttl_only(stores: Stores) -> None:
    run = await admit_run(stores)
    trusting, fresh = GrantCache(stores.runs, ttl_s=60), GrantCache(stores.runs, ttl_s=0)
    assert (await trusting.get(run.run_id)) is not None
    assert (await fresh.get(run.run_id)) is not None
    await stores.runs.transition(run.run_id, RunStatus.COMPLETED)
    cached = await trusting.get(run.run_id)
    assert cached is not None
    assert cached.active  # still within its TTL
    reread = await fresh.get(run.run_id)
    assert reread is not None
    assert (reread.status, reread.revoked, reread.active) == (RunStatus.COMPLETED, True, False)


async def test_an_ended_run_reads_back_revoked_whatever_the_database_says(stores: Stores) -> None:
    run = await admit_run(stores)
    cache = GrantCache(stores.runs, ttl_s=60)
    assert (await cache.get(run.run_id)) is not None
    cache.end(run.run_id)
    record = await cache.get(run.run_id)
    assert record is not None
    assert (record.revoked, record.active) == (True, False)
    assert (await stores.runs.grant(run.run_id)).active  # the database was not told
    cache.sweep()  # ended ids outlive the sweep (the database learns of the end soon after)
    again = await cache.get(run.run_id)
    assert again is not None
    assert not again.active
