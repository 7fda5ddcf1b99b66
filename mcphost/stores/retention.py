"""Retention: deleting rows older than their kind's maximum age, and expired artifacts with their bytes,
in bounded batches.

Owns the deletes of the row kinds (`ROW_KINDS`): run results (with the run's recording, if any), audit, the event log, the transcript,
artifacts (rows and blobs; lazy artifacts never read, `artifact_sources`, by the same rule) and dead deliveries; and the answers the file kinds need from the database
(`RetentionStore.removable_run_folders`, `held_sessions`). Does not own the maximum ages (`[retention]`
in `config.py`), the files on disk (`mcphost/retention.py`) or when collection runs.

Invariants:
- Nothing a held run references is deleted. A run is held until it is completed, failed or cancelled
  (queued, running, and any status that can still resume: a parked run until its decision has started
  the continuation run, which then holds the conversation itself): results and audit rows only
  of runs finished before the cutoff; event-log and transcript rows only when their run is not held,
  and an event only when no held run was admitted for its `event_id`; an artifact only when its owner
  run is not held, no held run shares its conversation, and no held run's event hands it over as input
  (an `artifact_id` or `raw_ref` anywhere in the event).
- An artifact goes when its `expires_at` has passed (or, with no expiry, when it was created before the
  cutoff); its blob goes in the same step once no artifact row references the hash, checked and deleted
  in one write transaction under `BLOB_LOCK`, the lock a new row referencing the hash takes.
- Deletes go in batches of at most `BATCH` rows, one short transaction each, so a large backlog never
  holds a long write lock.
- A batch reads through indexes, never a whole table (migration 0020, `test_query_plans.py`): the event
  log, transcript and audit by `created_at` (oldest first), run results by their run's `ended_at`, and
  the held runs (a few) through `(status, created_seq)` with `status IN HELD_STATUSES`.
- A dry run counts what would go and deletes nothing. `bytes` is what the rows' content columns hold
  (text and JSON as stored) and, for artifacts, the blob bytes freed (shared blobs counted once, and
  not at all while another artifact keeps them).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import (
    ColumnElement,
    Select,
    Text,
    and_,
    cast,
    delete,
    func,
    literal,
    or_,
    select,
    tuple_,
)

from mcphost.models import RunStatus
from mcphost.stores.artifacts import drop_unreferenced_blob
from mcphost.stores.blobs import BlobBackend
from mcphost.stores.engine import Database
from mcphost.stores.tables import (
    ApprovalRow,
    ArtifactRow,
    ArtifactSourceRow,
    AuditRow,
    DeliveryRow,
    EventRow,
    RecordedCallRow,
    RecordingRow,
    RunResultRow,
    RunRow,
    StateRow,
    TranscriptRow,
)

BATCH = 500
ROW_KINDS: tuple[str, ...] = ("run_results", "audit", "events", "transcript", "artifacts", "dead_deliveries")
FINISHED_STATUSES: tuple[str, ...] = (
    RunStatus.COMPLETED.value,
    RunStatus.FAILED.value,
    RunStatus.CANCELLED.value,
)
"""Runs in these statuses never run again; every other run is held (what it references stays), except a
parked run whose approval has started its continuation: that run never resumes, the continuation (itself
held while it can run) carries the conversation on."""
SESSION_STATE_KEYS: tuple[str, ...] = ("external.session_id", "external.working_directory")
"""Conversation-state keys where harness runners keep the session a conversation continues."""


class Collected(BaseModel):
    """What one kind's collection deleted (or, in a dry run, would delete)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    kind: str
    rows: int
    """Rows deleted; for the file kinds, folders or files."""
    bytes: int
    cutoff: float


def _finished() -> ColumnElement[bool]:
    """The run will never run again: a finished status, or parked with its continuation started."""
    continued = select(ApprovalRow.run_id).where(
        ApprovalRow.parked.is_(True), ApprovalRow.continuation_run_id.is_not(None)
    )
    return or_(
        RunRow.status.in_(FINISHED_STATUSES),
        and_(RunRow.status == RunStatus.PARKED.value, RunRow.run_id.in_(continued)),
    )


