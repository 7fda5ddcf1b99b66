"""`GET /v1/runtimes` and `POST /v1/runtimes/{runtime}/drain|disable|enable`: the operator's view of the
registered runtimes.

Owns listing runtimes (state, liveness, slots in use, capabilities, labels) and changing what an operator
allows one. Does not own adding or removing one (`mcphost runtimes add|remove`: the token is printed
once, on the machine that has the database) or the runtime protocol (`_runtime.py`).
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcphost.api._http import parse_query, path_id
from mcphost.api._models import QueryModel
from mcphost.api._state import api_state
from mcphost.stores import RuntimeRecord
from mcphost.stores.runtimes import RuntimeState


class RuntimeView(BaseModel):
    """One registered runtime (never its token)."""

    runtime_id: str
    name: str
    state: RuntimeState
    """What the operator allows: `online`, `draining` (no new claims) or `disabled` (token refused)."""
    alive: bool
    """It heartbeated within the last lease."""
    last_heartbeat_at: float | None
    slots: int
    running: int
    """Runs it holds now."""
    labels: dict[str, str]
    """Its effective labels: the ones it reports, overridden by the ones the operator gave."""
    capabilities: dict[str, Any]
    created_at: float


class RuntimesView(BaseModel):
    runtimes: list[RuntimeView]


def runtime_view(record: RuntimeRecord, lease_s: float, now: float) -> RuntimeView:
    return RuntimeView(
        runtime_id=record.runtime_id,
        name=record.name,
        state=record.state,
        alive=record.alive(lease_s, now),
        last_heartbeat_at=record.last_heartbeat_at,
        slots=record.slots,
        running=record.running,
        labels=record.effective_labels,
        capabilities=record.capabilities,
        created_at=record.created_at,
    )


def _lease_s(request: Request) -> float:
    remote = api_state(request).orchestrator.remote
    return remote.lease_s if remote is not None else 15.0


async def list_runtimes(request: Request) -> Response:
    parse_query(request, QueryModel)
    lease_s, now = _lease_s(request), time.time()
    records = await api_state(request).stores.runtimes.list()
    answer = RuntimesView(runtimes=[runtime_view(r, lease_s, now) for r in records])
    return JSONResponse(answer.model_dump(mode="json"))


async def _set_state(request: Request, state: RuntimeState) -> Response:
    parse_query(request, QueryModel)
    record = await api_state(request).stores.runtimes.set_state(path_id(request, "runtime"), state)
    return JSONResponse(runtime_view(record, _lease_s(request), time.time()).model_dump(mode="json"))


async def drain_runtime(request: Request) -> Response:
    return await _set_state(request, "draining")


async def disable_runtime(request: Request) -> Response:
    return await _set_state(request, "disabled")


async def enable_runtime(request: Request) -> Response:
    return await _set_state(request, "online")
