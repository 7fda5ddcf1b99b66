"""Calls marked `ask`: a tool call that waits, within its run's deadline, for a person's decision.

Owns the wait of a call that needs an approval (the grant's `ask` globs, from `[agents.approvals]`,
matched by `grants.asks_approval`, which `mcphost explain` shows too). Does not own the approval rows, their expiry or the decision (`stores/approvals.py`; people
decide through `POST /v1/approvals/{id}` or `mcphost approvals`, on any replica).

Invariants:
- The pipeline asks only after every other check passed (grant, deadline, limits, permission,
  arguments), so a call that would be refused anyway never bothers a person, and nothing is written
  before an approval: denied, expired or out of time, the call does nothing and answers an error.
- The wait (`ApprovalStore.wait`) wakes at once on a decision taken in this process and reads the
  database for one taken on another replica or by the CLI; it is an in-flight call like any other,
  cancelled with its run.
- A run whose runner parks (`grant.parks`, a CLI harness that cannot hold a call open for hours)
  does not wait: the call creates a `parked` approval, asks the orchestrator to park the run (stop its
  runner, end it `parked`) and answers `approval_pending` at once, so the runner sees why it stops. The
  decision starts a continuation run (`continuations.py`); there, the first call with the same tool
  and arguments uses the approved request (`ApprovalStore.use`) and proceeds without asking again.
- Approved: the call proceeds. Denied or expired: `approval_denied` naming the approval, its status and
  the note. The run's deadline first: `deadline_exceeded`. A call that stops waiting without a decision
  (deadline, cancel) marks its approval `expired`, so nobody is left asked about a call that is gone.
"""

from __future__ import annotations

from typing import Any, NoReturn

import anyio

from mcphost.facts._call import Call
from mcphost.facts._results import ToolCallError
from mcphost.grants import asks_approval
from mcphost.protocol import JSONObject, unstorable

ABANDON_TIMEOUT_S = 5.0
"""How long a call that stops waiting may spend marking its approval expired (shielded from its cancel)."""


async def await_approval(call: Call, tool: str, arguments: dict[str, Any]) -> None:
    """Return when a person approved this call; raise the tool error the agent gets otherwise."""
    if asks_approval(call.grant, tool) is None:
        return
    problem = unstorable(arguments)
    if problem is not None:  # host tool arguments are otherwise passed through unchecked
        raise ToolCallError(
            "invalid_argument",
            f"Invalid arguments: {problem.message()}.",
            details={"errors": [{"field": problem.path or "(arguments)", "message": problem.reason}]},
        )
    request: JSONObject = {"tool": tool, "arguments": arguments}
    approvals = call.stores.approvals
    if call.grant.parks and call.park is not None:
        if await approvals.use(call.run_id, request) is not None:
            return  # approved while its run was parked: this continuation's one use of it
        await _park(call, tool, request)
    approval = await approvals.request(call.run_id, "tool", request)
    current = approval
    try:
        current = await approvals.wait(approval.approval_id, until=call.grant.deadline_at)
    finally:
        if current.status == "pending":  # out of time, cancelled, or the store failed: nobody waits now
            with anyio.CancelScope(shield=True), anyio.move_on_after(ABANDON_TIMEOUT_S):
                await approvals.abandon(approval.approval_id)
    if current.status == "approved":
        return
    if current.status == "pending":
        raise ToolCallError(
            "deadline_exceeded",
            f"Run {call.run_id!r} reached its deadline while {tool!r} waited for approval "
            f"{approval.approval_id!r}; the call did nothing and the approval is now expired.",
            details={"approval_id": approval.approval_id, "deadline_at": call.grant.deadline_at},
        )
    note = f" (note: {current.note})" if current.note else ""
    raise ToolCallError(
        "approval_denied",
        f"Calling {tool!r} needed a person's approval and approval {approval.approval_id!r} is "
        f"{current.status}{note}; the call did nothing. Do not retry it unchanged.",
        details={"approval_id": approval.approval_id, "status": current.status, "note": current.note},
    )


async def _park(call: Call, tool: str, request: JSONObject) -> NoReturn:
    """Create the parked approval, park the run and answer `approval_pending`."""
    assert call.park is not None
    approval = await call.stores.approvals.request(call.run_id, "tool", request, parked=True)
    await call.park(call.run_id, approval.approval_id)
    raise ToolCallError(
        "approval_pending",
        f"Calling {tool!r} needs a person's approval (approval {approval.approval_id!r}); the call did "
        "nothing yet. This run stops now and ends parked. The decision continues this conversation in "
        "a new turn that states it; when approved, call the tool again there with the same arguments. "
        "End your turn now.",
        details={"approval_id": approval.approval_id, "parked": True},
    )
