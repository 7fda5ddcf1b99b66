"""The transcript: a conversation's user inputs and assistant messages, projected from events.

Owns the `transcript` table. Does not decide what becomes a transcript row (the journal does) or how
an item is shown to a runner (content truncation happens where `TranscriptItem` is built).

Invariants:
- Append-only, idempotent on `item_id` (a repeated id returns the stored row), race-safe through the
  unique constraint.
- Reads are keyset on `seq` within one (conversation_id, thread_id) through the index of that name;
  no thread is "", and a thread's history is exactly its own rows. `head` (newest cursor, older items?) is
  one index probe; `for_run` reads the (run_id, seq) index.
- `thread_at` is a primary-key probe.
- Retried when their connection drops (`@idempotent`): every read, and `append` (its `item_id` is chosen
  before the first attempt, so a repeat finds the row an unacknowledged commit stored).
- Stored `contents` nested deeper than `MAX_JSON_DEPTH` read as `[]` with `contents_error` set, so one
  bad row never fails a page.
- `search` is full-text search over one conversation thread (migrations 0002 and 0004: FTS5 on SQLite, a
  GIN-indexed tsvector on PostgreSQL) and never returns another thread's rows, whatever their text says:
  the scope is a filter on columns, never words of the searched text. SQLite ANDs the thread's token,
  matched only in the FTS5 `scope` column, with the query's words, and checks (conversation_id,
  thread_id) on each joined row; PostgreSQL ANDs those column equalities with the words' `@@`, served by
  the GIN index on (conversation_id, search_vector), the thread a filter on the conversation's matches
  (migration 0020: with thread_id in the index, the entry of thread "" listed nearly the whole table).
  So a search costs what the conversation's matching items cost, whatever the size of the table. Ranked by
  `bm25()` / `ts_rank_cd()`, then newest first; each hit carries a snippet around its first match and
  its item's cursor, so a runner can page around it. Only the first 100,000 characters of an item are
  indexed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cache
from typing import Any, Required, TypedDict, Unpack

from pydantic import BaseModel, ConfigDict, TypeAdapter
from sqlalchemy import (
    ColumnElement,
    Float,
    Insert,
    Integer,
    String,
    and_,
    bindparam,
    column,
    exists,
    func,
    insert,
    literal_column,
    or_,
    select,
    table,
    text,
)
from sqlalchemy.ext.asyncio import AsyncSession

from mcphost.models import new_id
from mcphost.protocol import MAX_JSON_DEPTH, ArtifactRef, ContentElement, JSONObject, json_depth
from mcphost.protocol.facts import TranscriptRole
from mcphost.stores._cursor import CursorCodec, Page, check_limit
from mcphost.stores._fulltext import (
    fts5_match,
    pg_matches,
    pg_words_query,
    query_terms,
    snippet,
    thread_scope_sqlite,
)
from mcphost.stores._retry import idempotent
from mcphost.stores._sql import Dialect, ignoring_insert
from mcphost.stores.engine import Database, core
from mcphost.stores.tables import EventRow, TranscriptRow, table_of

ROLES: frozenset[str] = frozenset({"user", "assistant", "system", "event"})
_CONTENT: TypeAdapter[ContentElement] = TypeAdapter(ContentElement)
MAX_SEARCH_HITS = 50
SNIPPET_CHARS = 240


class TranscriptRecord(BaseModel):
    """One transcript item as stored, with the cursor that points at it."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    seq: int
    cursor: str
    item_id: str
    conversation_id: str
    thread_id: str | None
    role: TranscriptRole
    content: str
    contents: list[JSONObject]
    """`ContentElement`s as JSON."""
    contents_error: str | None = None
    """Set (and `contents` empty) when the stored contents nest deeper than `MAX_JSON_DEPTH` (stored
    before nesting was bounded, or straight into the database) and cannot be served."""
    artifacts: list[ArtifactRef]
    event_id: str | None
    run_id: str | None
    actor_id: str | None
    created_at: float


