"""The runtime audit of a remote run: which runtime held it under which fence, when it was claimed,
when its first result arrived, how often its lease was renewed, and its events.

Owns the `runtime_audit` table (migration 0027: the copy kept once a run ends) and the `RuntimeAudit`
view of a run, read from its `runtime_runs` row while it is queued or claimed. Does not own the queue
(`dispatch.py` writes the row's events and timings in the same transactions as the claims, renewals,
requeues and ends they describe, and calls `keep` when it drops the row).

Invariants:
- A claim that ends (requeued, lost, ended) records its runtime, fence, renewals and timings in the
  event that ends it (`claim_facts`), so the events alone tell every attempt's story.
- At most `EVENTS_KEPT` events per run, oldest dropped first; an `output` event per fence (a retried
  post replaces it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession

from mcphost.stores.tables import RuntimeAuditRow, RuntimeRunRow

EVENTS_KEPT = 50
"""Runtime audit events kept per run (claims, requeues, losses, outputs, ends), oldest dropped first."""


class RuntimeAudit(BaseModel):
    """Where a remote run ran: the runtime of its latest claim, that claim's fence and timings, and the
    events of every claim (`queued`, `claimed`, `output`, `requeued`, `lost`, `ended`), oldest first."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    run_id: str
    state: Literal["queued", "claimed", "ended"]
    """`ended`: the run ended on the host (the kept copy); else its queue row as it is now."""
    runtime_id: str | None
    runtime_name: str | None
    fence: int
    attempts: int
    """Claims made so far (attempt N is the Nth claim)."""
    queued_at: float
    claimed_at: float | None
    first_result_at: float | None
    renewals: int
    """Lease renewals (heartbeats) of the latest claim."""
    last_renewal_at: float | None
    lease_until: float | None
    """The latest claim's lease (None once ended)."""
    ended_at: float | None
    end_status: str | None
    output_artifact_id: str | None
    """The artifact holding the runner's output (stderr) the latest claim's runtime posted, if any."""
    events: list[dict[str, Any]]


_SHARED = (
    "runtime_id",
    "runtime_name",
    "fence",
    "attempts",
    "queued_at",
    "claimed_at",
    "first_result_at",
    "renewals",
    "last_renewal_at",
    "end_status",
)
"""The columns `runtime_runs` and `runtime_audit` share."""


def _shared(row: RuntimeRunRow | RuntimeAuditRow) -> dict[str, Any]:
    return {column: getattr(row, column) for column in _SHARED}


async def keep(session: AsyncSession, row: RuntimeRunRow, ended_at: float) -> None:
    """Copy `row`'s audit into `runtime_audit` (replacing an older copy), inside the caller's write."""
    await session.execute(delete(RuntimeAuditRow).where(RuntimeAuditRow.run_id == row.run_id))
    session.add(
        RuntimeAuditRow(run_id=row.run_id, ended_at=ended_at, events=list(row.events), **_shared(row))
    )


def claim_facts(row: RuntimeRunRow) -> dict[str, Any]:
    """The current claim's fence and timings, for the event that ends it."""
    return {
        "fence": row.fence,
        "runtime": row.runtime_name,
        "claimed_at": row.claimed_at,
        "first_result_at": row.first_result_at,
        "renewals": row.renewals,
        "last_renewal_at": row.last_renewal_at,
    }


def is_output_of(event: Any, fence: int) -> bool:
    """Whether a stored event is the `output` event of the claim under `fence`."""
    if not isinstance(event, dict):
        return False
    found: dict[str, Any] = event  # pyright: ignore[reportUnknownVariableType]  # events are JSON objects
    return found.get("event") == "output" and found.get("fence") == fence


def _output_of(events: Sequence[Any], fence: int) -> str | None:
    for event in reversed(events):
        if is_output_of(event, fence):
            found = event["artifact_id"]
            return found if isinstance(found, str) else None
    return None


def live_audit(row: RuntimeRunRow) -> RuntimeAudit:
    return RuntimeAudit(
        run_id=row.run_id,
        state=row.state,  # pyright: ignore[reportArgumentType]  # written as queued/claimed only
        lease_until=row.lease_until if row.state == "claimed" else None,
        ended_at=None,
        output_artifact_id=_output_of(row.events, row.fence),
        events=list(row.events),
        **_shared(row),
    )


def kept_audit(row: RuntimeAuditRow) -> RuntimeAudit:
    return RuntimeAudit(
        run_id=row.run_id,
        state="ended",
        lease_until=None,
        ended_at=row.ended_at,
        output_artifact_id=_output_of(row.events, row.fence),
        events=list(row.events),
        **_shared(row),
    )
