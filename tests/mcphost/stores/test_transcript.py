"""The transcript: idempotent appends, keyset pages, latest_cursor and has_before."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from mcphost.errors import InvalidArgumentError
from mcphost.protocol import ArtifactRef, MediaContent, TextContent
from mcphost.stores import Stores, TranscriptRecord, open_stores


def _contents(records: list[TranscriptRecord]) -> list[str]:
    return [r.content for r in records]


async def test_an_item_keeps_its_contents_artifacts_and_ids(stores: Stores) -> None:
    ref = ArtifactRef(artifact_id="art_1", name="a.png", mime_type="image/png", size=3)
    record = await stores.transcript.append(
        conversation_id="c1",
        thread_id="t1",
        role="user",
        content="look",
        contents=[
            TextContent(text="look"),
            {"type": "image", "artifact_id": "art_1", "mime_type": "image/png"},
        ],
        artifacts=[ref],
        event_id="evt-1",
        run_id="run-1",
        actor_id="u1",
    )
    (stored,) = (await stores.transcript.page("c1", "t1")).items
    assert stored == record
    assert stored.artifacts == [ref]
    assert stored.contents == [
        {"type": "text", "text": "look"},
        MediaContent(type="image", artifact_id="art_1", mime_type="image/png").model_dump(mode="json"),
    ]
    assert (stored.event_id, stored.run_id, stored.actor_id, stored.thread_id) == (
        "evt-1",
        "run-1",
        "u1",
        "t1",
    )
    assert stored.item_id.startswith("itm_")


async def test_invalid_contents_are_refused_before_anything_is_stored(stores: Stores) -> None:
    with pytest.raises(ValueError, match="type"):
        await stores.transcript.append(conversation_id="c1", role="user", contents=[{"type": "video"}])
    assert (await stores.transcript.page("c1")).items == []


async def test_an_item_id_stored_twice_is_one_row(stores: Stores) -> None:
    first = await stores.transcript.append(conversation_id="c1", role="user", content="a", item_id="itm_x")
    again = await stores.transcript.append(conversation_id="c1", role="user", content="b", item_id="itm_x")
    assert again == first
    assert _contents((await stores.transcript.page("c1")).items) == ["a"]


async def test_pages_go_newest_first_before_a_cursor_and_oldest_first_after_it(stores: Stores) -> None:
    for i in range(1, 6):
        await stores.transcript.append(
            conversation_id="c1", role="user" if i % 2 else "assistant", content=f"m{i}"
        )
    latest, _ = await stores.transcript.head("c1")
    assert latest is not None
    older = await stores.transcript.page("c1", before=latest, limit=2)
    assert _contents(older.items) == ["m4", "m3"]
    assert older.has_more
    assert older.next_cursor is not None
    oldest = await stores.transcript.page("c1", before=older.next_cursor, limit=2)
    assert _contents(oldest.items) == ["m2", "m1"]
    assert not oldest.has_more
    assert oldest.next_cursor is None
    assert oldest.prev_cursor is not None
    forward = await stores.transcript.page("c1", after=oldest.prev_cursor, limit=10)
    assert _contents(forward.items) == ["m3", "m4", "m5"]
    assert not forward.has_more


async def test_head_is_the_newest_cursor_of_the_thread_and_whether_it_has_older_items(
    stores: Stores,
) -> None:
    assert await stores.transcript.head("c1") == (None, False)
    first = await stores.transcript.append(conversation_id="c1", role="user", content="main")
    in_thread = await stores.transcript.append(conversation_id="c1", thread_id="t", role="user", content="t")
    other = await stores.transcript.append(conversation_id="c2", role="user", content="x")
    assert await stores.transcript.head("c1") == (first.cursor, False)
    newest = await stores.transcript.append(conversation_id="c1", role="assistant", content="reply")
    assert await stores.transcript.head("c1") == (newest.cursor, True)
    assert await stores.transcript.head("c1", "t") == (in_thread.cursor, False)
    assert await stores.transcript.head("c2") == (other.cursor, False)
    assert await stores.transcript.head("c3") == (None, False)


async def test_an_events_cursor_is_refused_by_transcript_paging(stores: Stores) -> None:
    event, _ = await stores.events.append(
        event_id="e", event_type="a.b", kind="system", source="system", payload={}
    )
    with pytest.raises(InvalidArgumentError, match="belongs to 'events' paging"):
        await stores.transcript.page("c1", before=event.cursor)
    with pytest.raises(InvalidArgumentError, match="belongs to 'events' paging"):
        await stores.transcript.page("c1", after=event.cursor)


async def test_for_run_lists_the_items_of_one_run_oldest_first(stores: Stores) -> None:
    for i, run_id in enumerate(["run-a", "run-b", "run-a"]):
        await stores.transcript.append(
            conversation_id=f"c{i}", role="assistant", content=f"m{i}", run_id=run_id
        )
    assert _contents(await stores.transcript.for_run("run-a")) == ["m0", "m2"]
    assert _contents(await stores.transcript.for_run("run-a", limit=1)) == ["m0"]


async def test_thread_at_names_the_thread_a_cursor_points_into(stores: Stores) -> None:
    main = await stores.transcript.append(conversation_id="c1", role="user", content="a")
    threaded = await stores.transcript.append(conversation_id="c1", thread_id="t1", role="user", content="b")
    assert await stores.transcript.thread_at(main.cursor) == ("c1", None)
    assert await stores.transcript.thread_at(threaded.cursor) == ("c1", "t1")
    assert await stores.transcript.thread_at(stores.cursors.encode("transcript", threaded.seq + 100)) is None
    with pytest.raises(InvalidArgumentError):
        await stores.transcript.thread_at(stores.cursors.encode("events", main.seq))


async def test_holds_message_finds_items_and_events_of_the_conversation_only(stores: Stores) -> None:
    item = await stores.transcript.append(conversation_id="c1", role="user", content="a", event_id="evt-1")
    await stores.events.append(
        event_id="evt-1",
        event_type="message.received",
        kind="inbound",
        conversation_id="c1",
        source="api",
        payload={},
    )
    assert await stores.transcript.holds_message("c1", item.item_id)
    assert await stores.transcript.holds_message("c1", "evt-1")
    assert not await stores.transcript.holds_message("c2", item.item_id)
    assert not await stores.transcript.holds_message("c2", "evt-1")
    assert not await stores.transcript.holds_message("c1", "itm_unknown")


async def test_holds_message_reads_by_unique_key_not_the_conversations_rows(tmp_path: Path) -> None:
    """An action's `message_id` check costs two index lookups whatever the conversation's length."""
    async with open_stores(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}", tmp_path / "data") as stores:
        seen: list[tuple[str, Any]] = []

        def capture(_c: object, _cur: object, statement: str, parameters: Any, *_: object) -> None:
            seen.append((statement, parameters))

        with stores.db.hooks.added("before_cursor_execute", capture):
            await stores.transcript.holds_message("c1", "itm_x")
        ((statement, parameters),) = [s for s in seen if "transcript" in s[0]]
        with closing(sqlite3.connect(tmp_path / "db.sqlite")) as conn:
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + statement, parameters)]
    assert not [step for step in plan if step.startswith("SCAN") and step != "SCAN CONSTANT ROW"], plan
    assert sum("USING INDEX" in step for step in plan) == 2, plan
