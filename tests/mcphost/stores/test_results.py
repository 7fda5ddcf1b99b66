"""Run results: batched appends with host sequences, resumable reads, atomic refusal of repeats."""

from __future__ import annotations

from typing import Any

import pytest

from mcphost.errors import ConflictError, InvalidArgumentError
from mcphost.protocol import JSONObject
from mcphost.stores import Stores
from tests.mcphost.stores.factories import admitted


async def test_a_batch_is_stored_at_consecutive_sequences_and_read_back_after_n(stores: Stores) -> None:
    run = await admitted(stores)
    assert await stores.results.last_seq(run.run_id) == 0
    stored = await stores.results.append_many(
        run.run_id, [("message.delta", {"i": 1}), ("message.delta", {"i": 2})], first_seq=1
    )
    assert [(r.seq, r.payload) for r in stored] == [(1, {"i": 1}), (2, {"i": 2})]
    await stores.results.append_many(run.run_id, [("run.completed", {"done": True})], first_seq=3)
    assert await stores.results.last_seq(run.run_id) == 3
    assert [r.seq for r in await stores.results.list(run.run_id)] == [1, 2, 3]
    assert [r.type for r in await stores.results.list(run.run_id, after=2)] == ["run.completed"]
    assert [r.seq for r in await stores.results.list(run.run_id, after=0, limit=2)] == [1, 2]
    assert await stores.results.list(run.run_id, after=3) == []
    assert await stores.results.append_many(run.run_id, [], first_seq=4) == []


async def test_a_flood_of_ten_thousand_deltas_is_one_cheap_batch(stores: Stores) -> None:
    run = await admitted(stores)
    items = [("message.delta", {"data": {"chunk": {"content": f"token {i} "}}}) for i in range(10_000)]
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(args[2])

    with stores.db.hooks.added("before_cursor_execute", count):
        await stores.results.append_many(run.run_id, items, first_seq=1)
    # Batched: a few multi-row statements (plus BEGIN / COMMIT), never a statement per result.
    assert len(statements) <= 25, f"{len(statements)} statements for 10,000 results"
    assert await stores.results.last_seq(run.run_id) == 10_000
    page = await stores.results.list(run.run_id, after=9_000, limit=1000)
    assert page[0].seq == 9_001
    assert page[-1].seq == 10_000


async def test_a_batch_that_repeats_a_sequence_writes_nothing(stores: Stores) -> None:
    run = await admitted(stores)
    await stores.results.append_many(run.run_id, [("a.b", {})], first_seq=1)
    with pytest.raises(ConflictError, match="already has results"):
        await stores.results.append_many(run.run_id, [("a.b", {"new": 1}), ("a.b", {"new": 2})], first_seq=1)
    assert [r.payload for r in await stores.results.list(run.run_id)] == [{}]


async def test_results_for_an_unknown_run_are_refused(stores: Stores) -> None:
    with pytest.raises(ConflictError, match="does not exist"):
        await stores.results.append_many("run_nope", [("a.b", {})], first_seq=1)


async def test_list_limits_are_validated(stores: Stores) -> None:
    with pytest.raises(InvalidArgumentError, match="between 1 and 10000"):
        await stores.results.list("run_x", limit=10_001)
    with pytest.raises(InvalidArgumentError, match="between 1 and 10000"):
        await stores.results.list("run_x", limit=0)


async def test_the_same_batch_stored_again_is_a_no_op(stores: Stores) -> None:
    # What a retry after a commit whose acknowledgement was lost does.
    run = await admitted(stores)
    items: list[tuple[str, JSONObject]] = [("a.b", {"n": 1, "t": 1796282518.5033848}), ("c.d", {"n": 2})]
    first = await stores.results.append_many(run.run_id, items, first_seq=1)
    again = await stores.results.append_many(run.run_id, items, first_seq=1)
    assert [(r.seq, r.type, r.payload) for r in again] == [(r.seq, r.type, r.payload) for r in first]
    assert len(await stores.results.list(run.run_id)) == 2
