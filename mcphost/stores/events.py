"""The event log: every inbound event, tool telemetry, action request, ignored result and system event.

Owns the `events` table. Does not decide what gets logged (the journal and orchestrator do).

Invariants:
- Append-only, idempotent on `event_id`: a second append of the same id returns the stored row with
  `created=False`, whatever its other fields. Race-safe through the unique constraint
  (`INSERT … ON CONFLICT DO NOTHING`), so concurrent appends of one id store exactly one row.
- A run's own events (`for_run`) come from the (run_id, seq) index.
- Paging is keyset on `seq` within one (conversation_id, thread_id), served by the index
  (conversation_id, thread_id, seq); no conversation / no thread is "". A run's view is exactly its own
  thread (or the conversation's main line when it has none). Filtering by event types reads each type
  through the (conversation_id, thread_id, event_type, seq) index separately (at most
  `MAX_EVENT_TYPES` of them) and merges by seq, so a rare type never scans the conversation.
- `thread_at` (where a cursor points) is a primary-key probe.
- Every method is retried when its connection drops (`@idempotent`): `append` is idempotent on
  `event_id` (a repeat after a commit whose acknowledgement was lost answers `created=False`).
- A stored payload nested deeper than `MAX_JSON_DEPTH` is served as `{}` with `payload_error` set, so
  one bad row never fails a page.
"""

from __future__ import annotations

import time
from functools import cache
from typing import Any, Literal, NotRequired, TypedDict, Unpack

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select, union_all
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.dml import ReturningInsert

from mcphost.errors import InvalidArgumentError, NotFoundError
from mcphost.protocol import MAX_JSON_DEPTH, JSONObject, json_depth
from mcphost.stores._cursor import CursorCodec, Page, check_limit
from mcphost.stores._retry import idempotent
from mcphost.stores._sql import Dialect, ignoring_insert
from mcphost.stores.engine import Database, core
from mcphost.stores.tables import EventRow, table_of

EventKind = Literal["inbound", "telemetry", "action", "ignored", "system"]
EVENT_KINDS: frozenset[str] = frozenset({"inbound", "telemetry", "action", "ignored", "system"})
MAX_EVENT_TYPES = 20


