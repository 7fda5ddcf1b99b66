"""History and events tools: `history_page`, `history_search`, `events_get`, `events_page`.

Owns how transcript items and events are cut into their runner-visible answers (the models are
`mcphost.protocol.facts.TranscriptItem` and `EventRecord`, PROTOCOL §7), and the scope rule for both: a run sees exactly its own conversation thread (the conversation's main line when
it has no thread), plus the events its own run logged. Does not own paging or SQL (`stores/`).

Invariants:
- Every store read is scoped by the grant's (conversation, thread); arguments never name a conversation.
- A cursor is checked before paging: it must point at an item of the run's own thread (another thread's
  cursor is `unauthorized`, a cursor pointing at nothing is `invalid_argument`), so a foreign cursor
  cannot even be used to probe positions.
- `events_get` of an event the run may not see and of an id that does not exist answer alike
  (`unauthorized`, the same message), so a run cannot probe which event ids exist elsewhere.
- A run without a conversation has no history and no conversation events: its pages are empty.
- Content is capped for the model: a transcript item's `content` (and each text element) at
  `MAX_CONTENT_CHARS` with `truncated` set; an event's `data` at `MAX_EVENT_DATA_BYTES` (`events_get`) or
  `MAX_PAGE_DATA_BYTES` (each event of a page) of JSON, else `data` is null with `data_truncated` set.
  Stored data nested deeper than `MAX_JSON_DEPTH` is null with `data_error` set: the page is served.
- `history_search` goes through the transcript's full-text index (`TranscriptStore.search`: FTS5/BM25
  on SQLite, tsvector on PostgreSQL), confined to the run's thread by the index itself, so its cost
  follows the hits, not the conversation.
"""

from __future__ import annotations

from typing import Any

from mcphost.errors import NotFoundError
from mcphost.facts._args import EventsGetArgs, EventsPageArgs, HistoryPageArgs, HistorySearchArgs
from mcphost.facts._call import Call
from mcphost.facts._results import ToolCallError, dumps
from mcphost.protocol import JSONObject
from mcphost.protocol.facts import (
    EventPage,
    EventRecord,
    HistoryPage,
    HistorySearch,
    SearchHit,
    TranscriptItem,
)
from mcphost.stores import Page, StoredEvent, TranscriptRecord

MAX_CONTENT_CHARS = 4000
MAX_EVENT_DATA_BYTES = 256 * 1024
MAX_PAGE_DATA_BYTES = 4 * 1024


def _cut(text: str) -> tuple[str, bool]:
    return (text, False) if len(text) <= MAX_CONTENT_CHARS else (text[:MAX_CONTENT_CHARS], True)


def transcript_item(record: TranscriptRecord, *, include_artifacts: bool) -> TranscriptItem:
    content, truncated = _cut(record.content)
    contents: list[JSONObject] = []
    for element in record.contents:
        if element.get("type") == "text":
            text, cut = _cut(str(element.get("text", "")))
            truncated = truncated or cut
            contents.append({**element, "text": text})
        elif include_artifacts:
            contents.append(element)
    return TranscriptItem(
        cursor=record.cursor,
        item_id=record.item_id,
        role=record.role,
        content=content,
        truncated=truncated,
        contents=contents,
        contents_error=record.contents_error,
        artifacts=list(record.artifacts) if include_artifacts else [],
        artifact_count=len(record.artifacts),
        event_id=record.event_id,
        run_id=record.run_id,
        actor_id=record.actor_id,
        created_at=record.created_at,
    )


def _cursors(page: Page[Any]) -> dict[str, Any]:
    return {"next_cursor": page.next_cursor, "prev_cursor": page.prev_cursor, "has_more": page.has_more}


def _where(call: Call) -> str:
    grant = call.grant
    thread = f" (thread {grant.thread_id!r})" if grant.thread_id else ""
    return f"conversation {grant.conversation_id!r}{thread}"


def _foreign_cursor(call: Call, cursor: str) -> ToolCallError:
    return ToolCallError(
        "unauthorized",
        f"Cursor {cursor[:40]!r} belongs to another conversation; this run may read only {_where(call)}.",
    )


def _dangling_cursor(cursor: str) -> ToolCallError:
    return ToolCallError(
        "invalid_argument",
        f"Cursor {cursor[:40]!r} does not point at anything; pass a cursor exactly as a page returned it.",
    )


