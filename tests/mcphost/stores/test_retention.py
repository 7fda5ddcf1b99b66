"""Retention deletes (`stores/retention.py`) on both stores: what an active run references survives,
a dry run deletes nothing, and the rows of ended runs older than the cutoff go."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select, update

from mcphost.models import RunStatus
from mcphost.stores import ArtifactRecord, ArtifactStore, Database, DiskBlobs, Stores, open_stores
from mcphost.stores.blobs import StagedBlob
from mcphost.stores.retention import BATCH, RetentionStore
from mcphost.stores.tables import (
    ApprovalRow,
    ArtifactRow,
    ArtifactSourceRow,
    AuditRow,
    DeliveryRow,
    EventRow,
    RunResultRow,
    RunRow,
    TranscriptRow,
)
from tests.mcphost.stores.factories import admitted

KINDS = ("run_results", "audit", "events", "transcript")
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
    retention = RetentionStore(stores.db, stores.artifacts.blobs)
    cutoff = time.time() + 60

    dry = [await retention.collect(kind, cutoff, dry_run=True) for kind in KINDS]
    assert {c.kind: c.rows for c in dry} == dict.fromkeys(KINDS, many)
    assert all(c.bytes > 0 for c in dry), dry  # the rows' content columns hold something
    assert await _counts(stores, ended.run_id) == dict.fromkeys(KINDS, many)  # a dry run deletes nothing

    done = [await retention.collect(kind, cutoff) for kind in KINDS]
    assert {c.kind: c.rows for c in done} == dict.fromkeys(KINDS, many)
    assert [c.bytes for c in done] == [c.bytes for c in dry]  # the dry run measured what went
    assert await _counts(stores, ended.run_id) == dict.fromkeys(KINDS, 0)
    assert await _counts(stores, active.run_id) == dict.fromkeys(KINDS, 3)
    assert (await stores.runs.get(active.run_id)).status is RunStatus.QUEUED


async def test_rows_newer_than_the_cutoff_stay(stores: Stores) -> None:
    ended = await admitted(stores, conversation_id="b")
    await stores.runs.finish(ended.run_id, RunStatus.CANCELLED)
    await _old_rows(stores, ended.run_id, ended.event_id, 2)
    retention = RetentionStore(stores.db, stores.artifacts.blobs)
    done = [await retention.collect(kind, 0.5) for kind in KINDS]  # older than 1970-01-01T00:00:00.5
    assert [c.rows for c in done] == [0, 0, 0, 0]
    assert await _counts(stores, ended.run_id) == dict.fromkeys(KINDS, 2)


async def test_a_parked_run_is_held_until_its_decision_starts_the_continuation(stores: Stores) -> None:
    parked = await admitted(stores, conversation_id="p")
    async with stores.db.write() as session:
        await session.execute(
            update(RunRow).where(RunRow.run_id == parked.run_id).values(status="parked", ended_at=1.0)
        )
        await session.execute(
            insert(ApprovalRow).values(
                approval_id="ap-1", run_id=parked.run_id, agent_id="a", conversation_id="p", kind="tool",
                status="pending", request={}, created_at=1.0, expires_at=time.time() + 3600, parked=True,
            )
        )  # fmt: skip
    await _old_rows(stores, parked.run_id, parked.event_id, 2)
    retention = RetentionStore(stores.db, stores.artifacts.blobs)
    cutoff = time.time() + 60
    assert [(await retention.collect(kind, cutoff)).rows for kind in KINDS] == [0, 0, 0, 0]
    assert await _counts(stores, parked.run_id) == dict.fromkeys(KINDS, 2)  # it may still be continued

    async with stores.db.write() as session:  # decided: the continuation run carries the conversation on
        await session.execute(
            update(ApprovalRow)
            .where(ApprovalRow.approval_id == "ap-1")
            .values(status="approved", decided_at=2.0, continuation_run_id="run-next")
        )
    assert [(await retention.collect(kind, cutoff)).rows for kind in KINDS] == [2, 2, 2, 2]
    assert await _counts(stores, parked.run_id) == dict.fromkeys(KINDS, 0)


# -- artifacts and their bytes, on both blob backends --------------------------------------------------


@pytest.fixture(params=["disk", "database"])
async def blob_stores(
    request: pytest.FixtureRequest, database_url: str, tmp_path: Path
) -> AsyncGenerator[Stores]:
    """Every store over `database_url`, with blobs on disk (real files) or in the database."""
    async with open_stores(database_url, tmp_path / "data", blob_backend=request.param) as opened:
        yield opened


async def _ended_long_ago(stores: Stores, run_id: str, status: RunStatus = RunStatus.CANCELLED) -> None:
    await stores.runs.finish(run_id, status)
    async with stores.db.write() as session:
        await session.execute(update(RunRow).where(RunRow.run_id == run_id).values(ended_at=1.0))


async def _put(stores: Stores, data: bytes, **kwargs: Any) -> ArtifactRecord:
    return await stores.artifacts.put_bytes(
        data, name="a.bin", mime_type="application/octet-stream", max_bytes=1 << 20, **kwargs
    )


async def _artifact_ids(stores: Stores) -> set[str]:
    async with stores.db.read() as session:
        return set(await session.scalars(select(ArtifactRow.artifact_id)))


async def test_expired_artifacts_lose_rows_and_bytes_while_a_held_runs_stay(blob_stores: Stores) -> None:
    stores = blob_stores
    running = await admitted(stores, conversation_id="live")  # queued: held
    finished = await admitted(stores, conversation_id="done")
    await _ended_long_ago(stores, finished.run_id)
    past = time.time() - 10
    gone = await _put(
        stores, b"g" * 3000, owner_run_id=finished.run_id, conversation_id="done", expires_at=past
    )
    unowned = await _put(stores, b"u" * 700, expires_at=past)
    fresh = await _put(stores, b"f" * 100, owner_run_id=finished.run_id, expires_at=time.time() + 3600)
    forever = await _put(stores, b"n" * 100)  # no expiry, and the cutoff below keeps old ones
    of_held_run = await _put(stores, b"r" * 500, owner_run_id=running.run_id, expires_at=past)
    in_held_conversation = await _put(stores, b"c" * 400, conversation_id="live", expires_at=past)
    shared = await _put(stores, b"f" * 100, expires_at=past)  # the same bytes as `fresh`
    handed_to_held_run = await _put(stores, b"h" * 200, conversation_id="elsewhere", expires_at=past)
    async with stores.db.write() as session:  # the queued run's event hands it over as an attachment
        await session.execute(
            insert(EventRow).values(
                event_id=running.event_id, event_type="message.received", kind="inbound", conversation_id="live",
                thread_id="", run_id=running.run_id, actor_id=None, source="api", created_at=time.time(),
                payload={"input": {"text": "see", "attachments": [{"artifact_id": handed_to_held_run.artifact_id}]}},
            )
        )  # fmt: skip
    retention = RetentionStore(stores.db, stores.artifacts.blobs)

    dry = await retention.collect("artifacts", 0.0, dry_run=True)
    assert (dry.rows, dry.bytes) == (3, 3000 + 700)  # `shared` goes, its bytes stay with `fresh`
    assert len(await _artifact_ids(stores)) == 8
    assert await stores.artifacts.blobs.stored_size(gone.sha256) == 3000  # a dry run deletes nothing

    done = await retention.collect("artifacts", 0.0)
    assert (done.rows, done.bytes) == (dry.rows, dry.bytes)
    kept = [fresh, forever, of_held_run, in_held_conversation, handed_to_held_run]
    assert await _artifact_ids(stores) == {a.artifact_id for a in kept}
    assert await stores.artifacts.blobs.stored_size(gone.sha256) is None
    assert await stores.artifacts.blobs.stored_size(unowned.sha256) is None
    if isinstance(stores.artifacts.blobs, DiskBlobs):
        assert not stores.artifacts.blobs.path_of(gone.sha256).exists()
    for artifact in kept:  # the bytes of what stays are all there (expired ones read as not found)
        assert len(await _bytes_of(stores, artifact)) == artifact.size
    assert await stores.artifacts.read(fresh.artifact_id) == b"f" * 100
    assert shared.sha256 == fresh.sha256
    assert (await retention.collect("artifacts", 0.0)).rows == 0

    # Once the run has finished long ago, its artifact goes too.
    await _ended_long_ago(stores, running.run_id, RunStatus.FAILED)
    assert (await retention.collect("artifacts", 0.0)).rows == 3  # of the run, its conversation, its input


async def _bytes_of(stores: Stores, artifact: ArtifactRecord) -> bytes:
    pieces = stores.artifacts.blobs.read_range(artifact.sha256, 0, artifact.size)
    return b"".join([piece async for piece in pieces])


async def test_artifacts_without_an_expiry_go_when_older_than_the_cutoff(blob_stores: Stores) -> None:
    old = await _put(blob_stores, b"old")
    retention = RetentionStore(blob_stores.db, blob_stores.artifacts.blobs)
    assert (await retention.collect("artifacts", old.created_at - 1)).rows == 0
    done = await retention.collect("artifacts", time.time() + 1)
    assert (done.rows, done.bytes) == (1, 3)
    assert await _artifact_ids(blob_stores) == set()


async def test_a_default_ttl_sets_expires_at_and_an_explicit_one_wins(
    database_url: str, tmp_path: Path
) -> None:
    async with open_stores(database_url, tmp_path / "data", artifact_ttl_s=3600.0) as stores:
        before = time.time()
        implicit = await _put(stores, b"x")
        explicit = await _put(stores, b"y", expires_at=before + 5)
        assert implicit.expires_at is not None
        assert before + 3600 <= implicit.expires_at <= time.time() + 3600
        assert explicit.expires_at == before + 5
        assert (await stores.artifacts.get(implicit.artifact_id)).expires_at == implicit.expires_at


class _VanishingBlobs(DiskBlobs):
    """Disk blobs whose first commit is deleted right after it, as retention collecting an expired
    artifact with the same bytes would between the upload's commit and its row."""

    def __init__(self, root: Path, db: Database) -> None:
        super().__init__(root)
        self._db = db
        self.commits = 0

    async def commit(self, staged: StagedBlob) -> None:
        await super().commit(staged)
        self.commits += 1
        if self.commits == 1:
            async with self._db.write() as session:
                await self.delete(staged.sha256, session)