class StoredEvent(BaseModel):
    """One row of the event log."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    seq: int
    cursor: str
    event_id: str
    event_type: str
    kind: EventKind
    conversation_id: str | None
    thread_id: str | None
    run_id: str | None
    actor_id: str | None
    source: str
    payload: JSONObject
    created_at: float
    payload_error: str | None = None
    """Set (and `payload` empty) when the stored payload nests deeper than `MAX_JSON_DEPTH` (stored
    before nesting was bounded, or straight into the database) and cannot be served."""


def _stored(row: EventRow, cursors: CursorCodec) -> StoredEvent:
    payload, error = row.payload, None
    if json_depth(payload) > MAX_JSON_DEPTH:
        payload = {}
        error = (
            f"The stored payload of event {row.event_id!r} nests arrays/objects more than {MAX_JSON_DEPTH} "
            "levels deep and cannot be served; the row's other fields are intact."
        )
    return StoredEvent(
        seq=row.seq,
        cursor=cursors.encode("events", row.seq),
        event_id=row.event_id,
        event_type=row.event_type,
        kind=row.kind,  # pyright: ignore[reportArgumentType]  # written only through EventKind
        conversation_id=row.conversation_id or None,
        thread_id=row.thread_id or None,
        run_id=row.run_id,
        actor_id=row.actor_id,
        source=row.source,
        payload=payload,
        created_at=row.created_at,
        payload_error=error,
    )


class EventFields(TypedDict):
    """What a caller gives for one event-log row (`EventStore.append`, `event_values`)."""

    event_id: str
    event_type: str
    kind: EventKind
    source: str
    payload: JSONObject
    conversation_id: NotRequired[str | None]
    thread_id: NotRequired[str | None]
    run_id: NotRequired[str | None]
    actor_id: NotRequired[str | None]
    created_at: NotRequired[float | None]


def event_values(**fields: Unpack[EventFields]) -> dict[str, Any]:
    """The column values of one event-log row (for `EventStore.append`, or a store writing it atomically
    with its own row, as `RunStore.admit` does with a run's inbound event)."""
    kind = fields["kind"]
    if kind not in EVENT_KINDS:
        raise ValueError(f"unknown event kind {kind!r}; known: {', '.join(sorted(EVENT_KINDS))}")
    created_at = fields.get("created_at")
    return {
        "event_id": fields["event_id"],
        "event_type": fields["event_type"],
        "kind": kind,
        "conversation_id": fields.get("conversation_id") or "",
        "thread_id": fields.get("thread_id") or "",
        "run_id": fields.get("run_id"),
        "actor_id": fields.get("actor_id"),
        "source": fields["source"],
        "payload": fields["payload"],
        "created_at": time.time() if created_at is None else created_at,
    }


@cache
def _insert(dialect: Dialect) -> ReturningInsert[int]:
    """`insert_event`'s statement, built once per dialect on its first use, not at import: every run's
    event goes through it (`engine.core`)."""
    return ignoring_insert(dialect, table_of(EventRow), ["event_id"]).returning(table_of(EventRow).c.seq)


async def insert_event(session: AsyncSession, dialect: Dialect, values: dict[str, Any]) -> int | None:
    """Insert one event-log row unless its `event_id` is stored already; its seq, or None if it was."""
    return (await (await core(session)).execute(_insert(dialect), values)).scalar_one_or_none()


class EventStore:
    """Append and page the event log."""

    def __init__(self, db: Database, cursors: CursorCodec) -> None:
        self._db = db
        self._cursors = cursors

    @idempotent
    async def append(self, **fields: Unpack[EventFields]) -> tuple[StoredEvent, bool]:
        """Store an event unless its `event_id` is stored already; returns (row, created)."""
        values = event_values(**fields)
        async with self._db.write() as session:
            seq = await insert_event(session, self._db.dialect, values)
            row = (
                await session.execute(select(EventRow).where(EventRow.event_id == values["event_id"]))
            ).scalar_one()
            return _stored(row, self._cursors), seq is not None

    @idempotent
    async def get(self, event_id: str) -> StoredEvent:
        """The event with `event_id`."""
        async with self._db.read() as session:
            row = (
                await session.execute(select(EventRow).where(EventRow.event_id == event_id))
            ).scalar_one_or_none()
        if row is None:
            raise NotFoundError(f"Event {event_id!r} is not in the event log; check the id.")
        return _stored(row, self._cursors)

    @idempotent
    async def for_run(self, run_id: str, *, limit: int = 1000) -> list[StoredEvent]:
        """The first `limit` (1..1000) events a run logged, oldest first (for inspection)."""
        query = (
            select(EventRow)
            .where(EventRow.run_id == run_id)
            .order_by(EventRow.seq)
            .limit(check_limit(limit, 1000))
        )
        async with self._db.read() as session:
            rows = (await session.execute(query)).scalars().all()
        return [_stored(row, self._cursors) for row in rows]

    @idempotent
    async def page(
        self,
        conversation_id: str | None,
        thread_id: str | None = None,
        *,
        before: str | None = None,
        after: str | None = None,
        limit: int = 50,
        event_types: list[str] | None = None,
    ) -> Page[StoredEvent]:
        """A page of one conversation thread's events (see `_cursor` for the direction rules)."""
        window = self._cursors.window("events", before, after, limit)
        where = (
            EventRow.conversation_id == (conversation_id or ""),
            EventRow.thread_id == (thread_id or ""),
        )
        if event_types is None:
            query = window.apply(select(EventRow).where(*where), EventRow.seq)
        else:
            types = sorted(set(event_types))
            if not 1 <= len(types) <= MAX_EVENT_TYPES:
                raise InvalidArgumentError(
                    f"event_types must name 1 to {MAX_EVENT_TYPES} types; got {len(event_types)}."
                )
            # One range of the (conversation, thread, type, seq) index per type, merged by seq: reads
            # at most types x (limit + 1) index entries, however rare a type is.
            parts = [
                window.apply(
                    select(EventRow.seq).where(*where, EventRow.event_type == t), EventRow.seq
                ).subquery()
                for t in types
            ]
            merged = union_all(*[select(part.c.seq) for part in parts]).subquery()
            query = window.apply(select(EventRow).join(merged, EventRow.seq == merged.c.seq), EventRow.seq)
        async with self._db.read() as session:
            rows = (await session.execute(query)).scalars().all()
        return window.page(rows, lambda r: r.seq, lambda r: _stored(r, self._cursors))

    @idempotent
    async def thread_at(self, cursor: str) -> tuple[str | None, str | None] | None:
        """The (conversation_id, thread_id) of the event a cursor points at, or None when there is none."""
        seq = self._cursors.decode_seq(cursor, "events")
        query = select(EventRow.conversation_id, EventRow.thread_id).where(EventRow.seq == seq)
        async with self._db.read() as session:
            row = (await session.execute(query)).one_or_none()
        return None if row is None else (row.conversation_id or None, row.thread_id or None)
