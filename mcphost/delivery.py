"""The sender of outbound webhooks and chat replies: claims due outbox rows and POSTs them, signed per
Standard Webhooks, or hands a `channel:<id>` row to its chat channel's adapter.

Owns sending (httpx2, only to the configured `[[webhooks]]` URL of each row), signing (`webhook-id`,
`webhook-timestamp`, `webhook-signature` through the `standardwebhooks` package), and the retry policy:
exponential back-off with jitter until the row's `expires_at`, then `dead`. Does not own which facts
become rows or the lease protocol (`stores/deliveries.py`).

Invariants:
- The sender is a task owned by the host (`DeliverySender.running()`, entered by `app.open_host`); it
  stops with the host, and a row it had claimed is claimed again by any host once the lease ends, so
  rows survive restarts and are spread across replicas without being sent twice by two live hosts.
- Claims are one periodic loop (`common/periodic.py`): it claims again at once after starting sends,
  when a send ends or a row is made due here (`wake`), else every `poll_s`; a failing claim is logged
  once and retried with back-off.
- Receivers are isolated: every claimed row is sent on a task of its own, and a host holds at most
  `per_url` rows of one URL at once (`DeliveryStore.claim` leaves a full URL's rows to later), so a
  receiver that never answers occupies only its own slots and delays no other receiver's rows.
- A send has a total deadline: its webhook's `timeout_s` (shorter than the lease, `config` checks),
  cut sooner at the lease's end. Each send is one recorded attempt; no send starts after `expires_at`;
  an outcome is written only under the lease it was sent on, so a sender that lost its lease cannot
  overwrite the next holder's.
- A 2xx answer is a delivery; anything else (another status, the deadline, a refused connection) is a
  failed attempt. Delivery is at least once: a host that dies between the receiver's 2xx and recording
  it sends the row again (with the same `webhook-id`, which receivers use to deduplicate).
- No order between rows, even to one receiver: rows go out as they come due and retries come back
  later; receivers order by the body's `timestamp`.
- A row whose URL is no longer configured goes `dead` without a request (its secret is gone).
- A chat reply (`channel:<id>` rows) is split at the platform's limit and its parts sent in order; the
  parts already sent are recorded with a failed attempt, so a retry sends only the rest. A platform's
  own wait (429 `Retry-After`, Telegram's `retry_after`) sets the next attempt instead of the back-off;
  an error the platform says is final (no such chat, a refused token) ends the row `dead` at once.
- A `message.completed` reply whose message this host streamed (`replies.ReplyStreams`) waits until
  the stream hands its placeholder over; its first part then edits the placeholder (a placeholder the
  platform no longer lets edit gets the part as a new message), and the id is kept in the row's body
  (`placeholder`) with a failed attempt, so a retry edits it too. A `run.failed` notice waits for the
  run's stream to end, and goes after a placeholder it left (`part` 1: a Discord follow-up, not the
  interaction's answer).
- After its text, a reply uploads the files its message names (`replies.reply_files`), counted in the
  body's `sent_files` like the parts; a file over the platform's `max_upload_bytes` (or
  `MAX_UPLOAD_BYTES`), or no longer stored, is a short notice in the chat instead.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial
from typing import Literal, get_args

import anyio
import httpx2
from anyio.abc import TaskGroup
from standardwebhooks import Webhook

from mcphost.channels import ChannelAdapter, ChannelSendError, Target
from mcphost.common.periodic import Periodic
from mcphost.config import DELIVERY_LEASE_S, WebhookConfig
from mcphost.errors import HostError
from mcphost.protocol import JSONObject, is_json_object
from mcphost.replies import Follow, ReplyStreams, artifact_of, content_text, reply_files
from mcphost.stores import ArtifactStore, DeliveryLease, DeliveryStore, EventStore
from mcphost.stores.deliveries import CHANNEL_URL_PREFIX, EXPIRED_ERROR

logger = logging.getLogger(__name__)

POLL_S = 0.5
"""How often an idle sender looks for due rows."""
LEASE_S = DELIVERY_LEASE_S
"""How long a claim holds a row: longer than a send (a webhook's `timeout_s`) can take."""
PER_URL = 4
"""Rows of one receiver a host sends at once."""
MAX_IN_FLIGHT = 64
"""Rows a host sends at once, all receivers together."""
CLAIM_LIMIT = 16
RETRY_BASE_S = 2.0
RETRY_MAX_S = 3600.0
UNCONFIGURED_ERROR = "the webhook URL is no longer configured in [[webhooks]]"
UNCONFIGURED_CHANNEL_ERROR = "the channel is no longer configured in [channels]"
MAX_UPLOAD_BYTES = 50 * 1024 * 1024
"""The largest file a reply uploads, whatever the platform allows (it is read into memory)."""
PLACEHOLDER_WAIT_S = 1.0
"""How soon a reply whose placeholder the stream still holds is tried again."""

DeliveryOutcome = Literal["delivered", "failed", "dead", "expired", "unconfigured", "superseded"]
"""What became of one claimed row on this host: `delivered` (2xx); `failed` (a failed send, tried again
later); `dead` (a failed send with no time left before `expires_at`); `expired` (found past
`expires_at`: dead without a request); `unconfigured` (its URL left `[[webhooks]]`: dead without a
request); `superseded` (sent, but the lease was taken over before the outcome was recorded)."""
DELIVERY_OUTCOMES: tuple[DeliveryOutcome, ...] = get_args(DeliveryOutcome)


DEFAULT_REDELIVERY_AGE_S = 24 * 3600.0


def redelivery_age(webhooks: Sequence[WebhookConfig], url: str) -> float:
    """How long a manual redelivery to `url` is retried: its webhook's `max_age_s`, else a day (the
    sender then ends a row whose URL is no longer configured `dead` again, without a request)."""
    return next((w.max_age_s for w in webhooks if w.url == url), DEFAULT_REDELIVERY_AGE_S)


def backoff(attempts: int, *, base_s: float = RETRY_BASE_S, max_s: float = RETRY_MAX_S) -> float:
    """Seconds before the next attempt after `attempts` failed ones: exponential, half of it jittered."""
    delay = min(max_s, base_s * 2 ** min(attempts - 1, 30))
    return delay / 2 + random.uniform(0, delay / 2)


def signed_headers(secret: str, delivery_id: str, body: str, *, now: float) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt."""
    stamp = datetime.fromtimestamp(int(now), UTC)
    return {
        "webhook-id": delivery_id,
        "webhook-timestamp": str(int(now)),
        "webhook-signature": Webhook(secret).sign(delivery_id, stamp, body),
        "content-type": "application/json",
    }


class DeliverySender:
    """Sends the outbox of one database from one host; any number of hosts may run one each."""

    def __init__(
        self,
        deliveries: DeliveryStore,
        webhooks: Sequence[WebhookConfig],
        host_id: str,
        *,
        poll_s: float | None = None,
        lease_s: float | None = None,
        retry_base_s: float | None = None,
        per_url: int | None = None,
        channels: Mapping[str, ChannelAdapter] | None = None,
        on_outcome: Callable[[DeliveryOutcome], None] | None = None,
        follow: Follow | None = None,
        artifacts: ArtifactStore | None = None,
        events: EventStore | None = None,
    ) -> None:
        """Timings default to the module's constants, read when the sender is made; `on_outcome` hears
        of every claimed row's end here (the metrics); `follow` (a run's results, live) streams the
        replies of channel runs (`stream`), and `artifacts` with `events` let replies upload files.

        Raises:
            ValueError: a webhook's `timeout_s` does not end before the lease.
        """
        self._deliveries = deliveries
        self._webhooks = {w.url: w for w in webhooks}
        self._channels = dict(channels or {})
        self._host_id = host_id
        self._poll_s = POLL_S if poll_s is None else poll_s
        self._lease_s = LEASE_S if lease_s is None else lease_s
        self._retry_base_s = RETRY_BASE_S if retry_base_s is None else retry_base_s
        self._per_url = PER_URL if per_url is None else per_url
        self._on_outcome = on_outcome
        late = [w.url for w in webhooks if w.timeout_s >= self._lease_s]
        if late:
            raise ValueError(
                f"webhooks {late!r}: timeout_s must be shorter than the {self._lease_s:g} s lease"
            )
        self._in_flight: Counter[str] = Counter()
        self._claims: Periodic | None = None
        """The claim loop while `running`."""
        self._streams = ReplyStreams(follow) if follow is not None and self._channels else None
        self._artifacts = artifacts
        self._events = events

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[None, None]:
        """Send due rows in the background for the block (nothing runs without webhooks or channels)."""
        if not self._webhooks and not self._channels:
            yield
            return
        async with (
            httpx2.AsyncClient(follow_redirects=False) as client,
            anyio.create_task_group() as tg,
        ):
            self._claims = Periodic(
                "the webhook sender", partial(self._claim, client, tg), interval_s=self._poll_s
            )
            tg.start_soon(self._claims.run)
            if self._streams is not None:
                self._streams.bind(client, tg)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
                self._claims = None
                if self._streams is not None:
                    self._streams.bind(None, None)
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    await self._deliveries.release(self._host_id)  # its rows: for the next host now

    def stream(self, channel_id: str, target: Target, run_id: str) -> None:
        """Stream the reply of a run of `channel_id`'s event admitted here: its typing indicator and
        placeholder edits (`replies.ReplyStreams`); nothing when the sender does not run."""
        source = self._channels.get(channel_id)
        if self._streams is not None and source is not None:
            self._streams.start(source, target, run_id)

    def wake(self) -> None:
        """Claim now rather than at the next poll (a row was just made due here, or a send ended)."""
        if self._claims is not None:
            self._claims.wake()

    async def _claim(self, client: httpx2.AsyncClient, tg: TaskGroup) -> float | None:
        """Claim what this host has room for and start a task per row; claim again at once when it
        started any, else wait for a free slot (`wake`) or the poll."""
        room = MAX_IN_FLIGHT - self._in_flight.total()
        if room <= 0:
            return None
        claims = await self._deliveries.claim(
            self._host_id,
            lease_s=self._lease_s,
            limit=min(CLAIM_LIMIT, room),
            per_url=self._per_url,
            in_flight=self._in_flight,
        )
        for row in claims.expired:
            self._count("expired")
            logger.warning("delivery %s to %s expired undelivered; it is dead", row.delivery_id, row.url)
        for lease in claims.leases:
            self._in_flight[lease.url] += 1
            tg.start_soon(self._send, client, lease)
        return 0 if claims.leases else None

    def _count(self, outcome: DeliveryOutcome) -> None:
        if self._on_outcome is not None:
            self._on_outcome(outcome)

    async def _send(self, client: httpx2.AsyncClient, lease: DeliveryLease) -> None:
        """One row's task: its send and outcome. A failure to record leaves the row to its lease's end."""
        try:
            self._count(await self._attempt(client, lease))
        except Exception as exc:
            logger.warning("delivery %s: could not record its outcome (%s); it is sent again once its lease ends",
                           lease.delivery_id, exc.__cause__ or exc)  # fmt: skip
        finally:
            self._in_flight[lease.url] -= 1
            if self._in_flight[lease.url] <= 0:
                del self._in_flight[lease.url]
            self.wake()

    async def _attempt(self, client: httpx2.AsyncClient, lease: DeliveryLease) -> DeliveryOutcome:
        if lease.url.startswith(CHANNEL_URL_PREFIX):
            return await self._reply(client, lease)
        webhook = self._webhooks.get(lease.url)
        if webhook is None:
            await self._deliveries.bury(lease, error=UNCONFIGURED_ERROR)
            return "unconfigured"
        now = time.time()
        deadline = min(webhook.timeout_s, lease.claimed_until - now)
        if now >= lease.expires_at:
            await self._deliveries.bury(lease, error=EXPIRED_ERROR)
            return "expired"
        if now >= lease.claimed_until:  # the claim itself outlasted the lease: the next claim sends it
            return "superseded"
        body = json.dumps(lease.body, separators=(",", ":"), ensure_ascii=False)
        error: str | None = None
        with anyio.move_on_after(deadline) as scope:
            try:
                response = await client.post(lease.url, content=body.encode(), timeout=webhook.timeout_s,
                                             headers=signed_headers(webhook.secret, lease.delivery_id, body, now=now))  # fmt: skip
                error = None if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"
            except httpx2.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"[:300]
        if scope.cancelled_caught:
            error = (
                f"no complete answer within {deadline:.3g} s, the send's deadline (the webhook's "
                "timeout_s, or less when the lease ended first)"
            )
        outcome: DeliveryOutcome
        if error is None:
            recorded, outcome = await self._deliveries.delivered(lease), "delivered"
            logger.info("delivered %s %s of run %s", lease.delivery_id, lease.type, lease.run_id)
        else:
            next_at = time.time() + backoff(lease.attempts + 1, base_s=self._retry_base_s)
            dead = next_at >= lease.expires_at
            recorded = await self._deliveries.retry(lease, error=error, next_attempt_at=next_at, dead=dead)
            outcome = "dead" if dead else "failed"
            logger.warning(
                "delivery %s to %s failed (%s)%s",
                lease.delivery_id,
                lease.url,
                error,
                "; it is dead" if dead else "",
            )
        if not recorded:
            logger.warning(
                "delivery %s: its lease was taken over before the outcome (%s) was recorded; the new holder's "
                "stands", lease.delivery_id, outcome
            )  # fmt: skip
            return "superseded"
        return outcome

    async def _reply(self, client: httpx2.AsyncClient, lease: DeliveryLease) -> DeliveryOutcome:
        """One attempt at a chat reply: the parts not sent yet, in order, through the channel's adapter."""
        source = self._channels.get(lease.url.removeprefix(CHANNEL_URL_PREFIX))
        if source is None:
            await self._deliveries.bury(lease, error=UNCONFIGURED_CHANNEL_ERROR)
            return "unconfigured"
        now = time.time()
        if now >= lease.expires_at:
            await self._deliveries.bury(lease, error=EXPIRED_ERROR)
            return "expired"
        if now >= lease.claimed_until:
            return "superseded"
        if lease.type in ACTIONS:
            return await self._act(client, lease, source)
        try:
            target, parts = reply_of(source, lease.type, lease.body)
        except ValueError as exc:
            await self._deliveries.bury(lease, error=f"not a reply this channel can send: {exc}")
            return "dead"
        deadline = min(source.config.timeout_s, lease.claimed_until - now)
        sent = first = _count(lease.body, "sent_parts")
        uploaded = first_file = _count(lease.body, "sent_files")
        held = lease.body.get("placeholder")
        placeholder = held if isinstance(held, str) else None
        data = lease.body.get("data")
        files = reply_files(data) if lease.type == "message.completed" and is_json_object(data) else []
        error: str | None = None
        wait: float | None = None
        final = False
        with anyio.move_on_after(deadline) as scope:
            ready, offset = True, 0
            if sent == 0 and placeholder is None and parts:
                ready, placeholder = await self._placeholder(lease, source, deadline / 2)
            if (
                ready
                and lease.type == "run.failed"
                and self._streams is not None
                and lease.run_id is not None
            ):
                ready, kept = await self._streams.kept(lease.run_id, timeout=deadline / 2)
                offset = 1 if kept else 0  # after the placeholder the stream kept, not into it
            if not ready:
                error, wait = (
                    "the reply's placeholder is still being edited by its stream",
                    PLACEHOLDER_WAIT_S,
                )
            try:
                while ready and sent < len(parts):
                    if sent == 0 and placeholder is not None:
                        await self._replace(client, source, target, placeholder, parts[0])
                    else:
                        await source.send(client, target, parts[sent], part=sent + offset)
                    sent += 1
                while ready and uploaded < len(files):
                    await self._upload(
                        client, source, target, lease, files[uploaded], part=sent + uploaded + 1
                    )
                    uploaded += 1
            except ChannelSendError as exc:
                error, wait, final = str(exc)[:300], exc.retry_after, exc.permanent
        if scope.cancelled_caught:
            error = (
                f"no complete answer within {deadline:.3g} s, the send's deadline (the channel's timeout_s)"
            )
        if error is None:
            recorded, outcome = await self._deliveries.delivered(lease), "delivered"
            logger.info(
                "replied %s in %d part(s) and %d file(s) on %s for run %s",
                lease.delivery_id,
                len(parts),
                len(files),
                lease.url,
                lease.run_id,
            )
        else:
            next_at = time.time() + (
                wait if wait is not None else backoff(lease.attempts + 1, base_s=self._retry_base_s)
            )
            dead = final or next_at >= lease.expires_at
            progress: JSONObject | None = None
            if sent > first or uploaded > first_file or placeholder != held:
                progress = lease.body | {
                    "sent_parts": sent,
                    "sent_files": uploaded,
                    "placeholder": placeholder,
                }
            recorded = await self._deliveries.retry(
                lease, error=error, next_attempt_at=next_at, dead=dead, body=progress
            )
            outcome = "dead" if dead else "failed"
            logger.warning("reply %s on %s failed after %d of %d part(s) (%s)%s", lease.delivery_id, lease.url,
                           sent, len(parts), error, "; it is dead" if dead else "")  # fmt: skip
        return outcome if recorded else "superseded"

    async def _placeholder(
        self, lease: DeliveryLease, source: ChannelAdapter, timeout: float
    ) -> tuple[bool, str | None]:
        """(ready, id) of the placeholder this host streamed for the row's message (`ReplyStreams`)."""
        seq = lease.body.get("result_seq")
        if (
            self._streams is None
            or lease.type != "message.completed"
            or lease.run_id is None
            or source.config.stream_interval_s <= 0
            or not isinstance(seq, int)
        ):
            return True, None
        return await self._streams.placeholder(lease.run_id, seq, timeout=timeout)

    @staticmethod
    async def _replace(
        client: httpx2.AsyncClient, source: ChannelAdapter, target: Target, placeholder: str, text: str
    ) -> None:
        """The first part of a streamed reply, into its placeholder; as a new message when the platform
        refuses the edit for good (the placeholder was deleted, or may no longer be edited)."""
        try:
            await source.edit(client, target, placeholder, text)
        except ChannelSendError as exc:
            if not exc.permanent:
                raise
            logger.warning("placeholder %s on %s could not take the final text (%s); posting it anew",
                           placeholder, source.channel_id, exc)  # fmt: skip
            await source.send(client, target, text, part=0)

    async def _upload(
        self,
        client: httpx2.AsyncClient,
        source: ChannelAdapter,
        target: Target,
        lease: DeliveryLease,
        artifact_id: str,
        *,
        part: int,
    ) -> None:
        """One file of a reply, or the notice of why it is not uploaded."""
        record = None
        if self._artifacts is not None and self._events is not None and lease.run_id is not None:
            record = await artifact_of(self._artifacts, self._events, lease.run_id, artifact_id)
        if record is None or self._artifacts is None:
            await source.send(client, target, f"(The file {artifact_id!r} is no longer stored, so it is not attached.)",
                              part=part)  # fmt: skip
            return
        name = record.name or record.artifact_id
        limit = min(source.max_upload_bytes, MAX_UPLOAD_BYTES)
        if record.size > limit:
            notice = (
                f"(The file {name!r} is {record.size:,} bytes, over the {limit:,}-byte limit for a "
                f"{source.platform} upload, so it is not attached; it is kept as artifact {record.artifact_id}.)"
            )
            await source.send(client, target, notice, part=part)
            return
        try:
            data = await self._artifacts.read(record.artifact_id)
        except HostError as exc:
            await source.send(client, target, f"(The file {name!r} could not be read ({exc}), so it is not attached.)"[:1000],
                              part=part)  # fmt: skip
            return
        await source.upload(client, target, name[:200], record.mime_type, data)

    async def _act(
        self, client: httpx2.AsyncClient, lease: DeliveryLease, source: ChannelAdapter
    ) -> DeliveryOutcome:
        """Execute an authorized (and, with an idempotency key, approved) platform action once."""
        try:
            name, target, message_id, value = action_of(lease.body)
        except ValueError as exc:
            await self._deliveries.bury(lease, error=f"not an action this channel executes: {exc}")
            return "dead"
        error: str | None = None
        wait: float | None = None
        final = False
        with anyio.move_on_after(min(source.config.timeout_s, lease.claimed_until - time.time())) as scope:
            try:
                if name == "reaction.add":
                    await source.react(client, target, message_id, value)
                else:
                    await source.edit(client, target, message_id, value)
            except ChannelSendError as exc:
                error, wait, final = str(exc)[:300], exc.retry_after, exc.permanent
        if scope.cancelled_caught:
            error = "no complete answer within the channel's timeout_s"
        if error is None:
            recorded, outcome = await self._deliveries.delivered(lease), "delivered"
        else:
            next_at = time.time() + (
                wait if wait is not None else backoff(lease.attempts + 1, base_s=self._retry_base_s)
            )
            dead = final or next_at >= lease.expires_at
            recorded = await self._deliveries.retry(lease, error=error, next_attempt_at=next_at, dead=dead)
            outcome = "dead" if dead else "failed"
            logger.warning("action %s (%s) on %s failed (%s)", lease.delivery_id, name, lease.url, error)
        return outcome if recorded else "superseded"