HELD_STATUSES: tuple[str, ...] = tuple(s.value for s in RunStatus if s.value not in FINISHED_STATUSES)


def _held() -> ColumnElement[bool]:
    """`not _finished()`, said positively: a held status (read through the `(status, created_seq)`
    index, so finding the few held runs never scans the table), and not a parked run continued."""
    continued = select(ApprovalRow.run_id).where(
        ApprovalRow.parked.is_(True), ApprovalRow.continuation_run_id.is_not(None)
    )
    return and_(
        RunRow.status.in_(HELD_STATUSES),
        or_(RunRow.status != RunStatus.PARKED.value, RunRow.run_id.not_in(continued)),
    )


def _held_runs() -> Select[str]:
    return select(RunRow.run_id).where(_held())


def _held_conversations() -> Select[str]:
    return select(RunRow.conversation_id).where(_held())


def _finished_runs(cutoff: float) -> Select[str]:
    return select(RunRow.run_id).where(_finished(), RunRow.ended_at < cutoff)


def _length(*columns: Any) -> ColumnElement[Any]:
    total: ColumnElement[Any] = literal(0)
    for column in columns:
        total = total + func.coalesce(func.length(cast(column, Text)), 0)
    return total


_Candidates = tuple[Select[*tuple[Any, ...]], Any, ColumnElement[Any]]


def _recordings(cutoff: float) -> list[_Candidates]:
    """A run's recording goes with its results (calls first, then the header they hang from)."""
    finished = _finished_runs(cutoff)
    calls = select(RecordedCallRow.run_id, RecordedCallRow.seq).where(RecordedCallRow.run_id.in_(finished))
    headers = select(RecordingRow.run_id).where(RecordingRow.run_id.in_(finished))
    return [
        (
            calls,
            RecordedCallRow,
            _length(RecordedCallRow.tool, RecordedCallRow.arguments, RecordedCallRow.answer),
        ),
        (headers, RecordingRow, _length(RecordingRow.envelope, RecordingRow.context, RecordingRow.agent)),
    ]


def _candidates(
    kind: str, cutoff: float, now: float, held_artifacts: frozenset[str] = frozenset()
) -> _Candidates:
    """The keys of the rows of `kind` that may go, their table, and each row's content size."""
    if kind == "run_results":
        keys = select(RunResultRow.run_id, RunResultRow.seq).where(
            RunResultRow.run_id.in_(_finished_runs(cutoff))
        )
        return keys, RunResultRow, _length(RunResultRow.type, RunResultRow.payload)
    if kind == "audit":
        # The row's own age first: its `created_at` index bounds what a pass reads to the rows it may
        # delete, however many finished runs are kept (a row written after its run ended waits for the
        # cutoff to pass it too).
        keys = select(AuditRow.run_id, AuditRow.seq).where(
            AuditRow.created_at < cutoff, AuditRow.run_id.in_(_finished_runs(cutoff))
        )
        return keys, AuditRow, _length(AuditRow.tool, AuditRow.args_digest, AuditRow.code)
    if kind == "events":
        keys = select(EventRow.seq).where(
            EventRow.created_at < cutoff,
            or_(EventRow.run_id.is_(None), EventRow.run_id.not_in(_held_runs())),
            EventRow.event_id.not_in(select(RunRow.event_id).where(_held())),
        )
        return keys, EventRow, _length(EventRow.payload)
    if kind == "transcript":
        keys = select(TranscriptRow.seq).where(
            TranscriptRow.created_at < cutoff,
            or_(TranscriptRow.run_id.is_(None), TranscriptRow.run_id.not_in(_held_runs())),
        )
        return (
            keys,
            TranscriptRow,
            _length(TranscriptRow.content, TranscriptRow.contents, TranscriptRow.artifacts),
        )
    if kind == "artifacts":
        keys = select(ArtifactRow.artifact_id).where(
            ArtifactRow.artifact_id.not_in(list(held_artifacts)),
            or_(
                ArtifactRow.expires_at <= now,
                ArtifactRow.expires_at.is_(None) & (ArtifactRow.created_at < cutoff),
            ),
            or_(ArtifactRow.owner_run_id.is_(None), ArtifactRow.owner_run_id.not_in(_held_runs())),
            or_(
                ArtifactRow.conversation_id.is_(None),
                ArtifactRow.conversation_id.not_in(_held_conversations()),
            ),
        )
        return keys, ArtifactRow, literal(0)
    assert kind == "dead_deliveries", kind
    keys = select(DeliveryRow.seq).where(DeliveryRow.status == "dead", DeliveryRow.expires_at < cutoff)
    return keys, DeliveryRow, _length(DeliveryRow.body, DeliveryRow.last_error)


