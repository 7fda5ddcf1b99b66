"""The audit log: per-run numbering without gaps, even under concurrent appends."""

from __future__ import annotations

import anyio
import pytest

from mcphost.errors import InvalidArgumentError
from mcphost.stores import AuditEntry, Stores
from tests.mcphost.stores.factories import admitted


def _entry(run_id: str, tool: str = "history_page") -> AuditEntry:
    return AuditEntry(
        run_id=run_id,
        tool=tool,
        args_digest="0" * 64,
        bytes_in=10,
        bytes_out=200,
        outcome="ok",
        duration_ms=1.5,
    )


async def test_entries_are_numbered_per_run_and_listed_after_n(stores: Stores) -> None:
    a, b = await admitted(stores), await admitted(stores, "c2")
    first = await stores.audit.append(_entry(a.run_id))
    await stores.audit.append(_entry(b.run_id))
    refused = await stores.audit.append(
        _entry(a.run_id, "state_set").model_copy(update={"outcome": "refused", "code": "unauthorized"})
    )
    assert (first.seq, refused.seq) == (1, 2)
    assert refused.code == "unauthorized"
    assert refused.outcome == "refused"
    assert [r.tool for r in await stores.audit.list(a.run_id)] == ["history_page", "state_set"]
    assert [r.seq for r in await stores.audit.list(a.run_id, after=1)] == [2]
    assert [r.seq for r in await stores.audit.list(b.run_id)] == [1]
    assert await stores.audit.list(a.run_id, after=0, limit=1) == [first]


async def test_thirty_concurrent_appends_for_one_run_get_thirty_distinct_sequences(stores: Stores) -> None:
    run = await admitted(stores)
    async with anyio.create_task_group() as tg:
        for i in range(30):
            tg.start_soon(stores.audit.append, _entry(run.run_id, f"tool_{i}"))
    records = await stores.audit.list(run.run_id, limit=100)
    assert [r.seq for r in records] == list(range(1, 31))
    assert len({r.tool for r in records}) == 30


async def test_list_limits_are_validated(stores: Stores) -> None:
    with pytest.raises(InvalidArgumentError):
        await stores.audit.list("run_x", limit=0)


async def test_usage_counts_calls_that_ran_and_bytes_of_successful_ones(stores: Stores) -> None:
    run, other = await admitted(stores), await admitted(stores, "c2")
    assert await stores.audit.usage(run.run_id) == (0, 0)
    await stores.audit.append(_entry(run.run_id))
    await stores.audit.append(_entry(run.run_id).model_copy(update={"outcome": "error", "code": "not_found"}))
    await stores.audit.append(
        _entry(run.run_id).model_copy(update={"outcome": "refused", "code": "rate_limited"})
    )
    await stores.audit.append(_entry(other.run_id))
    assert await stores.audit.usage(run.run_id) == (2, 200)


async def test_append_many_numbers_a_batch_per_run_after_what_is_stored(stores: Stores) -> None:
    a, b = await admitted(stores), await admitted(stores, "c2")
    await stores.audit.append(_entry(a.run_id, "first"))
    batch = [_entry(a.run_id, "a2"), _entry(b.run_id, "b1"), _entry(a.run_id, "a3")]
    records = await stores.audit.append_many(batch)
    assert [(r.run_id, r.seq, r.tool) for r in records] == [
        (a.run_id, 2, "a2"),
        (b.run_id, 1, "b1"),
        (a.run_id, 3, "a3"),
    ]
    assert [r.tool for r in await stores.audit.list(a.run_id)] == ["first", "a2", "a3"]
    assert await stores.audit.append_many([]) == []


async def test_concurrent_batches_and_single_appends_never_collide(stores: Stores) -> None:
    run = await admitted(stores)
    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(stores.audit.append_many, [_entry(run.run_id, f"batch_{i}_{j}") for j in range(3)])
            tg.start_soon(stores.audit.append, _entry(run.run_id, f"single_{i}"))
    records = await stores.audit.list(run.run_id, limit=100)
    assert [r.seq for r in records] == list(range(1, 41))
