"""State: upserts, limits that leave stored data alone, key-ordered pages with prefixes, snapshots."""

from __future__ import annotations

import json

import pytest

from mcphost.errors import InvalidArgumentError, PayloadTooLargeError
from mcphost.models import RunGrant
from mcphost.protocol import STATE_SCOPES
from mcphost.stores import ScopeSnapshot, Stores
from mcphost.stores.state import MAX_VALUE_BYTES, STATE_OWNER_IDS, owner_from_ids
from tests.mcphost.stores.factories import nested_json, overwrite_json

OWNER = ("plugin:mcphost/echo/default", "default", "conv-1", "")


async def test_set_get_and_delete_a_value(stores: Stores) -> None:
    assert await stores.state.get("conversation", OWNER, "k") is None
    entry = await stores.state.set("conversation", OWNER, "k", {"n": 1, "s": "é"})
    assert entry.size == len(
        json.dumps({"n": 1, "s": "é"}, separators=(",", ":"), ensure_ascii=False).encode()
    )
    stored = await stores.state.get("conversation", OWNER, "k")
    assert stored is not None
    assert stored.value == {"n": 1, "s": "é"}
    assert stored.size == entry.size
    await stores.state.set("conversation", OWNER, "k", [1, 2])
    again = await stores.state.get("conversation", OWNER, "k")
    assert again is not None
    assert again.value == [1, 2]
    assert await stores.state.delete("conversation", OWNER, "k")
    assert not await stores.state.delete("conversation", OWNER, "k")
    assert await stores.state.get("conversation", OWNER, "k") is None


async def test_scalar_and_null_values_round_trip(stores: Stores) -> None:
    for key, value in [("s", "text"), ("i", 3), ("f", 1.5), ("b", False), ("n", None)]:
        await stores.state.set("runner", ("r",), key, value)
        entry = await stores.state.get("runner", ("r",), key)
        assert entry is not None
        assert entry.value == value


async def test_owners_and_scopes_do_not_see_each_other(stores: Stores) -> None:
    await stores.state.set("conversation", OWNER, "k", 1)
    await stores.state.set("conversation", (*OWNER[:3], "thread"), "k", 2)
    await stores.state.set("actor", OWNER, "k", 3)
    values = [
        await stores.state.get("conversation", OWNER, "k"),
        await stores.state.get("conversation", (*OWNER[:3], "thread"), "k"),
        await stores.state.get("actor", OWNER, "k"),
        await stores.state.get("actor", ("other",), "k"),
    ]
    assert [v.value if v else None for v in values] == [1, 2, 3, None]


@pytest.mark.parametrize("key", ["", "a b", "ключ", "x" * 201, "a/b", "a%"])
async def test_bad_keys_are_refused_and_change_nothing(stores: Stores, key: str) -> None:
    await stores.state.set("runner", ("r",), "good", "kept")
    with pytest.raises(InvalidArgumentError, match="Invalid key"):
        await stores.state.set("runner", ("r",), key, "v")
    page = await stores.state.list("runner", ("r",))
    assert [(e.key, e.value) for e in page.items] == [("good", "kept")]


async def test_a_value_over_256_kib_is_refused_and_the_old_value_stays(stores: Stores) -> None:
    await stores.state.set("runner", ("r",), "k", "old")
    fits = "x" * (MAX_VALUE_BYTES - 2)  # the quotes make it exactly the limit
    assert (await stores.state.set("runner", ("r",), "big", fits)).size == MAX_VALUE_BYTES
    with pytest.raises(PayloadTooLargeError, match="262144"):
        await stores.state.set("runner", ("r",), "k", "x" * (MAX_VALUE_BYTES - 1))
    entry = await stores.state.get("runner", ("r",), "k")
    assert entry is not None
    assert entry.value == "old"


async def test_values_that_are_not_json_are_refused(stores: Stores) -> None:
    with pytest.raises(InvalidArgumentError, match="plain JSON"):
        await stores.state.set("runner", ("r",), "k", {"x": {1, 2}})
    with pytest.raises(InvalidArgumentError, match="plain JSON"):
        await stores.state.set("runner", ("r",), "k", float("nan"))
    assert await stores.state.get("runner", ("r",), "k") is None


async def test_an_unknown_scope_is_refused(stores: Stores) -> None:
    with pytest.raises(InvalidArgumentError, match="Unknown state scope 'galaxy'"):
        await stores.state.set("galaxy", ("r",), "k", 1)


async def test_list_pages_in_byte_order_on_both_dialects(stores: Stores) -> None:
    keys = ["b", "A", "a", "_x", "-y", ".z", "0", ":c", "B.1", "a.b", "a:b", "a_b", "a-b", "ab"]
    for key in keys:
        await stores.state.set("runner", ("r",), key, key)
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = await stores.state.list("runner", ("r",), limit=4, cursor=cursor)
        seen += [e.key for e in page.items]
        if not page.has_more:
            assert page.next_cursor is None
            break
        cursor = page.next_cursor
    assert seen == sorted(keys)


