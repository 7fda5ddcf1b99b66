"""Recorded runs: what a run started from and every per-run MCP request it made, with the answer.

Owns the `recordings` and `recorded_calls` tables. Does not decide which runs are recorded (the grant's
`record`, set from the agent or the event) nor what a call answered (the facts pipeline reports it), nor
the export document (`mcphost/recording.py`).

Invariants:
- A recording's header is written once, as its run starts and before its runner can call anything;
  writing it again changes nothing. Its rows go with the run (cascade) and, under `[retention]
  run_results_days`, with the run's results (`stores/retention.py`).
- Calls are numbered per run, 1, 2, 3, … without gaps, in the order their transactions commit (the
  audit table's scheme: a per-run lock, max(seq) + 1). A call of a run without a header is not stored.
- Only storable JSON is written: arguments or answers that are not (NaN, NUL, nested past
  `MAX_JSON_DEPTH`) are stored as an `{"unstorable": …}` marker with their SHA-256 instead, so a replay
  still matches such a call by its digest.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import func, insert, select

from mcphost.protocol import JSONObject
from mcphost.stores._retry import idempotent
from mcphost.stores._sql import insert_ignoring, lock_in_transaction
from mcphost.stores.engine import Database
from mcphost.stores.tables import RecordedCallRow, RecordingRow

CallAnswer = Literal["ok", "error"]


class RecordingHeader(BaseModel):
    """What a recorded run started from."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    run_id: str
    agent_id: str
    runner_id: str
    envelope: JSONObject
    """The event, as admitted (`AgentEventEnvelope` JSON)."""
    context: JSONObject
    """The run's context without its token (`AgentRunContext` JSON)."""
    agent: JSONObject
    """The `[[agents]]` entry the run was bound to (`AgentConfig` JSON)."""
    created_at: float = Field(default_factory=time.time)


class RecordedCallEntry(BaseModel):
    """One per-run MCP request and its answer, as the facts pipeline reports it."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    run_id: str
    tool: str
    """A tool name, or `resources/read`, `prompts/get`, `tools/list`."""
    arguments: JSONObject
    outcome: CallAnswer
    answer: JSONObject
    """"ok": the MCP result (`CallToolResult`, `ReadResourceResult`, …) as JSON; "error": the
    PROTOCOL §5 error `{code, message, retryable, details?}` a resource read or prompt raised, or a tool
    refused before its handler."""


class RecordedCall(RecordedCallEntry):
    """A stored call."""

    seq: int
    created_at: float


def _call(row: RecordedCallRow) -> RecordedCall:
    return RecordedCall(
        run_id=row.run_id,
        seq=row.seq,
        tool=row.tool,
        arguments=row.arguments,
        outcome="error" if row.outcome == "error" else "ok",
        answer=row.answer,
        created_at=row.created_at,
    )


class RecordingStore:
    """Write and read recordings."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @idempotent
    async def begin(self, header: RecordingHeader) -> None:
        """Store the header of a recorded run (once; a repeat changes nothing)."""
        async with self._db.write() as session:
            values: Mapping[str, Any] = header.model_dump()
            await session.execute(insert_ignoring(self._db.dialect, RecordingRow, values, ["run_id"]))

    async def append(self, entry: RecordedCallEntry) -> RecordedCall | None:
        """Store `entry` as the run's next call; None when the run has no recording."""
        async with self._db.write() as session:
            await lock_in_transaction(session, self._db.dialect, "recorded_calls", entry.run_id)
            known = (
                await session.execute(select(RecordingRow.run_id).where(RecordingRow.run_id == entry.run_id))
            ).scalar_one_or_none()
            if known is None:
                return None
            last = (
                await session.execute(
                    select(func.max(RecordedCallRow.seq)).where(RecordedCallRow.run_id == entry.run_id)
                )
            ).scalar_one()
            call = RecordedCall(**entry.model_dump(), seq=(last or 0) + 1, created_at=time.time())
            await session.execute(insert(RecordedCallRow).values(call.model_dump()))
        return call

    @idempotent
    async def header(self, run_id: str) -> RecordingHeader | None:
        """The run's recording header, or None when the run was not recorded (or it was collected)."""
        async with self._db.read() as session:
            row = await session.get(RecordingRow, run_id)
            if row is None:
                return None
            return RecordingHeader(
                run_id=row.run_id,
                agent_id=row.agent_id,
                runner_id=row.runner_id,
                envelope=row.envelope,
                context=row.context,
                agent=row.agent,
                created_at=row.created_at,
            )

    @idempotent
    async def calls(self, run_id: str) -> list[RecordedCall]:
        """Every recorded call of the run, by seq."""
        stmt = select(RecordedCallRow).where(RecordedCallRow.run_id == run_id).order_by(RecordedCallRow.seq)
        async with self._db.read() as session:
            rows = (await session.execute(stmt)).scalars().all()
        return [_call(row) for row in rows]
