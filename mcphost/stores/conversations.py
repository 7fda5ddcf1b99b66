"""Conversations: the list of them by newest activity, and deleting one with everything it left.

Owns the `conversations` table (one row per conversation that has had a run, written by run admission
through `touch_conversation`) and `ConversationStore.delete`, which removes a conversation's runs (with
their results, audit rows and recordings), event log, transcript, conversation-scoped state, approvals,
outbound deliveries and artifacts (rows and, once unreferenced, blobs). Does not own those tables' other
writes (their stores) or who may delete (the API's roles).

Invariants:
- A conversation's row is written in the transaction that admits its run, under that conversation's
  lock (`runs._LOCK_NAMESPACE`), so `last_run_seq` only grows and the list is ordered by admission.
- `list` reads one index range (`last_run_seq`, or `agent_id`/`actor_id` first when filtered): a page
  costs O(limit) rows. An id prefix is a `LIKE` on the same range (it may scan past rows that do not
  match, never more than the conversations newer than the page).
- `delete` is one write transaction under the conversation's lock, so no run can be admitted to the
  conversation while it runs: it refuses (`ConflictError`, nothing deleted) while a run of the
  conversation is queued or running, or an approval of it is pending or its parked run still waits to
  be continued. Blobs go after the commit, each in its own transaction under `BLOB_LOCK` once no
  artifact row references it (the order retention uses): a failure leaves an unreferenced blob, never a
  row without its bytes.
"""

from __future__ import annotations

import json
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar, cast

from pydantic import ConfigDict
from sqlalchemy import ColumnElement, Row, Select, bindparam, delete, func, or_, select
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import Executable

from mcphost.common.fielddocs import DocumentedModel
from mcphost.errors import ConflictError, InvalidArgumentError, NotFoundError
from mcphost.models import RunStatus
from mcphost.stores._cursor import CursorCodec, Page, check_limit
from mcphost.stores._retry import idempotent
from mcphost.stores._sql import Dialect, lock_in_transaction, pg_insert
from mcphost.stores.artifacts import drop_unreferenced_blob
from mcphost.stores.blobs import BlobBackend
from mcphost.stores.engine import Database, core
from mcphost.stores.tables import (
    ApprovalRow,
    ArtifactRow,
    ArtifactSourceRow,
    AuditRow,
    ConversationRow,
    DeliveryRow,
    EventRow,
    RecordedCallRow,
    RecordingRow,
    RunResultRow,
    RunRow,
    RuntimeAuditRow,
    StateRow,
    TranscriptRow,
    table_of,
)

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql

LOCK_NAMESPACE = "conversation"
"""The lock admission (`runs.py`) and `delete` take on a conversation."""
_BUSY_STATUSES = (RunStatus.QUEUED.value, RunStatus.RUNNING.value)


class ConversationRecord(DocumentedModel):
    """A conversation as listed: when it began, its newest activity and who was in it last."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    conversation_id: str
    created_at: float
    """When its first run was admitted."""
    last_activity_at: float
    """When its newest run was admitted."""
    last_run_id: str
    agent_id: str | None
    """The agent of its newest run."""
    actor_id: str | None
    """The actor of the newest event that named one."""
    runs: int
    """How many runs it has had (attempts included)."""


class ConversationDeleted(DocumentedModel):
    """What deleting a conversation removed, row counts by kind."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    conversation_id: str
    runs: int
    events: int
    transcript: int
    """Transcript items."""
    state: int
    """Conversation-scoped state values (of every runner, agent and thread)."""
    approvals: int
    deliveries: int
    """Outbound webhook deliveries about it (sent, dead or still pending)."""
    artifacts: int
    blob_bytes: int
    """Bytes of artifact blobs freed (a blob another artifact still references stays)."""


def _record(row: ConversationRow) -> ConversationRecord:
    return ConversationRecord(
        conversation_id=row.conversation_id,
        created_at=row.created_at,
        last_activity_at=row.last_activity_at,
        last_run_id=row.last_run_id,
        agent_id=row.agent_id,
        actor_id=row.actor_id,
        runs=row.runs,
    )


_InsertT = TypeVar("_InsertT", bound="postgresql.Insert | sqlite.Insert")


@cache
def _touch_statement(dialect: Dialect) -> Executable:
    """Built once per dialect, on its first use (`engine.core`): every admission into a conversation runs
    it. Not at import, so a SQLite host never imports PostgreSQL's dialect."""
    table = table_of(ConversationRow)
    insert = pg_insert(table) if dialect == "postgresql" else sqlite.insert(table)
    return _touching(
        insert.values(
            {name: bindparam(f"v_{name}", type_=table.c[name].type) for name in _TOUCHED} | {"runs": 1}
        )
    )


def touch_from(admitted: Select[Any]) -> postgresql.Insert:
    """PostgreSQL: `touch_conversation` of the row `admitted` selects (the columns `_TOUCHED`, then
    `runs`), for a statement that admits the run and touches its conversation at once."""
    return _touching(pg_insert(table_of(ConversationRow)).from_select([*_TOUCHED, "runs"], admitted))


