"""Full-text search over the transcript: scoped to one conversation thread, ranked, with snippets and cursors."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Connection

from mcphost.errors import InvalidArgumentError
from mcphost.stores import Database, Stores, open_stores
from mcphost.stores.engine import alembic_config
from mcphost.stores.transcript import TranscriptDraft


async def test_search_finds_items_of_its_own_thread_only(stores: Stores) -> None:
    t = stores.transcript
    await t.append(conversation_id="c1", role="user", content="where is the lighthouse")
    await t.append(conversation_id="c1", thread_id="th", role="user", content="lighthouse in a thread")
    await t.append(conversation_id="c2", role="user", content="another lighthouse")
    await t.append(conversation_id="c1 th", role="user", content="lighthouse in a look-alike conversation")
    main = await t.search("c1", query="lighthouse")
    assert [h.record.content for h in main] == ["where is the lighthouse"]
    thread = await t.search("c1", "th", query="lighthouse")
    assert [h.record.content for h in thread] == ["lighthouse in a thread"]
    assert await t.search("c3", query="lighthouse") == []


async def test_more_relevant_items_rank_first_then_newer_ones(stores: Stores) -> None:
    t = stores.transcript
    await t.append(conversation_id="c", role="user", content="the invoice was paid")
    await t.append(conversation_id="c", role="assistant", content="weather is fine today")
    await t.append(conversation_id="c", role="user", content="invoice number and invoice date of the invoice")
    await t.append(conversation_id="c", role="user", content="the invoice was paid")
    hits = await t.search("c", query="invoice")
    assert [h.record.content for h in hits] == [
        "invoice number and invoice date of the invoice",
        "the invoice was paid",
        "the invoice was paid",
    ]
    assert hits[1].record.seq > hits[2].record.seq
    assert hits[0].score > hits[1].score > 0


async def test_any_word_matches_and_more_words_rank_higher(stores: Stores) -> None:
    t = stores.transcript
    await t.append(conversation_id="c", role="user", content="apple")
    await t.append(conversation_id="c", role="user", content="apple pie recipe")
    await t.append(conversation_id="c", role="user", content="pie chart")
    hits = await t.search("c", query="Apple PIE")
    assert hits[0].record.content == "apple pie recipe"
    assert {h.record.content for h in hits} == {"apple", "apple pie recipe", "pie chart"}


async def test_roles_limit_and_stemming(stores: Stores) -> None:
    t = stores.transcript
    await t.append(conversation_id="c", role="user", content="I was running late")
    await t.append(conversation_id="c", role="assistant", content="runs are scheduled daily")
    await t.append(conversation_id="c", role="assistant", content="the run finished")
    assert len(await t.search("c", query="run")) == 3
    assert [h.record.role for h in await t.search("c", query="run", roles=["user"])] == ["user"]
    assert len(await t.search("c", query="run", limit=2)) == 2
    with pytest.raises(InvalidArgumentError, match="limit"):
        await t.search("c", query="run", limit=51)


async def test_a_hit_has_a_snippet_around_the_match_and_a_cursor_to_page_from(stores: Stores) -> None:
    t = stores.transcript
    filler = " ".join(f"word{i}" for i in range(200))
    await t.append(conversation_id="c", role="user", content="before")
    record = await t.append(
        conversation_id="c", role="user", content=f"{filler} the Zeppelin landed. {filler}"
    )
    await t.append(conversation_id="c", role="user", content="after")
    (hit,) = await t.search("c", query="zeppelin")
    assert hit.record.cursor == record.cursor
    assert "the **Zeppelin** landed." in hit.snippet
    assert hit.snippet.startswith("…")
    assert hit.snippet.endswith("…")
    assert len(hit.snippet) < 320
    older = await t.page("c", before=hit.record.cursor, limit=1)
    newer = await t.page("c", after=hit.record.cursor, limit=1)
    assert [i.content for i in older.items + newer.items] == ["before", "after"]


async def test_a_query_without_words_is_invalid(stores: Stores) -> None:
    with pytest.raises(InvalidArgumentError):
        await stores.transcript.search("c", query="?? !!")


async def test_operators_in_a_query_are_plain_words(stores: Stores) -> None:
    t = stores.transcript
    await t.append(conversation_id="c", role="user", content="NEAR the OR gate")
    for query in ['a" OR "b', "content : x", "NEAR(a b)", "x*", "!a & b | c", "scope:sdead"]:
        await t.search("c", query=query)
    assert len(await t.search("c", query="gate OR")) == 1


async def test_only_the_first_100k_characters_are_indexed(stores: Stores) -> None:
    t = stores.transcript
    await t.append(conversation_id="c", role="user", content="early " + "x " * 60_000 + "tailword")
    assert len(await t.search("c", query="early")) == 1
    assert await t.search("c", query="tailword") == []


async def test_bulk_appended_items_are_searchable(stores: Stores) -> None:
    now = time.time()
    drafts = [
        TranscriptDraft(conversation_id=f"c{i % 3}", role="user", content=f"bulk message {i}", created_at=now)
        for i in range(30)
    ]
    assert await stores.transcript.bulk_append(drafts) == 30
    await stores.transcript.optimize_search()
    assert len(await stores.transcript.search("c1", query="bulk", limit=50)) == 10


async def migrate_to(database_url: str, revision: str) -> None:
    db = Database(database_url)
    try:
        async with db.write() as session:
            connection = await session.connection()

            def go(sync: Connection) -> None:
                cfg = alembic_config(database_url)
                cfg.attributes["connection"] = sync
                if revision == "head":
                    command.upgrade(cfg, revision)
                else:
                    command.downgrade(cfg, revision)

            await connection.run_sync(go)
    finally:
        await db.dispose()


async def test_items_stored_before_the_index_existed_are_indexed_by_the_migration(
    database_url: str, tmp_path: Path
) -> None:
    async with open_stores(database_url, tmp_path):
        pass
    await migrate_to(database_url, "0001")
    async with open_stores(database_url, tmp_path, migrate=False) as stores:
        await stores.transcript.append(conversation_id="c", role="user", content="an old quokka sighting")
    await migrate_to(database_url, "head")
    async with open_stores(database_url, tmp_path, migrate=False) as stores:
        hits = await stores.transcript.search("c", query="quokka")
    assert [h.record.content for h in hits] == ["an old quokka sighting"]
