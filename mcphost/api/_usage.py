"""`GET /v1/usage`: host model calls totalled by agent, actor, model, conversation or UTC day.

Owns the query (`group_by`, `from`, `to`) and the answer's shape. Does not own the totals
(`stores.usage.ModelCallStore.totals`): calls still in flight (reserved) are not counted; failed
attempts are, with what they cost (usually nothing).
"""

from __future__ import annotations

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcphost.api._http import parse_query
from mcphost.api._models import QueryModel
from mcphost.api._state import api_state
from mcphost.stores.usage import UsageGroup, UsageTotal


class UsageQuery(QueryModel):
    model_config = ConfigDict(populate_by_name=True)

    group_by: UsageGroup = "model"
    """`agent`, `actor`, `model`, `conversation` or `day` (UTC)."""
    from_: AwareDatetime | None = Field(default=None, alias="from")
    """Only calls made at or after this time: epoch seconds or ISO 8601 with a time zone."""
    to: AwareDatetime | None = None
    """Only calls made before this time."""


class UsageAnswer(BaseModel):
    """The answer of `GET /v1/usage`: one total per group, costliest first (at most 1000 groups)."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    group_by: UsageGroup
    totals: list[UsageTotal]


async def usage(request: Request) -> Response:
    query = parse_query(request, UsageQuery)
    totals = await api_state(request).stores.usage.totals(
        query.group_by,
        since=query.from_.timestamp() if query.from_ else None,
        until=query.to.timestamp() if query.to else None,
    )
    return JSONResponse(UsageAnswer(group_by=query.group_by, totals=totals).model_dump(mode="json"))