class TranscriptHit(BaseModel):
    """One full-text search hit: the item, its relevance (higher is better) and a snippet around the match."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    record: TranscriptRecord
    score: float
    snippet: str


class TranscriptDraft(BaseModel):
    """An item for `bulk_append` (imports and benchmarks)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    conversation_id: str
    thread_id: str | None = None
    role: TranscriptRole
    content: str
    created_at: float


def _record(row: TranscriptRow, cursors: CursorCodec) -> TranscriptRecord:
    contents, error = row.contents, None
    if json_depth(contents) > MAX_JSON_DEPTH:
        contents = []
        error = (
            f"The stored contents of item {row.item_id!r} nest arrays/objects more than {MAX_JSON_DEPTH} "
            "levels deep and cannot be served; `content` and the other fields are intact."
        )
    return TranscriptRecord(
        seq=row.seq,
        cursor=cursors.encode("transcript", row.seq),
        item_id=row.item_id,
        conversation_id=row.conversation_id,
        thread_id=row.thread_id or None,
        role=row.role,  # pyright: ignore[reportArgumentType]  # written only through TranscriptRole
        content=row.content,
        contents=contents,
        contents_error=error,
        artifacts=[ArtifactRef.model_validate(a) for a in row.artifacts],
        event_id=row.event_id,
        run_id=row.run_id,
        actor_id=row.actor_id,
        created_at=row.created_at,
    )


class ItemFields(TypedDict, total=False):
    """The fields of one transcript item (`item_values`); `conversation_id` and `role` are required."""

    conversation_id: Required[str]
    role: Required[TranscriptRole]
    content: str
    thread_id: str | None
    contents: Sequence[ContentElement | JSONObject]
    artifacts: Sequence[ArtifactRef | JSONObject]
    event_id: str | None
    run_id: str | None
    actor_id: str | None
    item_id: str | None
    created_at: float | None


def item_values(**fields: Unpack[ItemFields]) -> dict[str, Any]:
    """The `transcript` row of one item, validated (a new `item_id` unless given)."""
    role, conversation_id = fields["role"], fields["conversation_id"]
    if role not in ROLES:
        raise ValueError(f"unknown transcript role {role!r}; known: {', '.join(sorted(ROLES))}")
    if not conversation_id:
        raise ValueError("a transcript item needs a conversation_id")
    created_at = fields.get("created_at")
    return {
        "item_id": fields.get("item_id") or new_id("itm"),
        "conversation_id": conversation_id,
        "thread_id": fields.get("thread_id") or "",
        "role": role,
        "content": fields.get("content", ""),
        "contents": [
            _CONTENT.dump_python(_CONTENT.validate_python(c), mode="json") for c in fields.get("contents", ())
        ],
        "artifacts": [
            ArtifactRef.model_validate(a).model_dump(mode="json", exclude_none=True)
            for a in fields.get("artifacts", ())
        ],
        "event_id": fields.get("event_id"),
        "run_id": fields.get("run_id"),
        "actor_id": fields.get("actor_id"),
        "created_at": time.time() if created_at is None else created_at,
    }


@cache
def _add_item(dialect: Dialect) -> Insert:
    """`add_item`'s statement, built once per dialect on its first use, not at import: every run appends
    through it (`engine.core`)."""
    return ignoring_insert(dialect, table_of(TranscriptRow), ["item_id"])


async def add_item(session: AsyncSession, dialect: Dialect, values: dict[str, Any]) -> None:
    """Insert one item (`item_values`) inside `session` unless its `item_id` is stored."""
    await (await core(session)).execute(_add_item(dialect), values)


async def insert_item(session: AsyncSession, dialect: Dialect, values: dict[str, Any]) -> TranscriptRow:
    """Insert one item (`item_values`) inside `session` unless its `item_id` is stored; the stored row."""
    await add_item(session, dialect, values)
    stmt = select(TranscriptRow).where(TranscriptRow.item_id == values["item_id"])
    return (await session.execute(stmt)).scalar_one()