class RetentionStore:
    """Delete expired rows (and artifact blobs), kind by kind."""

    def __init__(self, db: Database, blobs: BlobBackend) -> None:
        self._db = db
        self._blobs = blobs

    async def collect(self, kind: str, cutoff: float, *, dry_run: bool = False) -> Collected:
        """Delete the rows of `kind` older than `cutoff` (epoch seconds) that no held run references.

        For `artifacts`, rows past their own `expires_at` go whatever the cutoff (an artifact without
        one goes when created before the cutoff; pass `cutoff=0` to keep those)."""
        now = time.time()
        if kind == "artifacts":
            held = await self._held_inputs()
            keys, _, _ = _candidates(kind, cutoff, now, held)
            collected = await self._collect_artifacts(keys, cutoff, dry_run=dry_run)
            sources = await self._collect_sources(held, cutoff, now, dry_run=dry_run)
            return collected.model_copy(update={"rows": collected.rows + sources})
        parts = [_candidates(kind, cutoff, now)]
        if kind == "run_results":
            parts.extend(_recordings(cutoff))
        rows = total_bytes = 0
        for part in parts:
            count, size = await self._delete_rows(part, dry_run=dry_run)
            rows, total_bytes = rows + count, total_bytes + size
        return Collected(kind=kind, rows=rows, bytes=total_bytes, cutoff=cutoff)

    async def _delete_rows(self, candidates: _Candidates, *, dry_run: bool) -> tuple[int, int]:
        """(rows, bytes) of the candidates, deleted in batches unless `dry_run`."""
        keys, table, size = candidates
        pk = list(table.__table__.primary_key.columns)
        if dry_run:
            async with self._db.read() as session:
                found = keys.add_columns(size.label("size")).subquery()
                count, total = (
                    await session.execute(select(func.count(), func.coalesce(func.sum(found.c.size), 0)))
                ).one()
            return int(count), int(total)
        rows = total_bytes = 0
        while True:
            async with self._db.write() as session:
                batch = (await session.execute(keys.add_columns(size).limit(BATCH))).all()
                if not batch:
                    break
                ids = [tuple(row)[: len(pk)] for row in batch]
                await session.execute(delete(table).where(tuple_(*pk).in_(ids)))
                rows += len(batch)
                total_bytes += sum(int(tuple(row)[-1] or 0) for row in batch)
            if len(batch) < BATCH:
                break
        return rows, total_bytes

    async def _held_inputs(self) -> frozenset[str]:
        """The artifacts handed to held runs as input: every `artifact_id` and `raw_ref` in their events."""
        async with self._db.read() as session:
            payloads = await session.scalars(
                select(EventRow.payload).where(EventRow.event_id.in_(select(RunRow.event_id).where(_held())))
            )
            return frozenset(_artifact_ids(list(payloads)))

    async def _collect_artifacts(
        self, keys: Select[*tuple[Any, ...]], cutoff: float, *, dry_run: bool
    ) -> Collected:
        query = keys.add_columns(ArtifactRow.sha256, ArtifactRow.size)
        if dry_run:
            async with self._db.read() as session:
                found = query.subquery()
                count = int(await session.scalar(select(func.count()).select_from(found)) or 0)
                # A blob goes when every artifact row referencing it goes.
                kept = select(ArtifactRow.sha256).where(
                    ArtifactRow.artifact_id.not_in(select(found.c.artifact_id))
                )
                freed = select(found.c.sha256, func.max(found.c.size).label("size")).where(
                    found.c.sha256.not_in(kept)
                )
                blobs = freed.group_by(found.c.sha256).subquery()
                total = int(await session.scalar(select(func.coalesce(func.sum(blobs.c.size), 0))) or 0)
            return Collected(kind="artifacts", rows=count, bytes=total, cutoff=cutoff)
        rows = freed_bytes = 0
        while True:
            async with self._db.write() as session:
                batch = (await session.execute(query.limit(BATCH))).all()
                if batch:
                    ids = [row.artifact_id for row in batch]
                    await session.execute(delete(ArtifactRow).where(ArtifactRow.artifact_id.in_(ids)))
            if not batch:
                break
            rows += len(batch)
            for sha256 in sorted({row.sha256 for row in batch}):
                freed_bytes += await drop_unreferenced_blob(self._db, self._blobs, sha256)
            if len(batch) < BATCH:
                break
        return Collected(kind="artifacts", rows=rows, bytes=freed_bytes, cutoff=cutoff)

    async def _collect_sources(
        self, held: frozenset[str], cutoff: float, now: float, *, dry_run: bool
    ) -> int:
        """Lazy artifacts never read (`artifact_sources`) by the artifacts' own rule: past `expires_at`,
        or without one created before `cutoff`, and not an input of a held run or its conversation's."""
        where = (
            ArtifactSourceRow.artifact_id.not_in(list(held)),
            or_(
                ArtifactSourceRow.expires_at <= now,
                ArtifactSourceRow.expires_at.is_(None) & (ArtifactSourceRow.created_at < cutoff),
            ),
            or_(
                ArtifactSourceRow.conversation_id.is_(None),
                ArtifactSourceRow.conversation_id.not_in(_held_conversations()),
            ),
        )
        if dry_run:
            async with self._db.read() as session:
                return int(await session.scalar(select(func.count()).where(*where)) or 0)
        async with self._db.write() as session:
            result = await session.execute(delete(ArtifactSourceRow).where(*where))
            return int(result.rowcount or 0)  # pyright: ignore[reportAttributeAccessIssue,reportUnknownMemberType,reportUnknownArgumentType]  # a DML result

    async def removable_run_folders(self, run_ids: Sequence[str], cutoff: float) -> set[str]:
        """Of `run_ids` (folder names), those whose run finished before `cutoff` while no held run shares
        its conversation (a later turn may resume in the folder). Unknown ids are kept."""
        if not run_ids:
            return set()
        async with self._db.read() as session:
            found = await session.scalars(
                select(RunRow.run_id).where(
                    RunRow.run_id.in_(list(run_ids)),
                    RunRow.run_id.in_(_finished_runs(cutoff)),
                    RunRow.conversation_id.not_in(_held_conversations()),
                )
            )
            return set(found)

    async def held_sessions(self) -> set[str]:
        """The harness session ids and folders the conversations of held runs continue (their files stay)."""
        async with self._db.read() as session:
            conversations = set(await session.scalars(_held_conversations().distinct()))
            if not conversations:
                return set()
            values = await session.scalars(
                select(StateRow.value).where(
                    StateRow.scope == "conversation",
                    StateRow.key.in_(SESSION_STATE_KEYS),
                    or_(*(StateRow.owner.contains(json.dumps(c)) for c in conversations)),
                )
            )
            return {value for value in values if isinstance(value, str) and value}


def _artifact_ids(value: object) -> set[str]:
    """Every string under an `artifact_id` or `raw_ref` key, at any depth of a JSON value."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():  # pyright: ignore[reportUnknownVariableType]  # a JSON object: dict[Any, Any]
                if key in ("artifact_id", "raw_ref") and isinstance(child, str):
                    found.add(child)
                else:
                    stack.append(child)  # pyright: ignore[reportUnknownArgumentType]  # as above
        elif isinstance(item, list):
            stack.extend(item)  # pyright: ignore[reportUnknownArgumentType]  # a JSON array: list[Any]
    return found
