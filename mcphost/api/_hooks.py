"""`POST /v1/hooks/{source}`: a signed webhook from a `[hooks.<source>]` sender becomes an event.

Owns the order of the steps: find the source, read the body under the source's `max_bytes`, verify the
signature and map the payload (`mcphost.hooks`), answer a replayed delivery with its run, check that an
agent takes the event, then store the raw payload as an artifact (the event's `raw_ref`) and admit the
event. Does not own the verification schemes or the mapping (`mcphost.hooks`), nor admission (the
orchestrator). The route authenticates by the sender's signature, not by the `/v1` API key (`_middleware`
lets it through the key check).

Invariants:
- Nothing is stored for a refused request: an unknown source (404), an oversized body (413), a bad
  signature or stale timestamp (401), and a payload that is not a JSON object or cannot be mapped (400)
  are all refused before the artifact is written; so is an event no agent takes (404/409).
- A verified GitHub `ping`, and an event outside the source's `events`, is answered 200
  (`{"ignored": true, "reason"}`), logged and counted, and stores and admits nothing.
- A replayed delivery id answers 202 with the existing run (`created: false`) and stores nothing again.
  The event id is `hook:<source>:<delivery id>` (`mcphost.hooks`), so only this source's own deliveries
  are found: a delivery id equal to an API client's `event_id` or another source's is a new event.
- With `replay_window_s`, the same body under another delivery id within the window is a 409
  (`replayed_body`): a lease per body in the database (`hooks.replay_lease`), so it holds across replicas;
  it is taken after the agent check, so a request refused before it holds nothing.
  Two copies of one delivery racing each other both get the one run; the loser's artifact is left
  unreferenced (for retention).
"""

from __future__ import annotations

import logging
import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcphost.api._http import check_storable, path_id, read_body
from mcphost.api._models import Admitted, HookIgnored
from mcphost.api._state import api_state
from mcphost.common.timestamps import json_with_iso
from mcphost.errors import ConflictError, NotFoundError, UnavailableError
from mcphost.hooks import REPLAY_LEASE_PREFIX, envelope, ignored, replay_lease, verify
from mcphost.orchestrator import Admission
from mcphost.stores.leases import LeaseStore

logger = logging.getLogger(__name__)


def _admitted(admission: Admission) -> Response:
    run = admission.run
    answer = Admitted(run_id=run.run_id, event_id=run.event_id, status=run.status, created=admission.created)
    return JSONResponse(
        json_with_iso(answer), status_code=202, headers={"Location": f"/v1/runs/{run.run_id}"}
    )


async def _hold_body(
    source: str, window_s: float, body: bytes, delivery_id: str | None, leases: LeaseStore
) -> None:
    """The source's replay window: the body is held for `window_s` by its delivery id; the same body
    under another id within it is refused (GitHub signs neither the id nor a time)."""
    name, holder = replay_lease(source, body, delivery_id)
    if not await leases.acquire(name, holder, term_s=window_s):
        raise ConflictError(
            f"Webhook for hook source {source!r} refused: this exact payload was admitted under another "
            f"delivery id less than {window_s:g} s ago (replay_window_s); a captured delivery is not "
            "admitted twice. Redeliver under the original delivery id, or change the payload.",
            details={"reason": "replayed_body"},
        )
    await leases.sweep(REPLAY_LEASE_PREFIX)


async def receive_hook(request: Request) -> Response:
    state = api_state(request)
    source = path_id(request, "source")
    hook = state.hooks.get(source)
    if hook is None:
        raise NotFoundError(
            f"No webhook source {source[:100]!r} is configured here. Add a [hooks.<source>] table to "
            "mcphost.toml, or check the URL.",
            details={"reason": "unknown_source"},
        )
    body = await read_body(request, hook.max_bytes)
    verified = verify(source, hook, request.headers, body, now=time.time())
    reason = ignored(hook, verified)
    if reason is not None:
        logger.info(
            "hook %s: delivery %s (%s) ignored: %s",
            source,
            verified.delivery_id,
            (verified.source_event_type or "no event name")[:100],
            reason,
        )
        state.metrics.hook_ignored(source, reason)
        answer = HookIgnored(reason=reason, source_event_type=verified.source_event_type)
        return JSONResponse(json_with_iso(answer), status_code=200)
    event = envelope(source, hook, verified)
    check_storable(event.model_dump(mode="json"), "mapped event")
    if state.draining:
        raise UnavailableError(
            "The host is shutting down and takes no new events; the sender should retry later."
        )
    if verified.delivery_id is not None:
        existing = await state.stores.runs.get_by_event(event.event_id)
        if existing is not None:
            state.metrics.event_admitted(created=False)
            return _admitted(Admission(existing, created=False))
    state.orchestrator.resolve(event)  # no agent takes it: refused before anything is stored
    if hook.replay_window_s is not None:
        await _hold_body(
            source, hook.replay_window_s, body, verified.delivery_id, LeaseStore(state.stores.db)
        )
    raw = await state.stores.artifacts.put_bytes(
        body,
        name=f"{source}-{event.event_id}.json"[:200],
        mime_type="application/json",
        max_bytes=hook.max_bytes,
        conversation_id=event.conversation_id,
    )
    admission = await state.orchestrator.submit(
        event.model_copy(update={"raw_ref": raw.artifact_id}), via="hook"
    )
    state.metrics.event_admitted(created=admission.created)
    return _admitted(admission)