def _touching(stmt: _InsertT) -> _InsertT:
    """`stmt` (a conversation's row) as the upsert that makes it its conversation's newest activity."""
    table = table_of(ConversationRow)
    new = stmt.excluded
    return stmt.on_conflict_do_update(
        index_elements=["conversation_id"],
        set_={
            "last_activity_at": new.last_activity_at,
            "last_run_seq": new.last_run_seq,
            "last_run_id": new.last_run_id,
            "agent_id": new.agent_id,
            "actor_id": func.coalesce(new.actor_id, table.c.actor_id),
            "runs": table.c.runs + 1,
        },
    )


_TOUCHED = (
    "conversation_id",
    "created_at",
    "last_activity_at",
    "last_run_seq",
    "last_run_id",
    "agent_id",
    "actor_id",
)


async def touch_conversation(
    session: AsyncSession, dialect: Dialect, run: Row[Any], actor_id: str | None
) -> None:
    """Inside an admission's transaction: `run` (the inserted `runs` row) is its conversation's newest
    activity; `actor_id` the actor its event named, if any."""
    values = {
        "v_conversation_id": run.conversation_id,
        "v_created_at": run.created_at,
        "v_last_activity_at": run.created_at,
        "v_last_run_seq": run.created_seq,
        "v_last_run_id": run.run_id,
        "v_agent_id": run.agent_id,
        "v_actor_id": actor_id,
    }
    await (await core(session)).execute(_touch_statement(dialect), values)


def _like_prefix(prefix: str) -> ColumnElement[bool]:
    return ConversationRow.conversation_id.startswith(prefix, autoescape=True)


