"""`GET /v1/approvals`, `GET /v1/approvals/{approval_id}` and `POST /v1/approvals/{approval_id}`: the
human decisions runs wait for and actions need.

Owns listing approvals (newest first, cursor pages, by status as of now or by run) and taking a
decision. Does not own the approval rows, their expiry or what a decision sets off
(`stores/approvals.py`; a waiting tool call reads the decision itself, `facts/_approvals.py`; a
parked run is continued by `continuations.py`).

Invariants:
- Deciding a `parked` approval starts its continuation run before answering (the answer's
  `continuation_run_id`); repeating the decision answers the same run.
- A decision is idempotent: repeating the decision an approval already has answers 200 with it
  unchanged; the other decision is a 409, and so is approving an expired approval.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcphost.api._endpoints import MAX_SMALL_BODY_BYTES
from mcphost.api._http import parse_json, parse_query, path_id, read_body
from mcphost.api._models import ApprovalsPage, ApprovalsQuery, DecisionBody, QueryModel
from mcphost.api._state import api_state
from mcphost.common.timestamps import json_with_iso


async def list_approvals(request: Request) -> Response:
    state = api_state(request)
    query = parse_query(request, ApprovalsQuery)
    page = await state.stores.approvals.list(
        status=query.status, run_id=query.run_id, limit=query.limit, cursor=query.cursor
    )
    answer = ApprovalsPage(items=page.items, next_cursor=page.next_cursor, has_more=page.has_more)
    return JSONResponse(json_with_iso(answer))


async def show_approval(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, QueryModel)
    approval = await state.stores.approvals.get(path_id(request, "approval_id"))
    return JSONResponse(json_with_iso(approval))


async def decide_approval(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, QueryModel)
    approval_id = path_id(request, "approval_id")
    body = parse_json(DecisionBody, await read_body(request, MAX_SMALL_BODY_BYTES))
    note = body.answer if body.answer is not None else body.note
    approval, changed = await state.stores.approvals.decide(approval_id, body.decision, note=note)
    if changed:
        state.metrics.approval_decided("answered" if body.decision == "answer" else approval.status)
    if approval.parked and state.continuations is not None:
        run_id = await state.continuations.resume(approval)
        approval = approval.model_copy(update={"continuation_run_id": run_id})
    return JSONResponse(json_with_iso(approval))