async def _check_transcript_cursor(call: Call, cursor: str | None) -> None:
    if cursor is None:
        return
    thread = await call.stores.transcript.thread_at(cursor)
    if thread is None:
        raise _dangling_cursor(cursor)
    if not call.sees_thread(*thread):
        raise _foreign_cursor(call, cursor)


async def _check_event_cursor(call: Call, cursor: str | None) -> None:
    if cursor is None:
        return
    thread = await call.stores.events.thread_at(cursor)
    if thread is None:
        raise _dangling_cursor(cursor)
    if not call.sees_thread(*thread):
        raise _foreign_cursor(call, cursor)


async def history_page(call: Call, args: HistoryPageArgs) -> HistoryPage:
    """Page the run's conversation transcript."""
    conversation_id = call.grant.conversation_id
    if conversation_id is None:
        return HistoryPage(items=[], next_cursor=None, prev_cursor=None, has_more=False)
    await _check_transcript_cursor(call, args.before_cursor)
    await _check_transcript_cursor(call, args.after_cursor)
    page = await call.stores.transcript.page(
        conversation_id,
        call.grant.thread_id,
        before=args.before_cursor,
        after=args.after_cursor,
        limit=args.limit,
    )
    items = [transcript_item(r, include_artifacts=args.include_artifacts) for r in page.items]
    return HistoryPage(items=items, **_cursors(page))


async def history_search(call: Call, args: HistorySearchArgs) -> HistorySearch:
    """Search the run's conversation thread through the full-text index."""
    conversation_id = call.grant.conversation_id
    if conversation_id is None:
        return HistorySearch(hits=[])
    hits = await call.stores.transcript.search(
        conversation_id, call.grant.thread_id, query=args.query, roles=args.roles, limit=args.top_k
    )
    return HistorySearch(
        hits=[
            SearchHit(
                item=transcript_item(hit.record, include_artifacts=False),
                score=hit.score,
                snippet=hit.snippet,
            )
            for hit in hits
        ]
    )


def event_record(event: StoredEvent, *, max_data_bytes: int) -> EventRecord:
    """The envelope of a stored event with its data capped at `max_data_bytes` of JSON. Data that
    cannot be served (nested deeper than `MAX_JSON_DEPTH`) is null with `data_error` saying so."""
    unservable = event.payload_error is not None
    size = 0 if unservable else len(dumps(event.payload).encode())
    fits = not unservable and size <= max_data_bytes
    error: JSONObject | None = None
    if unservable:
        error = {"code": "runtime_error", "message": event.payload_error}
    return EventRecord(
        cursor=event.cursor,
        event_id=event.event_id,
        event_type=event.event_type,
        kind=event.kind,
        source=event.source,
        conversation_id=event.conversation_id,
        thread_id=event.thread_id,
        run_id=event.run_id,
        actor_id=event.actor_id,
        created_at=event.created_at,
        data=event.payload if fits else None,
        data_truncated=not fits and not unservable,
        data_size=size,
        data_error=error,
    )


def _sees_event(call: Call, event: StoredEvent) -> bool:
    return event.run_id == call.run_id or call.sees_thread(event.conversation_id, event.thread_id)


async def events_get(call: Call, args: EventsGetArgs) -> EventRecord:
    """One event of the run's conversation (or logged by the run)."""
    try:
        event = await call.stores.events.get(args.event_id)
    except NotFoundError:
        event = None
    if event is None or not _sees_event(call, event):
        raise ToolCallError(
            "unauthorized",
            f"Event {args.event_id!r} does not exist or is not readable by this run; it may read only "
            f"{_where(call)} and the events it logged.",
        )
    return event_record(event, max_data_bytes=MAX_EVENT_DATA_BYTES)


async def events_page(call: Call, args: EventsPageArgs) -> EventPage:
    """Page the run's conversation event log."""
    if call.grant.conversation_id is None:
        return EventPage(items=[], next_cursor=None, prev_cursor=None, has_more=False)
    await _check_event_cursor(call, args.before_cursor)
    await _check_event_cursor(call, args.after_cursor)
    page = await call.stores.events.page(
        call.grant.conversation_id,
        call.grant.thread_id,
        before=args.before_cursor,
        after=args.after_cursor,
        limit=args.limit,
        event_types=args.event_types,
    )
    items = [event_record(e, max_data_bytes=MAX_PAGE_DATA_BYTES) for e in page.items]
    return EventPage(items=items, **_cursors(page))
