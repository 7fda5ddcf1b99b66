"""The conversation endpoints: the list by newest activity, deleting one, and a conversation's transcript
and event-log pages.

Owns what these routes do; the rows are the stores' (`stores/conversations.py`, `transcript`, `events`).
Does not own the route table (`_routes`) or errors (`_errors`): endpoints raise.

Invariants:
- A delete is refused (409, nothing deleted) while a run of the conversation is queued or running or an
  approval of it still decides one (`ConversationStore.delete`); it is logged with what it removed.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcphost.api._http import parse_model, parse_query
from mcphost.api._models import (
    ConversationPath,
    ConversationsPage,
    ConversationsQuery,
    EventsPage,
    EventsPageQuery,
    PageQuery,
    QueryModel,
    TranscriptPage,
)
from mcphost.api._state import api_state
from mcphost.common.timestamps import json_with_iso

logger = logging.getLogger("mcphost.api")


async def list_conversations(request: Request) -> Response:
    state = api_state(request)
    query = parse_query(request, ConversationsQuery)
    page = await state.stores.conversations.list(
        prefix=query.prefix,
        agent_id=query.agent,
        actor_id=query.actor,
        limit=query.limit,
        cursor=query.cursor,
    )
    answer = ConversationsPage(items=page.items, next_cursor=page.next_cursor, has_more=page.has_more)
    return JSONResponse(json_with_iso(answer))


async def delete_conversation(request: Request) -> Response:
    """Delete a conversation with everything it left; 409 (nothing deleted) while a run of it is active."""
    state = api_state(request)
    parse_query(request, QueryModel)
    path = parse_model(ConversationPath, dict(request.path_params), "path")
    deleted = await state.stores.conversations.delete(path.conversation_id)
    logger.info(
        "conversation %r deleted over the API: %d runs, %d events, %d transcript items, %d artifacts",
        path.conversation_id,
        deleted.runs,
        deleted.events,
        deleted.transcript,
        deleted.artifacts,
    )
    return JSONResponse(json_with_iso(deleted))


async def conversation_transcript(request: Request) -> Response:
    state = api_state(request)
    path = parse_model(ConversationPath, dict(request.path_params), "path")
    query = parse_query(request, PageQuery)
    page = await state.stores.transcript.page(
        path.conversation_id, query.thread_id, before=query.before, after=query.after, limit=query.limit
    )
    answer = TranscriptPage(
        items=page.items, next_cursor=page.next_cursor, prev_cursor=page.prev_cursor, has_more=page.has_more
    )
    return JSONResponse(json_with_iso(answer))


async def conversation_events(request: Request) -> Response:
    state = api_state(request)
    path = parse_model(ConversationPath, dict(request.path_params), "path")
    query = parse_query(request, EventsPageQuery)
    page = await state.stores.events.page(
        path.conversation_id,
        query.thread_id,
        before=query.before,
        after=query.after,
        limit=query.limit,
        event_types=query.event_type,
    )
    answer = EventsPage(
        items=page.items, next_cursor=page.next_cursor, prev_cursor=page.prev_cursor, has_more=page.has_more
    )
    return JSONResponse(json_with_iso(answer))
