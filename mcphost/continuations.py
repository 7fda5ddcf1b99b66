"""Continuations: the run that carries on a conversation after a run parked on a person's decision.

Owns turning a decided (or expired) `parked` approval into exactly one continuation run: the event it
submits (same agent and conversation as the parked run, the decision as its input text and in
`data.continuation`) and the loop that finds the approvals no continuation was recorded for yet.
Does not own parking (`Orchestrator.park`, asked by the facts pipeline), the approval rows
(`stores/approvals.py`) or admission (`Orchestrator.submit`, passed in).

Invariants:
- One continuation per approval across replicas and retries: its `event_id` is
  `continuation_event_id(approval_id)` and admission is idempotent on `event_id`, so every submit of it
  answers the same run; `ApprovalStore.continued` then records that run on the approval.
- A decision through `POST /v1/approvals/{id}` continues at once (`resume`); a decision taken by
  `mcphost approvals`, on another replica that failed before submitting, or an approval that expired
  undecided (a denial) is continued by the loop within `SWEEP_S`.
- The continuation resumes the harness session: the parked run's `external.session_id` is still in the
  conversation state, so the runner passes it to the CLI (`--resume`, `codex exec resume`).
- An approval whose continuation cannot be admitted (its agent is gone, a `reject` conversation is
  busy) is logged and tried again on the next sweep.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskStatus

from mcphost.common.periodic import Periodic
from mcphost.errors import HostError
from mcphost.ingress import continuation_event_id
from mcphost.models import AgentEventEnvelope, EventInput
from mcphost.protocol import JSONObject
from mcphost.stores import Stores
from mcphost.stores.approvals import ApprovalRecord

logger = logging.getLogger(__name__)

SWEEP_S = 5.0
"""How often the loop looks for decided or expired parked approvals without a continuation."""
Submit = Callable[[AgentEventEnvelope], Awaitable[str]]
"""Admit an event (idempotent on `event_id`); the id of its run."""


def decision_text(approval: ApprovalRecord) -> str:
    """The continuation's input text: what was asked, what was decided, and what to do now."""
    note = f" Their note: {approval.note}" if approval.note else ""
    request = approval.request
    if approval.kind == "interaction":
        if approval.status == "approved":
            return (
                f"The person answered your question (approval {approval.approval_id}): {approval.note or ''}"
            )
        return (
            f"Nobody answered your question (approval {approval.approval_id} is {approval.status}). "
            "Continue without an answer, or say what you still need."
        )
    tool = request.get("tool")
    arguments = json.dumps(request.get("arguments"), ensure_ascii=False, sort_keys=True)
    if approval.status == "approved":
        return (
            f"A person approved your call of {tool} with arguments {arguments} "
            f"(approval {approval.approval_id}).{note} Call {tool} now with exactly these arguments: it "
            "runs once, without asking again. Then finish the task."
        )
    why = (
        "expired without a decision, which counts as denied" if approval.status == "expired" else "was denied"
    )
    return (
        f"Your call of {tool} with arguments {arguments} {why} (approval {approval.approval_id}).{note} "
        "The call did nothing. Do not call it again unchanged; finish without it."
    )


def continuation_data(approval: ApprovalRecord) -> JSONObject:
    """`data.continuation` of the continuation's event."""
    return {
        "run_id": approval.run_id,
        "approval_id": approval.approval_id,
        "kind": approval.kind,
        "status": approval.status,
        "note": approval.note,
        "request": approval.request,
    }


class Continuations:
    """Start the continuation runs of decided or expired parked approvals."""

    def __init__(self, stores: Stores, submit: Submit) -> None:
        self._stores = stores
        self._submit = submit

    async def resume(self, approval: ApprovalRecord) -> str | None:
        """Submit the continuation of `approval` (parked, decided or expired); its run id, or None when
        it is not due (undecided, not parked) or cannot be admitted now (logged)."""
        if not approval.parked or approval.status == "pending":
            return None
        if approval.continuation_run_id is not None:
            return approval.continuation_run_id
        parked = await self._stores.runs.get(approval.run_id)
        stored = await self._stores.events.get(parked.event_id)
        original = AgentEventEnvelope.model_validate(stored.payload)
        event = original.model_copy(
            update={
                "event_id": continuation_event_id(approval.approval_id),
                "event_time": time.time(),
                "source": "system",
                "raw_ref": None,
                "input": EventInput(text=decision_text(approval)),
                "data": {"continuation": continuation_data(approval)},
                "agent_id": parked.agent_id,
            }
        )
        try:
            run_id = await self._submit(AgentEventEnvelope.model_validate(event.model_dump()))
        except HostError as exc:
            logger.warning(
                "approval %s: its continuation of run %s could not be admitted; retrying later: %s",
                approval.approval_id,
                approval.run_id,
                exc.message,
            )
            return None
        await self._stores.approvals.continued(approval.approval_id, run_id)
        logger.info(
            "approval %s (%s): run %s continues parked run %s",
            approval.approval_id,
            approval.status,
            run_id,
            approval.run_id,
        )
        return run_id

    async def sweep(self) -> list[str]:
        """Continue every due parked approval without a recorded continuation; the runs started."""
        started: list[str] = []
        for approval in await self._stores.approvals.to_continue():
            try:
                run_id = await self.resume(approval)
            except Exception:
                logger.exception(
                    "approval %s: could not continue run %s", approval.approval_id, approval.run_id
                )
                continue
            if run_id is not None:
                started.append(run_id)
        return started


async def run_continuations(
    continuations: Continuations, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """The continuation loop, until cancelled: a sweep at once and every `SWEEP_S` after."""

    async def tick() -> None:
        await continuations.sweep()

    await Periodic("the continuation sweep", tick, interval_s=SWEEP_S).run(task_status=task_status)
