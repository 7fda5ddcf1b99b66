"""Retention deletes (`stores/retention.py`) on both stores: what an active run references survives,
a dry run deletes nothing, and the rows of ended runs older than the cutoff go."""

from __future__ import annotations

import time

from sqlalchemy import func, insert, select

from mcphost.models import RunStatus
from mcphost.stores import Stores
from mcphost.stores.retention import BATCH, KINDS, RetentionStore
from mcphost.stores.tables import AuditRow, EventRow, RunResultRow, TranscriptRow
from tests.mcphost.stores.factories import admitted

TABLES = {"run_results": RunResultRow, "audit": AuditRow, "events": EventRow, "transcript": TranscriptRow}


async def _old_rows(stores: Stores, run_id: str, event_id: str, n: int) -> None:
    async with stores.db.write() as session:
        await session.execute(
            insert(RunResultRow),
            [
                {"run_id": run_id, "seq": i, "type": "message.completed", "payload": {}, "created_at": 1.0}
                for i in range(n)
            ],
        )
        await session.execute(
            insert(AuditRow),
            [
                {"run_id": run_id, "seq": i, "tool": "t", "args_digest": "d", "bytes_in": 0, "bytes_out": 0,
                 "outcome": "ok", "code": None, "duration_ms": 1.0, "created_at": 1.0}
                for i in range(n)
            ],
        )  # fmt: skip
        await session.execute(
            insert(EventRow),
            [
                {"event_id": f"{event_id}-{i}" if i else event_id, "event_type": "message.received",
                 "kind": "inbound", "conversation_id": "c", "thread_id": "", "run_id": run_id, "actor_id": None,
                 "source": "api", "payload": {}, "created_at": 1.0}
                for i in range(n)
            ],
        )  # fmt: skip
        await session.execute(
            insert(TranscriptRow),
            [
                {"item_id": f"{run_id}-{i}", "conversation_id": "c", "thread_id": "", "role": "user",
                 "content": "x", "contents": [], "artifacts": [], "event_id": None, "run_id": run_id,
                 "actor_id": None, "created_at": 1.0}
                for i in range(n)
            ],
        )  # fmt: skip


async def _counts(stores: Stores, run_id: str) -> dict[str, int]:
    async with stores.db.read() as session:
        return {
            kind: int(
                await session.scalar(select(func.count()).select_from(t).where(t.run_id == run_id)) or 0
            )
            for kind, t in TABLES.items()
        }


async def test_old_rows_of_ended_runs_go_in_batches_and_an_active_runs_rows_stay(stores: Stores) -> None:
    active = await admitted(stores, conversation_id="a")
    ended = await admitted(stores, conversation_id="b")
    await stores.runs.finish(ended.run_id, RunStatus.CANCELLED)
    many = BATCH + 7  # more than one batch
    await _old_rows(stores, active.run_id, active.event_id, 3)
    await _old_rows(stores, ended.run_id, ended.event_id, many)
    retention = RetentionStore(stores.db)
    cutoff = time.time() + 60

    dry = [await retention.collect(kind, cutoff, dry_run=True) for kind in KINDS]
    assert {c.kind: c.rows for c in dry} == dict.fromkeys(KINDS, many)
    assert await _counts(stores, ended.run_id) == dict.fromkeys(KINDS, many)  # a dry run deletes nothing

    done = [await retention.collect(kind, cutoff) for kind in KINDS]
    assert {c.kind: c.rows for c in done} == dict.fromkeys(KINDS, many)
    assert await _counts(stores, ended.run_id) == dict.fromkeys(KINDS, 0)
    assert await _counts(stores, active.run_id) == dict.fromkeys(KINDS, 3)
    assert (await stores.runs.get(active.run_id)).status is RunStatus.QUEUED


async def test_rows_newer_than_the_cutoff_stay(stores: Stores) -> None:
    ended = await admitted(stores, conversation_id="b")
    await stores.runs.finish(ended.run_id, RunStatus.CANCELLED)
    await _old_rows(stores, ended.run_id, ended.event_id, 2)
    retention = RetentionStore(stores.db)
    done = [await retention.collect(kind, 0.5) for kind in KINDS]  # older than 1970-01-01T00:00:00.5
    assert [c.rows for c in done] == [0, 0, 0, 0]
    assert await _counts(stores, ended.run_id) == dict.fromkeys(KINDS, 2)
