"""`POST /v1/explain`: the binding and grant an event would get, and why, without admitting it.

Owns the route: the body is read and validated like an event's (size limit, storable JSON, strict
types), then answered by `mcphost.explain` with this host's bindings and its live runners' manifests.
Does not own the explanation (`mcphost.explain`, on the real binding and grant code). Nothing is
stored; a runner that is not registered is a 404 `runner.not_found`, as it is for `POST /v1/events`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcphost.api._http import parse_json, read_body
from mcphost.api._state import api_state
from mcphost.common.timestamps import json_with_iso
from mcphost.explain import ExplainRequest, explain


async def explain_event(request: Request) -> Response:
    state = api_state(request)
    body = parse_json(ExplainRequest, await read_body(request, state.limits.max_event_bytes))
    registry = state.registry
    answer = explain(
        body.event, state.bindings, lambda runner_id: registry.get(runner_id).manifest, body.targets()
    )
    return JSONResponse(json_with_iso(answer))
