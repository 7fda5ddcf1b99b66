"""Calls marked `ask`: a tool call that waits, within its run's deadline, for a person's decision.

Owns which calls of a run need an approval (the grant's `ask` globs, from `[agents.approvals]`) and
the wait. Does not own the approval rows, their expiry or the decision (`stores/approvals.py`; people
decide through `POST /v1/approvals/{id}` or `mcphost approvals`, on any replica).

Invariants:
- The pipeline asks only after every other check passed (grant, deadline, limits, permission,
  arguments), so a call that would be refused anyway never bothers a person, and nothing is written
  before an approval: denied, expired or out of time, the call does nothing and answers an error.
- The wait reads the database (every `POLL_S`), so a decision taken on any replica or by the CLI
  reaches the waiting call; it is an in-flight call like any other, cancelled with its run.
- Approved: the call proceeds. Denied or expired: `approval_denied` naming the approval, its status and
  the note. The run's deadline first: `deadline_exceeded`, and the approval stays pending (a decision
  taken later changes nothing).
"""

from __future__ import annotations

import fnmatch
import time
from typing import Any

import anyio

from mcphost.facts._call import Call
from mcphost.facts._results import ToolCallError
from mcphost.models import RunGrant
from mcphost.protocol import JSONObject, unstorable

POLL_S = 0.2
"""How often a waiting call reads its approval."""


def asks(grant: RunGrant, tool: str) -> bool:
    """Whether calls of `tool` wait for a person's approval in this run."""
    return any(fnmatch.fnmatchcase(tool, pattern) for pattern in grant.ask)


async def await_approval(call: Call, tool: str, arguments: dict[str, Any]) -> None:
    """Return when a person approved this call; raise the tool error the agent gets otherwise."""
    if not asks(call.grant, tool):
        return
    problem = unstorable(arguments)
    if problem is not None:  # host tool arguments are otherwise passed through unchecked
        raise ToolCallError(
            "invalid_argument",
            f"Invalid arguments: {problem.message()}.",
            details={"errors": [{"field": problem.path or "(arguments)", "message": problem.reason}]},
        )
    request: JSONObject = {"tool": tool, "arguments": arguments}
    approval = await call.stores.approvals.request(call.run_id, "tool", request)
    with anyio.move_on_after(max(0.0, call.grant.deadline_at - time.time())):
        while True:  # a poll, not an event: the decision may be taken on another replica
            current = await call.stores.approvals.get(approval.approval_id)
            if current.status != "pending":
                break
            await anyio.sleep(POLL_S)
        if current.status == "approved":
            return
        note = f" (note: {current.note})" if current.note else ""
        raise ToolCallError(
            "approval_denied",
            f"Calling {tool!r} needed a person's approval and approval {approval.approval_id!r} is "
            f"{current.status}{note}; the call did nothing. Do not retry it unchanged.",
            details={"approval_id": approval.approval_id, "status": current.status, "note": current.note},
        )
    raise ToolCallError(
        "deadline_exceeded",
        f"Run {call.run_id!r} reached its deadline while {tool!r} waited for approval "
        f"{approval.approval_id!r}; the call did nothing.",
        details={"approval_id": approval.approval_id, "deadline_at": call.grant.deadline_at},
    )
