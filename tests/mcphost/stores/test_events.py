"""The event log: idempotent appends, keyset pages in both directions, scoping and type filters."""

from __future__ import annotations

import anyio
import pytest
from sqlalchemy import func, select

from mcphost.errors import InvalidArgumentError, NotFoundError
from mcphost.stores import StoredEvent, Stores
from mcphost.stores.events import EventKind
from mcphost.stores.tables import EventRow


async def _append(
    stores: Stores,
    event_id: str,
    *,
    conversation_id: str | None = "c1",
    thread_id: str | None = None,
    event_type: str = "message.received",
    kind: EventKind = "inbound",
) -> StoredEvent:
    event, _ = await stores.events.append(
        event_id=event_id,
        event_type=event_type,
        kind=kind,
        source="api",
        payload={"n": event_id},
        conversation_id=conversation_id,
        thread_id=thread_id,
    )
    return event


def _ids(events: list[StoredEvent]) -> list[str]:
    return [e.event_id for e in events]


async def test_an_event_appended_twice_is_stored_once_and_the_second_append_returns_it(
    stores: Stores,
) -> None:
    first, created = await stores.events.append(
        event_id="evt-1",
        event_type="message.received",
        kind="inbound",
        source="api",
        payload={"text": "hi"},
        conversation_id="c1",
        thread_id="t1",
        run_id="run-1",
        actor_id="u1",
    )
    again, created_again = await stores.events.append(
        event_id="evt-1", event_type="other.type", kind="system", source="system", payload={}
    )
    assert created
    assert not created_again
    assert again == first
    assert first.conversation_id == "c1"
    assert first.thread_id == "t1"
    assert first.payload == {"text": "hi"}
    assert await stores.events.get("evt-1") == first


async def test_no_conversation_reads_back_as_none(stores: Stores) -> None:
    event = await _append(stores, "e", conversation_id=None)
    assert event.conversation_id is None
    assert event.thread_id is None
    assert _ids((await stores.events.page(None)).items) == ["e"]


async def test_twenty_concurrent_appends_of_one_event_store_one_row(stores: Stores) -> None:
    outcomes: list[tuple[StoredEvent, bool]] = []

    async def append() -> None:
        outcomes.append(
            await stores.events.append(
                event_id="evt-race", event_type="message.received", kind="inbound", source="api", payload={}
            )
        )

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(append)
    assert sum(created for _, created in outcomes) == 1
    assert len({event.seq for event, _ in outcomes}) == 1
    async with stores.db.read() as session:
        count = (
            await session.execute(
                select(func.count()).select_from(EventRow).where(EventRow.event_id == "evt-race")
            )
        ).scalar_one()
    assert count == 1


async def test_getting_an_unknown_event_raises_not_found(stores: Stores) -> None:
    with pytest.raises(NotFoundError, match="'nope'"):
        await stores.events.get("nope")


async def test_pages_walk_newest_first_and_back_oldest_first_with_exact_has_more(stores: Stores) -> None:
    for i in range(1, 8):
        await _append(stores, f"e{i}")
    first = await stores.events.page("c1", limit=3)
    assert _ids(first.items) == ["e7", "e6", "e5"]
    assert first.has_more
    assert first.next_cursor
    assert first.prev_cursor is None
    second = await stores.events.page("c1", before=first.next_cursor, limit=3)
    assert _ids(second.items) == ["e4", "e3", "e2"]
    assert second.has_more
    assert second.next_cursor
    last = await stores.events.page("c1", before=second.next_cursor, limit=3)
    assert _ids(last.items) == ["e1"]
    assert not last.has_more
    assert last.next_cursor is None
    assert last.prev_cursor is not None
    back = await stores.events.page("c1", after=last.prev_cursor, limit=3)
    assert _ids(back.items) == ["e2", "e3", "e4"]
    assert back.has_more
    assert back.next_cursor is not None
    rest = await stores.events.page("c1", after=back.next_cursor, limit=3)
    assert _ids(rest.items) == ["e5", "e6", "e7"]
    assert not rest.has_more
    assert rest.next_cursor is None


async def test_a_page_that_ends_exactly_at_the_limit_has_no_more(stores: Stores) -> None:
    for i in range(1, 7):
        await _append(stores, f"e{i}")
    first = await stores.events.page("c1", limit=3)
    assert first.next_cursor is not None
    second = await stores.events.page("c1", before=first.next_cursor, limit=3)
    assert _ids(second.items) == ["e3", "e2", "e1"]
    assert not second.has_more
    assert second.next_cursor is None
    everything = await stores.events.page("c1", limit=6)
    assert len(everything.items) == 6
    assert not everything.has_more