ACTIONS = frozenset({"action.requested", "action.approved"})


def action_of(body: JSONObject) -> tuple[str, Target, str, str]:
    """An action row's (action, target, message id, emoji or text): `reaction.add` with
    `payload.emoji`, `message.edit` with `payload.text`, on `target.message_id` or else the event's own
    message.

    Raises:
        ValueError: another action, or one missing what it needs.
    """
    data = body.get("data")
    data = data if is_json_object(data) else {}
    name = data.get("action")
    reply = body.get("reply_target")
    if not isinstance(reply, str):
        raise ValueError("the run's event has no reply target")
    target = Target.loads(reply)
    aimed = data.get("target")
    message_id = aimed.get("message_id") if is_json_object(aimed) else None
    message_id = message_id if isinstance(message_id, str) and message_id else target.message
    payload = data.get("payload")
    payload = payload if is_json_object(payload) else {}
    field = {"reaction.add": "emoji", "message.edit": "text"}.get(name) if isinstance(name, str) else None
    value = payload.get(field) if field is not None else None
    if field is None or not isinstance(name, str):
        raise ValueError(f"{str(name)[:50]!r} is not one of reaction.add, message.edit")
    if not isinstance(value, str) or not value or message_id is None:
        raise ValueError(
            f"{name} needs payload.{field} and a message (target.message_id, or the event's own)"
        )
    return name, target, message_id, value


def _count(body: JSONObject, key: str) -> int:
    sent = body.get(key)
    return sent if isinstance(sent, int) and not isinstance(sent, bool) and sent >= 0 else 0


def reply_text(kind: str, data: JSONObject) -> str:
    """What a chat is told of one fact: a message's text, or a failed run's notice."""
    if kind == "run.failed":
        notice = data.get("notice")
        text = notice.get("text") if is_json_object(notice) else None
        return text if isinstance(text, str) else "Sorry — I could not finish this request."
    message = data.get("message")
    if not is_json_object(message):
        return ""
    return content_text(message, sep="\n")


def reply_of(source: ChannelAdapter, kind: str, body: JSONObject) -> tuple[Target, list[str]]:
    """Where a reply row goes and its parts, split at the platform's limit.

    Raises:
        ValueError: the row has no usable reply target.
    """
    target = body.get("reply_target")
    if not isinstance(target, str):
        raise ValueError("the run's event has no reply target")
    data = body.get("data")
    return Target.loads(target), source.split(reply_text(kind, data if is_json_object(data) else {}))