class ConversationStore:
    """List conversations newest activity first; delete one with everything it left."""

    def __init__(self, db: Database, cursors: CursorCodec, blobs: BlobBackend) -> None:
        self._db = db
        self._cursors = cursors
        self._blobs = blobs

    @idempotent
    async def list(
        self,
        *,
        prefix: str | None = None,
        agent_id: str | None = None,
        actor_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[ConversationRecord]:
        """Conversations newest activity first, optionally whose id starts with `prefix`, whose newest run
        was of `agent_id`, or whose newest actor is `actor_id`."""
        check_limit(limit)
        stmt = select(ConversationRow)
        if prefix:
            stmt = stmt.where(_like_prefix(prefix))
        if agent_id is not None:
            stmt = stmt.where(ConversationRow.agent_id == agent_id)
        if actor_id is not None:
            stmt = stmt.where(ConversationRow.actor_id == actor_id)
        if cursor is not None:
            stmt = stmt.where(
                ConversationRow.last_run_seq < self._cursors.decode_seq(cursor, "conversations")
            )
        stmt = stmt.order_by(ConversationRow.last_run_seq.desc()).limit(limit + 1)
        async with self._db.read() as session:
            rows = (await session.execute(stmt)).scalars().all()
        has_more = len(rows) > limit
        kept = rows[:limit]
        return Page[ConversationRecord](
            items=[_record(row) for row in kept],
            next_cursor=self._cursors.encode("conversations", kept[-1].last_run_seq) if has_more else None,
            prev_cursor=None,
            has_more=has_more,
        )

    @idempotent
    async def get(self, conversation_id: str) -> ConversationRecord:
        """One conversation's row.

        Raises:
            NotFoundError: it never had a run.
        """
        query = select(ConversationRow).where(ConversationRow.conversation_id == conversation_id)
        async with self._db.read() as session:
            row = (await session.execute(query)).scalar_one_or_none()
        if row is None:
            raise _unknown(conversation_id)
        return _record(row)

    async def delete(self, conversation_id: str) -> ConversationDeleted:
        """Delete the conversation and everything it left (see the module docstring).

        Raises:
            NotFoundError: nothing of it is stored.
            ConflictError: a run of it is queued or running, or an approval of it still decides a run.
        """
        if not conversation_id:
            raise InvalidArgumentError("A conversation id is required.", details={"field": "conversation_id"})

        async def delete_in(session: AsyncSession) -> tuple[ConversationDeleted, set[str]]:
            await lock_in_transaction(session, self._db.dialect, LOCK_NAMESPACE, conversation_id)
            runs = select(RunRow.run_id).where(RunRow.conversation_id == conversation_id)
            await self._check_idle(session, conversation_id)
            artifacts = or_(
                ArtifactRow.conversation_id == conversation_id, ArtifactRow.owner_run_id.in_(runs)
            )
            hashes = set((await session.execute(select(ArtifactRow.sha256).where(artifacts))).scalars())
            counts: dict[str, int] = {}
            counts["artifacts"] = await _count_delete(session, delete(ArtifactRow).where(artifacts))
            counts["artifacts"] += await _count_delete(
                session, delete(ArtifactSourceRow).where(ArtifactSourceRow.conversation_id == conversation_id)
            )
            counts["state"] = await _delete_state(session, conversation_id)
            approvals = or_(ApprovalRow.conversation_id == conversation_id, ApprovalRow.run_id.in_(runs))
            counts["approvals"] = await _count_delete(session, delete(ApprovalRow).where(approvals))
            deliveries = or_(DeliveryRow.conversation_id == conversation_id, DeliveryRow.run_id.in_(runs))
            counts["deliveries"] = await _count_delete(session, delete(DeliveryRow).where(deliveries))
            recorded = select(RecordingRow.run_id).where(RecordingRow.run_id.in_(runs))
            await session.execute(delete(RecordedCallRow).where(RecordedCallRow.run_id.in_(recorded)))
            await session.execute(delete(RecordingRow).where(RecordingRow.run_id.in_(runs)))
            await session.execute(delete(RunResultRow).where(RunResultRow.run_id.in_(runs)))
            await session.execute(delete(AuditRow).where(AuditRow.run_id.in_(runs)))
            await session.execute(delete(RuntimeAuditRow).where(RuntimeAuditRow.run_id.in_(runs)))
            counts["events"] = await _count_delete(
                session, delete(EventRow).where(EventRow.conversation_id == conversation_id)
            )
            counts["transcript"] = await _count_delete(
                session, delete(TranscriptRow).where(TranscriptRow.conversation_id == conversation_id)
            )
            counts["runs"] = await _count_delete(
                session, delete(RunRow).where(RunRow.conversation_id == conversation_id)
            )
            had_row = await _count_delete(
                session, delete(ConversationRow).where(ConversationRow.conversation_id == conversation_id)
            )
            if not had_row and not any(counts.values()):
                raise _unknown(conversation_id)
            return ConversationDeleted(conversation_id=conversation_id, blob_bytes=0, **counts), hashes

        deleted, hashes = await self._db.run_write(delete_in, long=True)  # rows without bound: off the loop
        freed = 0
        for sha256 in sorted(hashes):
            freed += await drop_unreferenced_blob(self._db, self._blobs, sha256)
        return deleted.model_copy(update={"blob_bytes": freed})

    async def _check_idle(self, session: AsyncSession, conversation_id: str) -> None:
        busy = (
            await session.execute(
                select(RunRow.run_id, RunRow.status)
                .where(RunRow.conversation_id == conversation_id, RunRow.status.in_(_BUSY_STATUSES))
                .order_by(RunRow.created_seq)
                .limit(1)
            )
        ).one_or_none()
        if busy is not None:
            raise ConflictError(
                f"Conversation {conversation_id!r} has {busy.status} run {busy.run_id!r}; cancel it "
                f"(POST /v1/runs/{busy.run_id}/cancel) or wait for it to end, then delete the conversation.",
                details={"conversation_id": conversation_id, "run_id": busy.run_id, "status": busy.status},
            )
        waiting = await session.scalar(
            select(ApprovalRow.approval_id)
            .where(
                ApprovalRow.conversation_id == conversation_id,
                or_(
                    ApprovalRow.status == "pending",
                    ApprovalRow.parked & ApprovalRow.continuation_run_id.is_(None),
                ),
            )
            .limit(1)
        )
        if waiting is not None:
            raise ConflictError(
                f"Conversation {conversation_id!r} has approval {waiting!r} that still decides a run (pending, "
                "or its parked run is about to continue); decide it and let the continuation end, then "
                "delete the conversation.",
                details={"conversation_id": conversation_id, "approval_id": waiting},
            )


async def _count_delete(session: AsyncSession, stmt: Executable) -> int:
    result = await session.execute(stmt)
    return int(result.rowcount or 0)  # pyright: ignore[reportAttributeAccessIssue,reportUnknownMemberType,reportUnknownArgumentType]  # a DML result


async def _delete_state(session: AsyncSession, conversation_id: str) -> int:
    """Conversation-scoped state of `conversation_id`: owners `[runner, binding, conversation, thread]`
    (`STATE_OWNER_IDS`), found by the conversation's JSON text in the owner and checked exactly."""
    needle = json.dumps(conversation_id, ensure_ascii=False)
    owners = (
        await session.execute(
            select(StateRow.owner)
            .where(StateRow.scope == "conversation", StateRow.owner.contains(needle, autoescape=True))
            .distinct()
        )
    ).scalars()
    exact = [owner for owner in owners if _owner_conversation(owner) == conversation_id]
    if not exact:
        return 0
    stmt = delete(StateRow).where(StateRow.scope == "conversation", StateRow.owner.in_(exact))
    return await _count_delete(session, stmt)


def _owner_conversation(owner: str) -> str | None:
    try:
        parts: object = json.loads(owner)
    except ValueError:
        return None
    if not isinstance(parts, list):
        return None
    items = cast("list[object]", parts)
    third = items[2] if len(items) == 4 else None
    return third if isinstance(third, str) else None


def _unknown(conversation_id: str) -> NotFoundError:
    return NotFoundError(
        f"No conversation {conversation_id!r} is stored; GET /v1/conversations lists them.",
        details={"conversation_id": conversation_id},
    )
