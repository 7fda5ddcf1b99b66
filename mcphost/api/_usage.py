"""`GET /v1/usage`: host model calls totalled by agent, actor, model, conversation or UTC day; and
`GET /v1/runs/{run_id}/usage`: one run's model calls, a row per attempt.

Owns the queries (`group_by`, `from`, `to`) and the answers' shapes. Does not own the totals
(`stores.usage.ModelCallStore.totals`): calls still in flight (reserved) are not counted; failed
attempts are, with what they cost (usually nothing). A run's rows (`ModelCallStore.calls`) include a
call still in flight, as `reserved`, so a live run's page shows it.
"""

from __future__ import annotations

from pydantic import AwareDatetime, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcphost.api._http import parse_query, path_id
from mcphost.api._models import QueryModel
from mcphost.api._state import api_state
from mcphost.common.fielddocs import DocumentedModel
from mcphost.common.timestamps import json_with_iso
from mcphost.stores.usage import ModelCallRecord, UsageGroup, UsageTotal


class UsageQuery(QueryModel):
    model_config = ConfigDict(populate_by_name=True, defer_build=True)

    group_by: UsageGroup = "model"
    """`agent`, `actor`, `model`, `conversation` or `day` (UTC)."""
    from_: AwareDatetime | None = Field(default=None, alias="from")
    """Only calls made at or after this time: epoch seconds or ISO 8601 with a time zone."""
    to: AwareDatetime | None = None
    """Only calls made before this time."""


class UsageAnswer(DocumentedModel):
    """The answer of `GET /v1/usage`: one total per group, costliest first (at most 1000 groups)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    group_by: UsageGroup
    totals: list[UsageTotal]


class RunUsage(DocumentedModel):
    """The answer of `GET /v1/runs/{run_id}/usage`: the run's model calls, oldest first, one row per
    attempt (a call that fell back has a `failed` row per model it tried before; all its rows share the
    call's `created_at`), at most 1000."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    run_id: str
    items: list[ModelCallRecord]


async def usage(request: Request) -> Response:
    query = parse_query(request, UsageQuery)
    totals = await api_state(request).stores.usage.totals(
        query.group_by,
        since=query.from_.timestamp() if query.from_ else None,
        until=query.to.timestamp() if query.to else None,
    )
    return JSONResponse(UsageAnswer(group_by=query.group_by, totals=totals).model_dump(mode="json"))


async def run_usage(request: Request) -> Response:
    state = api_state(request)
    run_id = path_id(request, "run_id")
    await state.stores.runs.get(run_id)  # 404 for a run this host does not know
    calls = await state.stores.usage.calls(run_id)
    return JSONResponse(json_with_iso(RunUsage(run_id=run_id, items=calls)))