async def test_an_upload_whose_bytes_retention_removed_meanwhile_stores_them_again(
    stores: Stores, tmp_path: Path
) -> None:
    blobs = _VanishingBlobs(tmp_path / "vanishing", stores.db)
    artifacts = ArtifactStore(stores.db, blobs)
    record = await artifacts.put_bytes(b"hello", name=None, mime_type="text/plain", max_bytes=100)
    assert blobs.commits == 2
    assert await artifacts.read(record.artifact_id) == b"hello"
    assert list((tmp_path / "vanishing" / ".tmp").iterdir()) == []  # the staged file is gone


async def test_dead_deliveries_go_after_their_max_age_and_others_stay(stores: Stores) -> None:
    def row(n: int, status: str, expires_at: float) -> dict[str, Any]:
        return {"delivery_id": f"msg_{n}", "url": "http://127.0.0.1:9/x", "type": "run.completed", "run_id": None,
                "agent_id": None, "conversation_id": None, "body": {"type": "run.completed", "n": n},
                "status": status, "attempts": 3, "created_at": 1.0, "expires_at": expires_at,
                "next_attempt_at": 1.0, "claimed_until": 0.0, "claimed_by": None, "last_error": "HTTP 500",
                "delivered_at": None}  # fmt: skip

    now = time.time()
    async with stores.db.write() as session:
        await session.execute(
            insert(DeliveryRow),
            [row(1, "dead", 2.0), row(2, "dead", now), row(3, "pending", 2.0), row(4, "delivered", 2.0)],
        )
    retention = RetentionStore(stores.db, stores.artifacts.blobs)
    dry = await retention.collect("dead_deliveries", now - 60, dry_run=True)
    done = await retention.collect("dead_deliveries", now - 60)
    assert (done.rows, done.bytes) == (dry.rows, dry.bytes) == (1, dry.bytes)
    assert done.bytes > len("HTTP 500")
    async with stores.db.read() as session:
        left = set(await session.scalars(select(DeliveryRow.delivery_id)))
    assert left == {"msg_2", "msg_3", "msg_4"}


async def test_lazy_artifacts_never_read_go_by_the_artifacts_rule_while_a_held_conversations_stay(
    stores: Stores,
) -> None:
    running = await admitted(stores, conversation_id="live")  # queued: held
    past = time.time() - 10

    async def lazy(conversation_id: str | None, expires_at: float | None) -> str:
        pending = await stores.artifacts.put_lazy(
            origin="chan", locator={"url": "x"}, name="f", mime_type="text/plain", declared_size=1,
            max_bytes=10, conversation_id=conversation_id, expires_at=expires_at,
        )  # fmt: skip
        return pending.artifact_id

    expired = await lazy("done", past)
    fresh = await lazy("done", time.time() + 3600)
    held = await lazy(running.conversation_id, past)
    retention = RetentionStore(stores.db, stores.artifacts.blobs)
    assert (await retention.collect("artifacts", 0, dry_run=True)).rows == 1
    assert (await retention.collect("artifacts", 0)).rows == 1
    async with stores.db.read() as session:
        left = set(await session.scalars(select(ArtifactSourceRow.artifact_id)))
    assert left == {fresh, held}
    assert expired not in left
