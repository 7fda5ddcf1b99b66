"""`POST /v1/channels/{channel_id}`: a Slack, Telegram or Discord request becomes an event.

Owns the order of the steps: find the channel, read the body under its `max_bytes`, verify the request
and answer a platform handshake (the channel's adapter: `mcphost.channels`), normalize the payload,
answer a platform retry with its run, check that an agent takes the event, then store the raw payload
as an artifact (the event's `raw_ref`), admit the event and start streaming its run's reply (typing,
placeholder edits: `replies.py` through the sender). Does not own verification or mapping (the
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
- A message's files become lazy artifacts (`ArtifactStore.put_lazy`) listed in the run's
  `input.attachments`: nothing is downloaded here; the first read fetches them, bounded by the
  channel's `max_attachment_bytes`.
- `admit_channel_event` is the one path from a normalized event to a run, for this route and for a
  Discord Gateway connection alike, so a Gateway replay after RESUME dedupes like an HTTP retry.
- A retry (the same adapter key: Slack's `X-Slack-Retry-Num` resends, Telegram's redelivered
  `update_id`) answers 200 with the existing run in `X-Mcphost-Run-Id` and stores nothing again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcphost.api._http import check_storable, path_id, read_body
from mcphost.api._state import api_state
from mcphost.channels import MAX_ATTACHMENTS, ChannelAdapter, ChannelEvent, Target, envelope
from mcphost.errors import AmbiguousBindingError, NoBindingError, NotFoundError, UnavailableError
from mcphost.metrics import HostMetrics
from mcphost.orchestrator import Orchestrator
from mcphost.protocol import ArtifactRef, JSONObject
from mcphost.stores import Stores

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
    run_id, ignored = await admit_channel_event(
        state.stores,
        state.orchestrator,
        state.metrics,
        source,
        event,
        body,
        content_type=request.headers.get("content-type", "application/json"),
        draining=state.draining,
        stream_reply=state.stream_reply,
    )
    if ignored is not None:
        return await _ignored(request, source, event, ignored)
    return _answer(source, event, run_id=run_id)


async def admit_channel_event(
    stores: Stores,
    orchestrator: Orchestrator,
    metrics: HostMetrics,
    source: ChannelAdapter,
    event: ChannelEvent,
    raw: bytes,
    *,
    content_type: str = "application/json",
    draining: bool = False,
    stream_reply: Callable[[str, Target, str], None] | None = None,
) -> tuple[str | None, str | None]:
    """Admit one verified, normalized platform event (from this route or a Discord Gateway): its run id,
    or why it was ignored (`no_binding`). A retry answers the existing run and stores nothing; else the
    raw payload is stored as the event's `raw_ref` and each file it carried as a lazy artifact in its
    `input.attachments` (fetched on first read, bounded by `max_attachment_bytes`); a new run's reply is
    streamed through `stream_reply` (typing, placeholder edits).

    Raises:
        InvalidArgumentError: the event does not map to a storable envelope.
        UnavailableError: the host is draining.
    """
    channel_id = source.channel_id
    mapped = envelope(source, event)
    check_storable(mapped.model_dump(mode="json"), "mapped event")
    if draining:
        raise UnavailableError(
            "The host is shutting down and takes no new events; the platform retries later."
        )
    existing = await stores.runs.get_by_event(mapped.event_id)
    if existing is not None:
        metrics.event_admitted(created=False)
        return existing.run_id, None
    try:
        orchestrator.resolve(mapped)
    except (NoBindingError, AmbiguousBindingError) as exc:
        logger.warning(
            "channel %s: %s event %s taken by no agent: %s", channel_id, event.event_type, event.key, exc
        )
        return None, "no_binding"
    raw_artifact = await stores.artifacts.put_bytes(
        raw,
        name=f"{channel_id}-{mapped.event_id}.json"[:200],
        mime_type=content_type.split(";")[0][:100] or "application/json",
        max_bytes=max(len(raw), source.config.max_bytes),
        conversation_id=mapped.conversation_id,
    )
    if len(event.attachments) > MAX_ATTACHMENTS:
        logger.warning(
            "channel %s: event %s carries %d files; the first %d become artifacts",
            channel_id, event.key, len(event.attachments), MAX_ATTACHMENTS,
        )  # fmt: skip
    refs: list[ArtifactRef] = []
    for file in event.attachments[:MAX_ATTACHMENTS]:
        pending = await stores.artifacts.put_lazy(
            origin=channel_id,
            locator=file.locator,
            name=file.name[:1000] if file.name is not None else None,
            mime_type=file.mime_type[:200],
            declared_size=file.size,
            max_bytes=source.config.max_attachment_bytes,
            conversation_id=mapped.conversation_id,
        )
        refs.append(pending.to_ref())
    if refs:
        described = [
            {**meta, "artifact_id": ref.artifact_id}
            for meta, ref in zip([dict(a.meta) for a in event.attachments], refs, strict=False)
        ]
        mapped = mapped.model_copy(
            update={
                "input": mapped.input.model_copy(update={"attachments": refs}),
                "data": {**mapped.data, "attachments": described},
            }
        )
    admission = await orchestrator.submit(
        mapped.model_copy(update={"raw_ref": raw_artifact.artifact_id}), via="channel"
    )
    metrics.event_admitted(created=admission.created)
    if admission.created:
        await stores.channels.record_inbound(
            channel_id,
            event_type=mapped.event_type,
            source_event_type=event.source_event_type,
            run_id=admission.run.run_id,
            at=time.time(),
        )
        if stream_reply is not None:
            stream_reply(channel_id, event.target, admission.run.run_id)
    return admission.run.run_id, None


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