_HEAD = (
    select(TranscriptRow.seq)
    .where(
        TranscriptRow.conversation_id == bindparam("w_conversation"),
        TranscriptRow.thread_id == bindparam("w_thread"),
    )
    .order_by(TranscriptRow.seq.desc())
    .limit(2)
)
"""`thread_head`'s statement, built once: every run's start reads it (`engine.core`)."""


async def thread_head(
    session: AsyncSession, cursors: CursorCodec, conversation_id: str, thread_id: str | None
) -> tuple[str | None, bool]:
    """Inside `session`: the thread's newest cursor (None when empty) and whether it has older items."""
    params = {"w_conversation": conversation_id, "w_thread": thread_id or ""}
    seqs = (await (await core(session)).execute(_HEAD, params)).scalars().all()
    if not seqs:
        return None, False
    return cursors.encode("transcript", seqs[0]), len(seqs) > 1


class TranscriptStore:
    """Append and page conversation transcripts."""

    def __init__(self, db: Database, cursors: CursorCodec) -> None:
        self._db = db
        self._cursors = cursors

    async def append(self, **fields: Unpack[ItemFields]) -> TranscriptRecord:
        """Store one item (a new `item_id` unless given; a given id already stored returns that row).

        `contents` and `artifacts` may be models or their JSON; either is validated and stored as JSON.
        """
        return await self._insert(item_values(**fields))

    @idempotent
    async def _insert(self, values: dict[str, Any]) -> TranscriptRecord:
        async with self._db.write() as session:
            return _record(await insert_item(session, self._db.dialect, values), self._cursors)

    @idempotent
    async def page(
        self,
        conversation_id: str,
        thread_id: str | None = None,
        *,
        before: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> Page[TranscriptRecord]:
        """A page of one conversation thread (see `_cursor` for the direction rules)."""
        window = self._cursors.window("transcript", before, after, limit)
        query = window.apply(
            select(TranscriptRow).where(
                TranscriptRow.conversation_id == conversation_id,
                TranscriptRow.thread_id == (thread_id or ""),
            ),
            TranscriptRow.seq,
        )
        async with self._db.read() as session:
            rows = (await session.execute(query)).scalars().all()
        return window.page(rows, lambda r: r.seq, lambda r: _record(r, self._cursors))

    @idempotent
    async def for_run(self, run_id: str, *, limit: int = 1000) -> list[TranscriptRecord]:
        """The first `limit` (1..1000) items a run wrote or answered, oldest first (for inspection)."""
        query = (
            select(TranscriptRow)
            .where(TranscriptRow.run_id == run_id)
            .order_by(TranscriptRow.seq)
            .limit(check_limit(limit, 1000))
        )
        async with self._db.read() as session:
            rows = (await session.execute(query)).scalars().all()
        return [_record(row, self._cursors) for row in rows]

    @idempotent
    async def holds_message(self, conversation_id: str, message_id: str) -> bool:
        """Whether `message_id` is a message of the conversation: an item's `item_id`, or the `event_id`
        of an event the conversation's log holds (the platform's id of a message event). Two lookups by
        unique key (`transcript.item_id`, `events.event_id`), whatever the conversation's size."""
        item = select(TranscriptRow.seq).where(
            TranscriptRow.item_id == message_id, TranscriptRow.conversation_id == conversation_id
        )
        event = select(EventRow.seq).where(
            EventRow.event_id == message_id, EventRow.conversation_id == conversation_id
        )
        async with self._db.read() as session:
            return bool((await session.execute(select(or_(exists(item), exists(event))))).scalar_one())

    @idempotent
    async def head(self, conversation_id: str, thread_id: str | None = None) -> tuple[str | None, bool]:
        """The thread's newest cursor (None when empty) and whether it has older items, in one read.

        What a run context needs (`latest_cursor`, `has_history_before`): the two newest rows by index.
        """
        async with self._db.read() as session:
            return await thread_head(session, self._cursors, conversation_id, thread_id)

    @idempotent
    async def thread_at(self, cursor: str) -> tuple[str, str | None] | None:
        """The (conversation_id, thread_id) of the item a cursor points at, or None when there is none."""
        seq = self._cursors.decode_seq(cursor, "transcript")
        query = select(TranscriptRow.conversation_id, TranscriptRow.thread_id).where(TranscriptRow.seq == seq)
        async with self._db.read() as session:
            row = (await session.execute(query)).one_or_none()
        return None if row is None else (row.conversation_id, row.thread_id or None)

    @idempotent
    async def search(
        self,
        conversation_id: str,
        thread_id: str | None = None,
        *,
        query: str,
        roles: Sequence[str] | None = None,
        limit: int = 10,
    ) -> list[TranscriptHit]:
        """The `limit` (1..50) items of the thread most relevant to `query`, best first.

        Raises:
            InvalidArgumentError: the query has no words.
        """
        check_limit(limit, MAX_SEARCH_HITS)
        terms = query_terms(query)
        score: ColumnElement[float]
        thread = thread_id or ""
        if self._db.dialect == "sqlite":
            fts: ColumnElement[object] = literal_column("transcript_fts")
            source = table("transcript_fts", column("rowid", Integer))
            score = -func.bm25(fts, 0.0, 1.0, type_=Float)
            match = fts.op("MATCH", is_comparison=True)(
                fts5_match(thread_scope_sqlite(conversation_id, thread_id), terms)
            )
            stmt = (
                select(TranscriptRow, score.label("score"))
                .select_from(source)
                .join(TranscriptRow, TranscriptRow.seq == source.c.rowid)
            )
            # The match already holds only the thread's rows; the row check repeats it on the columns.
            # Unary `+` keeps SQLite from using the thread's index for it, so the match stays the outer
            # loop (one primary-key probe per hit) rather than being re-run for each row of the thread.
            in_thread = and_(
                literal_column("+transcript.conversation_id", String) == conversation_id,
                literal_column("+transcript.thread_id", String) == thread,
            )
        else:
            from sqlalchemy.dialects.postgresql import TSVECTOR  # loaded on PostgreSQL only

            vector = literal_column("transcript.search_vector", type_=TSVECTOR)
            words = pg_words_query(terms)
            match = pg_matches(vector, words)
            score = func.ts_rank_cd(vector, words, 1, type_=Float)
            stmt = select(TranscriptRow, score.label("score")).select_from(TranscriptRow)
            in_thread = and_(
                TranscriptRow.conversation_id == conversation_id, TranscriptRow.thread_id == thread
            )
        stmt = stmt.where(match, in_thread)
        if roles is not None:
            stmt = stmt.where(TranscriptRow.role.in_(list(roles)))
        stmt = stmt.order_by(literal_column("score", Float).desc(), TranscriptRow.seq.desc()).limit(limit)
        async with self._db.read() as session:
            rows = (await session.execute(stmt)).all()
        return [
            TranscriptHit(
                record=_record(row, self._cursors),
                score=float(f"{float(found):.6g}"),
                snippet=snippet(row.content, terms, SNIPPET_CHARS),
            )
            for row, found in rows
        ]

    async def optimize_search(self) -> None:
        """Compact the full-text index after a bulk load (see `KnowledgeStore.optimize`)."""
        async with self._db.write() as session:
            if self._db.dialect == "sqlite":
                await session.execute(text("INSERT INTO transcript_fts(transcript_fts) VALUES ('optimize')"))
            else:
                await session.execute(
                    text("SELECT gin_clean_pending_list('ix_transcript_search_vector'::regclass)")
                )
                await session.execute(text("ANALYZE transcript"))

    async def bulk_append(self, items: Sequence[TranscriptDraft]) -> int:
        """Append many items in one transaction with batched statements (imports and benchmarks)."""
        rows: list[dict[str, object]] = [
            {
                "item_id": new_id("itm"),
                "conversation_id": item.conversation_id,
                "thread_id": item.thread_id or "",
                "role": item.role,
                "content": item.content,
                "contents": [],
                "artifacts": [],
                "created_at": item.created_at,
            }
            for item in items
        ]
        if rows:
            async with self._db.write() as session:
                await session.execute(insert(TranscriptRow), rows)
        return len(rows)
