"""The warm session's model route: `/sessions/{session_id}/models/...`, the model endpoints of whichever
run of a warm harness session is current.

A warm harness process (`mcphost.warm`) outlives each run of its conversation, so a CLI on a host model
cannot be given one run's model endpoint and token: after that run ended every call would be refused.
It is given the session's model endpoints and the session token instead, as its MCP config is given
`/sessions/{session_id}/mcp`. This module owns authenticating such a request and naming the run it
belongs to: the session id's form (404), the session token (as `x-api-key` or `Authorization: Bearer`,
compared in constant time under the database's key; 401), and the session's current run, read from the
database for every request, never cached. Does not own the call: `ModelProxy` serves it exactly as on
that run's own endpoints (its grant, budget, usage rows, recording and deadline), and refuses it (403,
`no_run_message`) when the run's grant is no longer active.

Invariants:
- A session token never stands for a run token, nor the other way round: the session route takes only
  the session's token, and the run routes take only their run's.
- Between runs (no running run with an unrevoked grant) every call is refused, on every replica, from
  the commit that ended the run; a call in flight when the run ends is that run's (`end_run` closes it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from mcphost.errors import StorageUnavailableError
from mcphost.llm.wire import ErrorKind
from mcphost.warm import SESSION_ID, WarmSessions

logger = logging.getLogger(__name__)


@dataclass
class SessionRefusedError(Exception):
    """A session model request refused before any run's grant is read."""

    status: int
    kind: ErrorKind
    message: str


def no_run_message(session_id: str) -> str:
    return (
        f"warm session {session_id} has no run in progress: the host refuses its model calls between "
        "the runs of the session; the next run of its conversation binds it again"
    )


async def session_run(warm: WarmSessions | None, session_id: str, token: str | None) -> str:
    """The id of the run the session's model endpoints serve now, when `token` is the session's.

    Raises:
        SessionRefusedError: an unknown session path (404), a missing or wrong token (401), no run in
            progress (403), or the database could not be read (503).
    """
    if warm is None or not SESSION_ID.match(session_id):
        raise SessionRefusedError(404, "not_found", f"warm session {session_id[:100]!r} does not exist")
    if token is None:
        raise SessionRefusedError(
            401,
            "authentication",
            "missing credential: send the session token as x-api-key or Authorization: Bearer",
        )
    if not warm.token_matches(session_id, token):
        raise SessionRefusedError(401, "authentication", "the credential is not this session's token")
    try:
        run_id = await warm.current_run(session_id)
    except StorageUnavailableError as exc:
        logger.warning("could not read the current run of warm session %s: %s", session_id, exc.message)
        raise SessionRefusedError(
            503, "upstream", "the host cannot read warm sessions right now; retry"
        ) from None
    if run_id is None:
        raise SessionRefusedError(403, "permission", no_run_message(session_id))
    return run_id
