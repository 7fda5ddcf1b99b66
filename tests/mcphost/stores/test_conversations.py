"""The conversations list (`stores/conversations.py`) on a real SQLite file: admission keeps one row per
conversation, and every page of the list reads one index range, never the table or a sort of it."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from mcphost.stores import open_stores
from tests.mcphost.stores.factories import admitted


@pytest.mark.parametrize(
    ("filters", "index"),
    [
        ({}, "ix_conversations_last_run_seq"),
        ({"agent_id": "a1"}, "ix_conversations_agent_id_last_run_seq"),
        ({"actor_id": "u1"}, "ix_conversations_actor_id_last_run_seq"),
        ({"prefix": "conv"}, "ix_conversations_last_run_seq"),
    ],
)
async def test_a_page_of_conversations_reads_one_index_range(
    tmp_path: Path, filters: dict[str, str], index: str
) -> None:
    database = tmp_path / "db.sqlite"
    async with open_stores(f"sqlite+aiosqlite:///{database}", tmp_path / "data") as stores:
        for n in range(3):
            await admitted(stores, f"conv-{n}", agent_id="a1")
        await admitted(stores, "conv-0", agent_id="a2")  # newest activity: first, now of agent a2
        page = await stores.conversations.list(limit=2)
        assert [c.conversation_id for c in page.items] == ["conv-0", "conv-2"]
        assert page.items[0].runs == 2
        assert page.items[0].agent_id == "a2"
        later = await stores.conversations.list(limit=2, cursor=page.next_cursor)
        assert [c.conversation_id for c in later.items] == ["conv-1"]

        seen: list[tuple[str, Any]] = []

        def capture(_c: object, _cur: object, statement: str, parameters: Any, *_: object) -> None:
            seen.append((statement, parameters))

        with stores.db.hooks.added("before_cursor_execute", capture):
            await stores.conversations.list(limit=10, cursor=page.next_cursor, **filters)
    ((statement, parameters),) = [s for s in seen if "FROM conversations" in s[0]]
    with closing(sqlite3.connect(database)) as conn:
        plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + statement, parameters)]
    assert any(index in step for step in plan), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan  # no sort: the index gives the order