async def test_a_prefix_selects_exactly_the_keys_that_start_with_it(stores: Stores) -> None:
    keys = ["a", "a.", "a.b", "a.c", "a.b.c", "a/", "a-", "a_", "a0", "b.a", "A.b", "a,"]
    for key in [k for k in keys if "/" not in k and "," not in k]:
        await stores.state.set("runner", ("r",), key, 1)
    page = await stores.state.list("runner", ("r",), prefix="a.")
    assert [e.key for e in page.items] == ["a.", "a.b", "a.b.c", "a.c"]
    underscore = await stores.state.list("runner", ("r",), prefix="a_")
    assert [e.key for e in underscore.items] == ["a_"]
    first = await stores.state.list("runner", ("r",), prefix="a.", limit=2)
    assert first.next_cursor is not None
    rest = await stores.state.list("runner", ("r",), prefix="a.", limit=2, cursor=first.next_cursor)
    assert [e.key for e in first.items + rest.items] == ["a.", "a.b", "a.b.c", "a.c"]
    with pytest.raises(InvalidArgumentError, match="Invalid prefix"):
        await stores.state.list("runner", ("r",), prefix="a%")


async def test_a_storage_cursor_is_refused_by_state_listing(stores: Stores) -> None:
    await stores.storage.set("plugin", ("p",), "a", b"1")
    await stores.storage.set("plugin", ("p",), "b", b"2")
    page = await stores.storage.list("plugin", ("p",), limit=1)
    assert page.next_cursor is not None
    with pytest.raises(InvalidArgumentError, match="belongs to 'storage' paging"):
        await stores.state.list("runner", ("r",), cursor=page.next_cursor)


async def test_a_snapshot_stops_at_the_first_key_that_would_pass_the_cap(stores: Stores) -> None:
    for i in range(10):
        await stores.state.set("conversation", OWNER, f"k{i}", "v" * 100)
    await stores.state.set("conversation", OWNER, "k5", "v" * 5000)  # does not fit after k0..k4
    snapshot = (await stores.state.snapshot("conversation", OWNER, max_bytes=2000)).values
    assert list(snapshot) == ["k0", "k1", "k2", "k3", "k4"]
    assert len(json.dumps(snapshot, separators=(",", ":")).encode()) <= 2000
    everything = await stores.state.snapshot("conversation", OWNER)
    assert len(everything.values) == 10


async def test_a_snapshot_is_exactly_at_most_the_cap(stores: Stores) -> None:
    for i in range(200):
        await stores.state.set("runner", ("r",), f"key.{i:04d}", {"i": i, "pad": "p" * (i % 17)})
    for cap in (2, 10, 100, 1000, 4321):
        snapshot = (await stores.state.snapshot("runner", ("r",), max_bytes=cap)).values
        size = len(json.dumps(snapshot, separators=(",", ":"), ensure_ascii=False).encode())
        assert size <= cap
        next_key = f"key.{len(snapshot):04d}"
        entry = await stores.state.get("runner", ("r",), next_key)
        assert entry is not None
        one_more = {**snapshot, next_key: entry.value}
        assert len(json.dumps(one_more, separators=(",", ":"), ensure_ascii=False).encode()) > cap
    assert await stores.state.snapshot("runner", ("nobody",)) == ScopeSnapshot(values={})


@pytest.mark.parametrize("depth", [300, 5000])
async def test_a_stored_value_too_deep_to_serve_never_fails_reads_of_other_keys(
    stores: Stores, depth: int
) -> None:
    for key in ("a", "bad", "c"):
        await stores.state.set("runner", ("r",), key, {"key": key})
    await overwrite_json(
        stores, "state", "value", nested_json(depth), scope="runner", owner='["r"]', key="bad"
    )
    bad = await stores.state.get("runner", ("r",), "bad")
    assert bad is not None
    assert (bad.unservable, bad.value) == (True, None)
    page = await stores.state.list("runner", ("r",))
    assert [(e.key, e.value, e.unservable) for e in page.items] == [
        ("a", {"key": "a"}, False),
        ("bad", None, True),
        ("c", {"key": "c"}, False),
    ]
    snapshot = await stores.state.snapshot("runner", ("r",))
    assert snapshot == ScopeSnapshot(values={"a": {"key": "a"}, "c": {"key": "c"}}, unservable=("bad",))
    assert await stores.state.delete("runner", ("r",), "bad")
    assert (await stores.state.snapshot("runner", ("r",))).unservable == ()


def test_the_owner_an_operator_names_is_the_one_a_run_uses_for_every_scope() -> None:
    grant = RunGrant(
        run_id="run_1",
        runner_id="plugin:acme/bot/default",
        plugin="acme/bot",
        binding_id="agent-a",
        conversation_id="c1",
        thread_id="t1",
        actor_id="u1",
        subject_type="ticket",
        subject_id="T-9",
        bot_id="b1",
        workspace_id="w1",
        tools=frozenset(),
        deadline_at=0.0,
        token_hash="0" * 64,
    )
    for scope in STATE_SCOPES:
        ids = {name: getattr(grant, name) for name in STATE_OWNER_IDS[scope]}
        assert owner_from_ids(scope, ids) == grant.state_scope_id(scope), scope
    assert owner_from_ids("conversation", {**ids_of(grant, "conversation"), "thread_id": None})[-1] == ""


def ids_of(grant: RunGrant, scope: str) -> dict[str, str | None]:
    return {name: getattr(grant, name) for name in STATE_OWNER_IDS[scope]}
