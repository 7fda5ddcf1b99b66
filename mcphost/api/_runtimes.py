"""`GET /v1/runtimes`, `POST /v1/runtimes/{runtime}/drain|disable|enable` and
`GET /v1/runs/{run_id}/runtime`: the operator's view of the registered runtimes and of where a run ran.

Owns listing runtimes (state, liveness, slots in use, the runs they hold, capabilities, labels), changing
what an operator allows one, and a run's runtime audit (runtime, fence, claim timings, lease renewals,
events, the artifact of its runner's output). Does not own adding or removing one (`mcphost runtimes add|remove`: the token is printed
once, on the machine that has the database) or the runtime protocol (`_runtime.py`).
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcphost.api._http import parse_query, path_id
from mcphost.api._models import QueryModel
from mcphost.api._state import api_state
from mcphost.stores import RuntimeRecord
from mcphost.stores.dispatch import RuntimeClaim
from mcphost.stores.runtime_audit import RuntimeAudit
from mcphost.stores.runtimes import RuntimeState


class _View(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built when first served, not at import


class RuntimeView(_View):
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
    runs: list[RuntimeClaim] = []
    """The runs it holds now: run id, fence, attempt, when claimed, lease and last renewal."""
    labels: dict[str, str]
    """Its effective labels: the ones it reports, overridden by the ones the operator gave."""
    capabilities: dict[str, Any]
    created_at: float


class RuntimesView(_View):
    runtimes: list[RuntimeView]


class RunRuntimeView(_View):
    """Where a run ran: `runtime` is null for a run executed on the host itself (a local agent)."""

    run_id: str
    runtime: RuntimeAudit | None


def runtime_view(
    record: RuntimeRecord, lease_s: float, now: float, runs: list[RuntimeClaim] | None = None
) -> RuntimeView:
    return RuntimeView(
        runtime_id=record.runtime_id,
        name=record.name,
        state=record.state,
        alive=record.alive(lease_s, now),
        last_heartbeat_at=record.last_heartbeat_at,
        slots=record.slots,
        running=record.running,
        runs=runs or [],
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
    stores = api_state(request).stores
    records = await stores.runtimes.list()
    held = await stores.dispatch.held_runs()
    answer = RuntimesView(runtimes=[runtime_view(r, lease_s, now, held.get(r.runtime_id)) for r in records])
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


async def run_runtime(request: Request) -> Response:
    parse_query(request, QueryModel)
    run_id = path_id(request, "run_id")
    stores = api_state(request).stores
    await stores.runs.get(run_id)
    audit = await stores.dispatch.audit(run_id)
    return JSONResponse(RunRuntimeView(run_id=run_id, runtime=audit).model_dump(mode="json"))
