"""Host model calls and their budgets: the `model_calls` table (migration 0024).

Owns reserving a call against the budgets of `[agents.budget]` before the upstream is asked, recording
finished calls in batches (`record`: a row per attempt, a reserved call's row taking its last), and the totals `GET /v1/usage` and
`mcphost usage` report. Does not own calling models or pricing them (`mcphost.llm`, the proxy).

Invariants:
- `reserve` is one write transaction serialized per agent (`lock_in_transaction`: a PostgreSQL
  advisory lock; SQLite writes are serialized already), which sums what the agent's budgets already
  hold — a reserved row at its reservation, a finished one at its cost — and inserts the new
  reservation only if every budget still has room for it. So however many calls race, on however many
  replicas, the spend passes a budget by at most what one call costs beyond its reservation.
- What the budgets hold is read through indexes: the agent's rows of today ((agent_id, day)) and the
  run's rows of earlier days (run_id), never the agent's whole history.
- Both writes are hot-path transactions (`Database.run_write`): on a SQLite file each is one hop to
  the writer thread, not one round trip to aiosqlite's thread per statement, BEGIN and COMMIT (a usage
  batch took about ten, and each hand-off between the threads costs the event loop the CPU on a loaded
  machine). So their bodies only compute and execute statements.
- A reservation is finished once (`record` moves only a `reserved` row); a reservation its caller never
  finished (a crash), or not yet (its usage waits in the proxy's writer), counts at its reservation,
  which errs toward refusing, never overspending. A call without a budget is not reserved: its rows
  are inserted when it is recorded.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict
from sqlalchemy import bindparam, case, func, insert, select, union_all, update
from sqlalchemy.ext.asyncio import AsyncSession

from mcphost.common.fielddocs import DocumentedModel
from mcphost.errors import BudgetExceededError
from mcphost.models import new_id
from mcphost.stores._retry import idempotent
from mcphost.stores._sql import lock_in_transaction, scan_whole_tables
from mcphost.stores.engine import Database, core
from mcphost.stores.tables import ModelCallRow, table_of

UsageGroup = Literal["agent", "actor", "model", "conversation", "day"]
USAGE_GROUPS: tuple[UsageGroup, ...] = get_args(UsageGroup)
MAX_USAGE_ROWS = 1000


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)


class ModelBudget(_Frozen):
    """The model budgets of one agent (`[agents.budget]`); None: no cap."""

    model_tokens_per_run: int | None = None
    model_usd_per_run: float | None = None
    model_usd_per_day_per_actor: float | None = None
    model_usd_per_day: float | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in self.model_dump().values())


class CallStart(_Frozen):
    """Who calls which model, and the most the call may cost (its reservation)."""

    run_id: str
    agent_id: str
    actor_id: str | None
    conversation_id: str | None
    model_id: str
    upstream_model: str
    kind: str
    api: str
    streamed: bool
    reserved_tokens: int
    reserved_usd: float


class AttemptEnd(_Frozen):
    """How one attempt of a call ended."""

    model_id: str
    upstream_model: str
    attempt: int
    status: Literal["ok", "failed"]
    http_status: int | None = None
    error: str | None = None
    response_model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float | None = None
    ttft_ms: float | None = None


class FinishedCall(_Frozen):
    """A call as it ended: who made it, its reservation's row if it had one, and each attempt."""

    start: CallStart
    call_id: str | None
    """The `reserved` row `reserve` inserted, None when the call was not reserved (no budget)."""
    created_at: float
    """When the call began (its rows' `created_at` and UTC day)."""
    attempts: tuple[AttemptEnd, ...]


class ModelCallRecord(DocumentedModel):
    """One stored row: one attempt of a host model call."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    call_id: str
    run_id: str
    agent_id: str
    actor_id: str | None
    conversation_id: str | None
    model_id: str
    """The host's model id (`[models.<id>]`) this attempt called."""
    upstream_model: str
    """The model name sent upstream."""
    response_model: str | None
    """The model the upstream said answered."""
    kind: str
    api: str
    """The wire format the run spoke: `anthropic`, `chat` or `responses`."""
    streamed: bool
    attempt: int
    """1, then 2.. for each fallback model tried after a failure."""
    status: str
    """`reserved` while the call is in flight, then `ok` or `failed`."""
    http_status: int | None
    error: str | None
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost_usd: float
    latency_ms: float | None
    """From sending the attempt's request to the end of its answer; a failed attempt that fell back, to
    the start of the next attempt. None while the call is in flight."""
    ttft_ms: float | None
    """Time to the first streamed token (streamed calls only)."""
    created_at: float
    """When the call was made (shared by all attempts of one call)."""


