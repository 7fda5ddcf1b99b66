"""`POST /v1/channels/{channel_id}`: a Slack, Telegram or Discord request becomes an event.

Owns the order of the steps: find the channel, read the body under its `max_bytes`, verify the request
and answer a platform handshake (the channel's adapter: `mcphost.channels`), normalize the payload,
answer a platform retry with its run, check that an agent takes the event, then store the raw payload
as an artifact (the event's `raw_ref`) and admit the event. Does not own verification or mapping (the
adapters), nor admission (the orchestrator). The route authenticates by the platform's signature, not
by the `/v1` API key (`_middleware` lets it through the key check).

Invariants:
- Nothing is stored for a refused request: an unknown channel (404), an oversized body (413), a missing
  or bad signature or a stale timestamp (401), and a verified body that is no JSON object or form (400)
  are refused before the artifact is written.
- A platform handshake (Slack's `url_verification`, Discord's PING) is answered as the platform asks
  and stores nothing.
- A verified event this host will not run — a kind the adapter does not map, a type outside the
  channel's `events`, or one no agent takes — is answered 200 with the platform's acknowledgement and
  `X-Mcphost-Ignored: <reason>`, logged and counted (the channel's status row, `stores/channels.py`:
  the reason and the platform's type), and stores no event, run or artifact: a platform redelivers
  what it got no 2xx for (Telegram holds the bot's later updates behind it), so refusing would block
  the chat.
- An event admitted as a new run becomes the channel's newest inbound (`stores.channels`); a refused
  request or a retry leaves the status row as it was.
- A retry (the same adapter key: Slack's `X-Slack-Retry-Num` resends, Telegram's redelivered
  `update_id`) answers 200 with the existing run in `X-Mcphost-Run-Id` and stores nothing again.
"""

from __future__ import annotations

import logging
import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcphost.api._http import check_storable, path_id, read_body
from mcphost.api._state import api_state
from mcphost.channels import ChannelAdapter, ChannelEvent, envelope
from mcphost.errors import AmbiguousBindingError, NoBindingError, NotFoundError, UnavailableError
from mcphost.protocol import JSONObject

logger = logging.getLogger(__name__)


def _answer(
    source: ChannelAdapter,
    event: ChannelEvent | None,
    *,
    run_id: str | None = None,
    ignored: str | None = None,
) -> Response:
    body: JSONObject | None = source.acknowledge(event)
    headers = {"X-Mcphost-Run-Id": run_id} if run_id is not None else {}
    if ignored is not None:
        headers["X-Mcphost-Ignored"] = ignored
    if body is None:
        return Response(status_code=200, headers=headers)
    return JSONResponse(body, status_code=200, headers=headers)


async def receive_channel(request: Request) -> Response:
    state = api_state(request)
    channel_id = path_id(request, "channel_id")
    source = state.channels.get(channel_id)
    if source is None:
        raise NotFoundError(
            f"No channel {channel_id[:100]!r} is configured here. Add a [channels.<id>] table to "
            "mcphost.toml, or check the URL.",
            details={"reason": "unknown_channel"},
        )
    body = await read_body(request, source.config.max_bytes)
    verdict = source.verify(request.headers, body, now=time.time())
    if verdict.answer is not None:
        return JSONResponse(verdict.answer, status_code=200)
    event = source.normalize(verdict)
    reason: str | None = None
    if event is None:
        reason = "unsupported_event"
    elif source.config.events is not None and event.event_type not in source.config.events:
        reason = "event_not_selected"
    if event is None or reason is not None:
        return await _ignored(request, source, event, reason or "unsupported_event")
    mapped = envelope(source, event)
    check_storable(mapped.model_dump(mode="json"), "mapped event")
    if state.draining:
        raise UnavailableError(
            "The host is shutting down and takes no new events; the platform retries later."
        )
    existing = await state.stores.runs.get_by_event(mapped.event_id)
    if existing is not None:
        state.metrics.event_admitted(created=False)
        return _answer(source, event, run_id=existing.run_id)
    try:
        state.orchestrator.resolve(mapped)
    except (NoBindingError, AmbiguousBindingError) as exc:
        logger.warning(
            "channel %s: %s event %s taken by no agent: %s", channel_id, event.event_type, event.key, exc
        )
        return await _ignored(request, source, event, "no_binding")
    raw = await state.stores.artifacts.put_bytes(
        body,
        name=f"{channel_id}-{mapped.event_id}.json"[:200],
        mime_type=request.headers.get("content-type", "application/json").split(";")[0][:100]
        or "application/json",
        max_bytes=source.config.max_bytes,
        conversation_id=mapped.conversation_id,
    )
    admission = await state.orchestrator.submit(
        mapped.model_copy(update={"raw_ref": raw.artifact_id}), via="channel"
    )
    state.metrics.event_admitted(created=admission.created)
    if admission.created:
        await state.stores.channels.record_inbound(
            channel_id,
            event_type=mapped.event_type,
            source_event_type=event.source_event_type,
            run_id=admission.run.run_id,
            at=time.time(),
        )
    return _answer(source, event, run_id=admission.run.run_id)


async def _ignored(
    request: Request, source: ChannelAdapter, event: ChannelEvent | None, reason: str
) -> Response:
    state = api_state(request)
    logger.info(
        "channel %s: %s ignored: %s",
        source.channel_id,
        event.source_event_type if event is not None else "an event of a kind not mapped",
        reason,
    )
    state.metrics.hook_ignored(f"channel:{source.channel_id}", reason)
    await state.stores.channels.record_ignored(
        source.channel_id,
        reason=reason,
        source_event_type=event.source_event_type if event is not None else None,
        at=time.time(),
    )
    return _answer(source, event, ignored=reason)