async def test_an_item_cursor_pages_strictly_before_and_after_it(stores: Stores) -> None:
    events = [await _append(stores, f"e{i}") for i in range(1, 6)]
    assert _ids((await stores.events.page("c1", before=events[2].cursor)).items) == ["e2", "e1"]
    assert _ids((await stores.events.page("c1", after=events[2].cursor)).items) == ["e4", "e5"]
    assert (await stores.events.page("c1", after=events[-1].cursor)).items == []


async def test_pages_are_scoped_to_one_conversation_thread(stores: Stores) -> None:
    await _append(stores, "main-1")
    await _append(stores, "thread-1", thread_id="t1")
    await _append(stores, "other-1", conversation_id="c2")
    await _append(stores, "main-2")
    assert _ids((await stores.events.page("c1")).items) == ["main-2", "main-1"]
    assert _ids((await stores.events.page("c1", "t1")).items) == ["thread-1"]
    assert _ids((await stores.events.page("c2")).items) == ["other-1"]
    assert (await stores.events.page("c3")).items == []


async def test_type_filters_page_through_the_matching_events_only(stores: Stores) -> None:
    for i in range(1, 13):
        event_type = "tool.call.started" if i % 4 == 0 else "message.received"
        await _append(stores, f"e{i}", event_type=event_type, kind="telemetry" if i % 4 == 0 else "inbound")
    await _append(stores, "rare", event_type="schedule.triggered")
    tools = await stores.events.page("c1", limit=2, event_types=["tool.call.started"])
    assert _ids(tools.items) == ["e12", "e8"]
    assert tools.has_more
    assert tools.next_cursor
    more = await stores.events.page(
        "c1", before=tools.next_cursor, limit=2, event_types=["tool.call.started"]
    )
    assert _ids(more.items) == ["e4"]
    assert not more.has_more
    mixed = await stores.events.page("c1", limit=3, event_types=["schedule.triggered", "tool.call.started"])
    assert _ids(mixed.items) == ["rare", "e12", "e8"]
    assert mixed.has_more
    assert mixed.next_cursor is not None
    after = await stores.events.page(
        "c1",
        after=stores.cursors.encode("events", 0),
        limit=5,
        event_types=["tool.call.started", "schedule.triggered"],
    )
    assert _ids(after.items) == ["e4", "e8", "e12", "rare"]
    assert not after.has_more


async def test_type_filters_must_name_between_one_and_twenty_types(stores: Stores) -> None:
    with pytest.raises(InvalidArgumentError, match="1 to 20"):
        await stores.events.page("c1", event_types=[])
    with pytest.raises(InvalidArgumentError, match="1 to 20"):
        await stores.events.page("c1", event_types=[f"t.{i}" for i in range(21)])


async def test_a_transcript_cursor_or_an_edited_cursor_is_refused(stores: Stores) -> None:
    record = await stores.transcript.append(conversation_id="c1", role="user", content="hi")
    with pytest.raises(InvalidArgumentError, match="belongs to 'transcript' paging"):
        await stores.events.page("c1", before=record.cursor)
    event = await _append(stores, "e1")
    tampered = event.cursor[:-2] + ("AA" if not event.cursor.endswith("AA") else "BB")
    with pytest.raises(InvalidArgumentError, match="Malformed events cursor"):
        await stores.events.page("c1", after=tampered)


@pytest.mark.parametrize("limit", [0, 101])
async def test_limits_are_validated(stores: Stores, limit: int) -> None:
    with pytest.raises(InvalidArgumentError, match="limit"):
        await stores.events.page("c1", limit=limit)


async def test_for_run_lists_the_events_of_one_run_oldest_first(stores: Stores) -> None:
    for i, run_id in enumerate(["run-a", "run-b", "run-a", None, "run-a"]):
        await stores.events.append(
            event_id=f"e{i}", event_type="a.b", kind="system", source="system", payload={}, run_id=run_id
        )
    assert _ids(await stores.events.for_run("run-a")) == ["e0", "e2", "e4"]
    assert _ids(await stores.events.for_run("run-a", limit=2)) == ["e0", "e2"]
    assert await stores.events.for_run("run-c") == []


async def test_thread_at_names_the_conversation_thread_a_cursor_points_into(stores: Stores) -> None:
    main = await _append(stores, "e1")
    threaded = await _append(stores, "e2", thread_id="t1")
    loose = await _append(stores, "e3", conversation_id=None)
    assert await stores.events.thread_at(main.cursor) == ("c1", None)
    assert await stores.events.thread_at(threaded.cursor) == ("c1", "t1")
    assert await stores.events.thread_at(loose.cursor) == (None, None)
    assert await stores.events.thread_at(stores.cursors.encode("events", loose.seq + 100)) is None
    with pytest.raises(InvalidArgumentError):
        await stores.events.thread_at(stores.cursors.encode("transcript", main.seq))