class UsageTotal(_Frozen):
    """The totals of one group of finished calls."""

    key: str | None
    """The group's agent, actor, model, conversation or day (None: calls without one)."""
    calls: int
    failed: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost_usd: float


def utc_day(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d")


# Built once (`engine.core`): a budgeted call reserves, every call is recorded.
_CALLS = table_of(ModelCallRow)
_M = _CALLS.c
_HELD_USD = case((_M.status == "reserved", _M.reserved_usd), else_=_M.cost_usd)
_HELD_TOKENS = case(
    (_M.status == "reserved", _M.reserved_tokens),
    else_=_M.input_tokens + _M.output_tokens + _M.cached_tokens,
)
_THIS_RUN = _M.run_id == bindparam("w_run_id")
_TODAY = _M.day == bindparam("w_day")
_AGENT = _M.agent_id == bindparam("w_agent_id")
_HELD_COLUMNS = (
    case((_THIS_RUN, _HELD_TOKENS), else_=0).label("run_tokens"),
    case((_THIS_RUN, _HELD_USD), else_=0.0).label("run_usd"),
    case((_TODAY & (_M.actor_id == bindparam("w_actor_id")), _HELD_USD), else_=0.0).label("actor_usd"),
    case((_TODAY, _HELD_USD), else_=0.0).label("day_usd"),
)
# The agent's rows of today (index (agent_id, day)), and this run's rows of earlier days (index run_id: a
# run that crossed midnight; a run's rows are all its agent's). One `agent_id = ? AND (day = ? OR run_id
# = ?)` read every row the agent ever had: an index served only its agent_id, so a reservation cost as
# much as the agent's whole history.
_HELD_ROWS = union_all(
    select(*_HELD_COLUMNS).where(_AGENT, _TODAY),
    select(*_HELD_COLUMNS).where(_THIS_RUN, _M.day != bindparam("w_day")),
).subquery()
_HELD = select(
    func.coalesce(func.sum(_HELD_ROWS.c.run_tokens), 0),
    func.coalesce(func.sum(_HELD_ROWS.c.run_usd), 0.0),
    func.coalesce(func.sum(_HELD_ROWS.c.actor_usd), 0.0),
    func.coalesce(func.sum(_HELD_ROWS.c.day_usd), 0.0),
)
"""What an agent's budgets hold: this run's tokens and USD, the actor's USD today, the agent's USD today."""
_INSERT = insert(_CALLS)
_FINISH = update(_CALLS).where(_M.call_id == bindparam("w_call_id"), _M.status == "reserved")
"""A reserved row takes its call's last attempt (the values are the execution's other parameters)."""


class ModelCallStore:
    """Reserve, finish and total host model calls."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def reserve(self, start: CallStart, budget: ModelBudget) -> str:
        """Insert the call as `reserved` when every budget has room for its reservation; its id.

        Raises:
            BudgetExceededError: a budget is spent; `details["budget"]` names its key.
        """
        now = time.time()
        day = utc_day(now)
        call_id = new_id("mcall")

        async def reserve_in(session: AsyncSession) -> None:
            if budget.any:
                await lock_in_transaction(session, self._db.dialect, "model_budget", start.agent_id)
                params = {
                    "w_run_id": start.run_id,
                    "w_day": day,
                    "w_actor_id": start.actor_id,
                    "w_agent_id": start.agent_id,
                }
                held = (await (await core(session)).execute(_HELD, params)).one()
                run_tokens, run_usd, actor_usd, day_usd = (
                    int(held[0]),
                    float(held[1]),
                    float(held[2]),
                    float(held[3]),
                )
                checks: list[tuple[str, float | None, float, float]] = [
                    ("model_tokens_per_run", budget.model_tokens_per_run, run_tokens, start.reserved_tokens),
                    ("model_usd_per_run", budget.model_usd_per_run, run_usd, start.reserved_usd),
                    ("model_usd_per_day", budget.model_usd_per_day, day_usd, start.reserved_usd),
                ]
                if start.actor_id is not None:
                    checks.append(
                        (
                            "model_usd_per_day_per_actor",
                            budget.model_usd_per_day_per_actor,
                            actor_usd,
                            start.reserved_usd,
                        )
                    )
                for key, limit, spent, wanted in checks:
                    if limit is not None and spent + wanted > limit:
                        raise BudgetExceededError(
                            f"The model budget {key} = {limit:g} of agent {start.agent_id!r} is spent: "
                            f"{spent:g} used or held, and this call may need {wanted:g} more. Raise "
                            f"[agents.budget] {key}, or wait for the next UTC day for a daily budget.",
                            details={"budget": key, "limit": limit, "spent": spent, "wanted": wanted},
                        )
            await (await core(session)).execute(
                _INSERT,
                {
                    "call_id": call_id,
                    **start.model_dump(),
                    "response_model": None,
                    "attempt": 1,
                    "status": "reserved",
                    "http_status": None,
                    "error": None,
                    "input_tokens": 0,
                    "output_tokens": 0,
                    "cached_tokens": 0,
                    "cost_usd": 0.0,
                    "latency_ms": None,
                    "ttft_ms": None,
                    "created_at": now,
                    "day": day,
                },
            )

        await self._db.run_write(reserve_in)
        return call_id

    async def record(self, calls: Sequence[FinishedCall]) -> None:
        """Write finished calls in one transaction: a row per attempt. A reserved call's row takes its last
        attempt (only while still `reserved`: a call is finished once); every other attempt is inserted."""

        async def record_in(session: AsyncSession) -> None:
            inserted: list[dict[str, object]] = []
            for call in calls:
                assert call.attempts, "a finished call has at least one attempt"
                *earlier, last = call.attempts
                base = {
                    **call.start.model_dump(),
                    "reserved_tokens": 0,
                    "reserved_usd": 0.0,
                    "created_at": call.created_at,
                    "day": utc_day(call.created_at),
                }
                inserted.extend({**base, "call_id": new_id("mcall"), **_ended(a)} for a in earlier)
                if call.call_id is None:
                    inserted.append({**base, "call_id": new_id("mcall"), **_ended(last)})
                else:
                    await (await core(session)).execute(_FINISH, {"w_call_id": call.call_id, **_ended(last)})
            if inserted:
                await (await core(session)).execute(_INSERT, inserted)

        await self._db.run_write(record_in)

    @idempotent
    async def calls(self, run_id: str) -> list[ModelCallRecord]:
        """The run's model calls, oldest first."""
        async with self._db.read() as session:
            rows = (
                await session.execute(
                    select(ModelCallRow)
                    .where(ModelCallRow.run_id == run_id)
                    .order_by(ModelCallRow.created_at, ModelCallRow.attempt, ModelCallRow.call_id)
                    .limit(MAX_USAGE_ROWS)
                )
            ).scalars()
            return [ModelCallRecord.model_validate(row, from_attributes=True) for row in rows]

    @idempotent
    async def totals(
        self, group_by: UsageGroup, *, since: float | None = None, until: float | None = None
    ) -> list[UsageTotal]:
        """Finished calls totalled per group (at most `MAX_USAGE_ROWS` groups, costliest first), in
        [since, until) of their creation."""
        column = {
            "agent": ModelCallRow.agent_id,
            "actor": ModelCallRow.actor_id,
            "model": ModelCallRow.model_id,
            "conversation": ModelCallRow.conversation_id,
            "day": ModelCallRow.day,
        }[group_by]
        cost = func.sum(ModelCallRow.cost_usd)
        query = (
            select(
                column,
                func.count(),
                func.sum(case((ModelCallRow.status == "failed", 1), else_=0)),
                func.sum(ModelCallRow.input_tokens),
                func.sum(ModelCallRow.output_tokens),
                func.sum(ModelCallRow.cached_tokens),
                cost,
            )
            .where(ModelCallRow.status != "reserved")
            .group_by(column)
            .order_by(cost.desc(), column)
            .limit(MAX_USAGE_ROWS)
        )
        if since is not None:
            query = query.where(ModelCallRow.created_at >= since)
        if until is not None:
            query = query.where(ModelCallRow.created_at < until)
        async with self._db.read() as session:
            await scan_whole_tables(session, self._db.dialect)  # every finished call, or a window of them
            rows = (await session.execute(query)).all()
        return [
            UsageTotal(
                key=row[0],
                calls=int(row[1]),
                failed=int(row[2] or 0),
                input_tokens=int(row[3] or 0),
                output_tokens=int(row[4] or 0),
                cached_tokens=int(row[5] or 0),
                cost_usd=float(row[6] or 0.0),
            )
            for row in rows
        ]


def _ended(attempt: AttemptEnd) -> dict[str, object]:
    values = attempt.model_dump()
    values["error"] = attempt.error[:1000] if attempt.error else None
    return values


__all__ = [
    "USAGE_GROUPS",
    "AttemptEnd",
    "CallStart",
    "FinishedCall",
    "ModelBudget",
    "ModelCallRecord",
    "ModelCallStore",
    "UsageGroup",
    "UsageTotal",
]
