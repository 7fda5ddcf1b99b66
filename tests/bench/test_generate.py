"""`bench/_generate.py` fills a migrated PostgreSQL database and leaves its schema exactly as it found it.

The generator drops the big tables' secondary indexes and foreign keys for the fill and builds them
after; a definition it failed to restore would make every plan of `bench.pg_scale` (and
`test_query_plans.py`) a plan of another schema. The rows must be the plan's: the counts, one
`conversations` row per conversation that had a run, as admission would have left it.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench._generate import LONG, Plan, actor_of, driver_dsn, generate
from bench._pgconn import connect_pg

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]

SCHEMA_SQL = (
    "SELECT 'index', tablename, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
    "UNION ALL SELECT 'constraint', conrelid::regclass::text, conname || ' ' || pg_get_constraintdef(oid) "
    "FROM pg_constraint WHERE connamespace = current_schema()::regnamespace ORDER BY 1, 2, 3"
)


async def _fetch(url: str, query: str) -> list[tuple[Any, ...]]:
    conn = await connect_pg(driver_dsn(url))
    try:
        return [tuple(row) for row in await conn.fetch(query)]
    finally:
        await conn.close()


async def test_the_fill_restores_every_index_and_constraint_and_writes_the_plans_rows(
    shared_postgres: str,
) -> None:
    before = await _fetch(shared_postgres, SCHEMA_SQL)
    assert any("ix_transcript_search_vector" in row[2] for row in before)
    assert any("fk_audit_run_id_runs" in row[2] for row in before)
    plan = Plan.at(1 / 20_000)

    seconds = await generate(shared_postgres, plan)

    assert await _fetch(shared_postgres, SCHEMA_SQL) == before
    assert {"transcript", "events", "runs", "audit", "index ix_transcript_search_vector"} <= set(seconds)
    counts = await _fetch(
        shared_postgres,
        "SELECT (SELECT count(*) FROM transcript), (SELECT count(*) FROM events), "
        "(SELECT count(*) FROM runs), (SELECT count(*) FROM audit), "
        "(SELECT count(DISTINCT conversation_id) FROM runs), (SELECT count(*) FROM conversations)",
    )
    assert counts[0][:4] == (plan.transcript, plan.events, plan.runs, plan.audit)
    assert counts[0][4] == counts[0][5] > 1
    # conv-long's row is what admission leaves: its newest run, its run count, its actor.
    long_row = await _fetch(
        shared_postgres,
        f"SELECT c.last_run_id, c.runs, c.actor_id, c.last_run_seq FROM conversations AS c WHERE c.conversation_id = '{LONG}'",
    )
    newest = await _fetch(
        shared_postgres,
        f"SELECT run_id, count(*) OVER (), created_seq FROM runs WHERE conversation_id = '{LONG}' "
        "ORDER BY created_seq DESC LIMIT 1",
    )
    assert long_row == [(newest[0][0], newest[0][1], actor_of(LONG), newest[0][2])]
    # A row's numbers are the plan's: run i is `run_g<i>`, created at the plan's time for i.
    last = await _fetch(
        shared_postgres, "SELECT run_id, created_at, status FROM runs ORDER BY created_seq DESC LIMIT 1"
    )
    assert last == [
        (plan.run_id(plan.runs - 1), pytest.approx(plan.created_at(plan.runs, plan.runs - 1)), "queued")
    ]


async def test_a_conversations_words_come_from_the_whole_vocabulary(shared_postgres: str) -> None:
    # Every 20th transcript row is conv-long's: a word formula linear in the row number gave it 250 of
    # the 5,000 words, each matching 1 item in 250 there instead of 1 in 2,500.
    small = Plan.at(1 / 20_000)
    plan = Plan(small.scale, 200, 40_000, 10, 10, small.start)
    await generate(shared_postgres, plan)
    rows = await _fetch(
        shared_postgres,
        "SELECT count(DISTINCT split_part(split_part(content, ' about ', 2), ' ', 1)), count(*) "
        f"FROM transcript WHERE conversation_id = '{LONG}'",
    )
    words, items = rows[0]
    assert items == plan.transcript // 20
    assert words > 1_500, words  # 2,000 draws from 5,000 words: about 1,660 distinct
