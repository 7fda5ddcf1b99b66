"""Outbound webhook deliveries: the outbox rows (`deliveries`), written with the facts they announce,
and the claims, outcomes and pages the sender and the API read.

Owns the `deliveries` table, which fact becomes which delivery body (`Outbox`), and the lease protocol.
A run of a `[channels.<id>]` event is answered in place through the same table: its `message.completed`
results and its `run.failed` notice get a row whose `url` is `channel:<id>` (`CHANNEL_URL_PREFIX`),
sent by the channel's adapter, with the same leases, retries, per-URL isolation and dead letters.
Does not own sending, signing or back-off (`delivery.py`), nor the configuration (`config.WebhookConfig`).

Invariants:
- A delivery row is inserted in the same transaction as the fact it announces: `RunStore` calls
  `Outbox.run_ended` in the transaction that moves a run to `completed` or `failed`, and `ResultStore`
  calls `Outbox.results` in the transaction that stores `message.completed` / `action.requested`
  results. A fact that is not committed is never announced; a committed one always has its rows.
  `ApprovalStore` calls `Outbox.announce` in the transaction that creates an approval
  (`approval.requested`) or approves an action (`action.approved`).
- `delivery_id` (`msg_<ulid>`) is the Standard Webhooks `webhook-id` of every attempt of the row.
- A row is sent only by the host that claimed it: `claim` takes due `pending` rows whose lease has run
  out (`claimed_until < now`), with `FOR UPDATE SKIP LOCKED` on PostgreSQL (SQLite serialises writers),
  and sets the lease; at most `per_url` rows of one URL are held by the caller at once (counting the
  `in_flight` it reports), so one slow receiver's backlog never fills a claim.
- A lease is fenced: (`claimed_by`, `claimed_until`) of the claim is its token, and `delivered`,
  `retry` and `bury` write the outcome only while the row still carries that token. A sender whose
  lease was taken over (it ran past it) cannot overwrite the new holder's outcome; its send is still
  counted in `attempts`, which is the number of requests made, one per send.
- `claim` never hands out a row past its `expires_at`: in the same transaction such rows go `dead`
  with `EXPIRED_ERROR`, without a request.
- Statuses: `pending` → `delivered` | `dead` (past `expires_at`, or the webhook is no longer
  configured); `redeliver` puts a row back to `pending` with a new `expires_at`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict
from sqlalchemy import CursorResult, Row, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from mcphost.config import ChannelConfig, WebhookConfig
from mcphost.errors import NotFoundError
from mcphost.ingress import event_channel
from mcphost.models import RunStatus, new_id
from mcphost.protocol import JSONObject, JSONValue, is_json_object
from mcphost.stores._cursor import CursorCodec, Page, check_limit
from mcphost.stores._retry import idempotent
from mcphost.stores.engine import Database
from mcphost.stores.tables import DeliveryRow, EventRow, RunRow

DeliveryStatus = Literal["pending", "delivered", "dead"]
ANNOUNCED_RESULTS: frozenset[str] = frozenset({"message.completed", "action.requested"})
MAX_ERROR_CHARS = 500
EXPIRED_ERROR = "expired: not delivered before its expires_at (max_age_s); redeliver it to try again"
"""The `last_error` of a row `claim` found past its `expires_at`."""
EXPIRE_BATCH = 100
CHANNEL_URL_PREFIX = "channel:"
"""The `url` of a chat channel's rows: `channel:<id>` (no webhook URL starts so: they are http(s))."""
CHANNEL_FACTS: frozenset[str] = frozenset(
    {"message.completed", "run.failed", "action.requested", "action.approved"}
)
"""What a channel's chat is told of a run of its event — the run's messages, its failure notice — and
the platform actions it executes there: an authorized `action.requested` without an idempotency key,
and an approved one (`action.approved`); one with a key waits for its approval."""


class DeliveryRecord(BaseModel):
    """One outbound delivery as stored."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    delivery_id: str
    url: str
    type: str
    run_id: str | None
    agent_id: str | None
    conversation_id: str | None
    body: JSONObject
    status: DeliveryStatus
    attempts: int
    created_at: float
    expires_at: float
    next_attempt_at: float
    last_error: str | None
    delivered_at: float | None


class DeliveryLease(DeliveryRecord):
    """A delivery claimed by one host: the row and its lease, whose (`claimed_by`, `claimed_until`)
    fence the outcome the holder may write."""

    claimed_by: str
    claimed_until: float


class DeliveryClaims(BaseModel):
    """What one `claim` did: the rows now leased to the caller, and the rows it found expired (now `dead`)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    leases: list[DeliveryLease]
    expired: list[DeliveryRecord]


def _delivery(row: DeliveryRow) -> DeliveryRecord:
    return DeliveryRecord.model_validate(row, from_attributes=True)


def failure_notice(error: JSONObject | None) -> JSONObject:
    """What a user is told when a run failed: a short text an adapter can post as is."""
    code = error.get("code") if error else None
    text = "Sorry — I could not finish this request. Please try again."
    if code == "deadline_exceeded":
        text = "Sorry — this took too long and was stopped. Please try again, perhaps with a smaller request."
    elif code == "cancelled":
        text = "This request was cancelled."
    return {"text": text, "code": code}


class Outbox:
    """Turns announced facts into delivery rows for the configured `[[webhooks]]`, and for the chat
    channel a run's event came from, inside a transaction."""

    def __init__(
        self, webhooks: Sequence[WebhookConfig], channels: Mapping[str, ChannelConfig] | None = None
    ) -> None:
        self.webhooks = tuple(webhooks)
        self.channels = dict(channels or {})

    @property
    def active(self) -> bool:
        """Whether any fact can make a row: a webhook or a channel is configured."""
        return bool(self.webhooks or self.channels)

    def announces(self, kinds: Iterable[str]) -> bool:
        """Whether results of these types can make rows (`results`): when False it writes nothing."""
        return self.active and any(kind in ANNOUNCED_RESULTS for kind in kinds)

    def _targets(self, event_type: str, run: RunRow | Row[Any], data: JSONObject) -> list[tuple[str, float]]:
        """(url, max_age_s) of each receiver of `event_type` for `run`."""
        agent_id = run.agent_id
        found = [
            (w.url, w.max_age_s)
            for w in self.webhooks
            if event_type in w.events and (not w.agents or (agent_id is not None and agent_id in w.agents))
        ]
        channel_id = event_channel(run.event_id)
        waits = event_type == "action.requested" and data.get("idempotency_key") is not None
        if channel_id in self.channels and event_type in CHANNEL_FACTS and not waits:
            found.append((CHANNEL_URL_PREFIX + channel_id, self.channels[channel_id].max_age_s))
        return found

    async def _reply_target(self, session: AsyncSession, event_id: str) -> str | None:
        payload = (
            await session.execute(select(EventRow.payload).where(EventRow.event_id == event_id))
        ).scalar_one_or_none()
        delivery: object = payload.get("delivery") if is_json_object(payload) else None
        target: object = delivery.get("reply_target") if is_json_object(delivery) else None
        return target if isinstance(target, str) else None

    async def _insert(
        self,
        session: AsyncSession,
        run: RunRow | Row[Any],
        facts: list[tuple[str, JSONObject]],
        seqs: Sequence[int | None] = (),
    ) -> None:
        numbered = [(t, data, seqs[i] if i < len(seqs) else None) for i, (t, data) in enumerate(facts)]
        wanted = [(t, data, seq, w) for t, data, seq in numbered for w in self._targets(t, run, data)]
        if not wanted:
            return
        reply_target = await self._reply_target(session, run.event_id)
        now = time.time()
        rows: list[dict[str, Any]] = []
        for event_type, data, seq, (url, max_age_s) in wanted:
            delivery_id = new_id("msg")
            body: JSONObject = {
                "type": event_type,
                "timestamp": now,
                "delivery_id": delivery_id,
                "run_id": run.run_id,
                "event_id": run.event_id,
                "agent_id": run.agent_id,
                "conversation_id": run.conversation_id or None,
                "thread_id": run.thread_id or None,
                "reply_target": reply_target,
                "data": data,
            }
            if seq is not None and url.startswith(CHANNEL_URL_PREFIX):
                body["result_seq"] = seq  # which streamed placeholder is this message's (replies.py)
            rows.append(
                {
                    "delivery_id": delivery_id,
                    "url": url,
                    "type": event_type,
                    "run_id": run.run_id,
                    "agent_id": run.agent_id,
                    "conversation_id": run.conversation_id or None,
                    "body": body,
                    "status": "pending",
                    "attempts": 0,
                    "created_at": now,
                    "expires_at": now + max_age_s,
                    "next_attempt_at": now,
                    "claimed_until": 0.0,
                }
            )
        await session.execute(insert(DeliveryRow), rows)

    async def run_ended(self, session: AsyncSession, run: RunRow | Row[Any]) -> None:
        """Rows for a run that just moved to `completed` or `failed` (in that transaction); `run` is its
        `runs` row, as an ORM object or a Core row."""
        if not self.active or run.agent_id is None:
            return
        status = RunStatus(run.status)
        if status is RunStatus.COMPLETED:
            facts: list[tuple[str, JSONObject]] = [
                ("run.completed", {"status": status.value, "usage": run.usage})
            ]
        elif status is RunStatus.FAILED:
            error: JSONObject | None = run.error
            data: JSONObject = {"status": status.value, "error": error, "notice": failure_notice(error)}
            facts = [("run.failed", data)]
        else:
            return
        await self._insert(session, run, facts)

    async def results(
        self,
        session: AsyncSession,
        run_id: str,
        items: Sequence[tuple[str, JSONObject]],
        *,
        first_seq: int | None = None,
    ) -> None:
        """Rows for results just stored (in that transaction): `message.completed`, `action.requested`;
        a chat channel's row carries its result's host sequence (`result_seq`) when `first_seq` is given."""
        facts: list[tuple[str, JSONObject]] = []
        seqs: list[int | None] = []
        for i, (kind, payload) in enumerate(items):
            if kind in ANNOUNCED_RESULTS:
                data: JSONValue = payload.get("data") or {}
                facts.append((kind, data if is_json_object(data) else {"value": data}))
                seqs.append(None if first_seq is None else first_seq + i)
        await self.announce(session, run_id, facts, seqs=seqs)

    async def announce(
        self,
        session: AsyncSession,
        run_id: str,
        facts: Sequence[tuple[str, JSONObject]],
        *,
        seqs: Sequence[int | None] = (),
    ) -> None:
        """Rows for facts of a run written in this transaction (`approval.requested`, `action.approved`)."""
        if not self.active or not facts:
            return
        run = (await session.execute(select(RunRow).where(RunRow.run_id == run_id))).scalar_one_or_none()
        if run is None or run.agent_id is None:
            return
        await self._insert(session, run, list(facts), seqs)


class DeliveryStore:
    """Claim, settle, list and redeliver outbound deliveries."""

    def __init__(self, db: Database, cursors: CursorCodec) -> None:
        self._db = db
        self._cursors = cursors

    async def claim(
        self,
        host_id: str,
        *,
        lease_s: float,
        limit: int = 16,
        per_url: int | None = None,
        in_flight: Mapping[str, int] | None = None,
    ) -> DeliveryClaims:
        """Due `pending` rows nobody holds, oldest due first, leased to `host_id` for `lease_s` seconds:
        at most `limit`, and at most `per_url` per URL counting the caller's `in_flight` sends. A URL
        already at `per_url` is left out of the scan, so a receiver whose backlog fills one claim's
        `limit` rows gets its free slots and leaves the next claim to the others. Rows past
        `expires_at` go `dead` instead (`expired`)."""
        now = time.time()
        cap = limit if per_url is None else per_url
        busy = Counter(in_flight or {})
        full = [url for url, count in busy.items() if count >= cap]
        async with self._db.write() as session:
            expired = await self._expire(session, now)
            due = select(DeliveryRow.seq, DeliveryRow.url).where(
                DeliveryRow.status == "pending",
                DeliveryRow.next_attempt_at <= now,
                DeliveryRow.claimed_until < now,
                DeliveryRow.expires_at > now,
            )
            if full:
                due = due.where(DeliveryRow.url.not_in(full))
            due = due.order_by(DeliveryRow.next_attempt_at).limit(limit).with_for_update(skip_locked=True)
            seqs: list[int] = []
            for seq, url in (await session.execute(due)).all():
                if busy[url] < cap and len(seqs) < limit:
                    busy[url] += 1
                    seqs.append(seq)
            if not seqs:
                return DeliveryClaims(leases=[], expired=expired)
            rows = (
                (
                    await session.execute(
                        update(DeliveryRow)
                        .where(DeliveryRow.seq.in_(seqs), DeliveryRow.claimed_until < now)
                        .values(claimed_until=now + lease_s, claimed_by=host_id)
                        .returning(DeliveryRow)
                    )
                )
                .scalars()
                .all()
            )
            leases = [DeliveryLease.model_validate(r, from_attributes=True) for r in rows]
        return DeliveryClaims(leases=leases, expired=expired)

    async def _expire(self, session: AsyncSession, now: float) -> list[DeliveryRecord]:
        """End `dead` the unheld `pending` rows past `expires_at` (a batch of them), without a request."""
        stale = (
            select(DeliveryRow.seq)
            .where(
                DeliveryRow.status == "pending",
                DeliveryRow.expires_at <= now,
                DeliveryRow.claimed_until < now,
            )
            .limit(EXPIRE_BATCH)
            .with_for_update(skip_locked=True)
        )
        seqs = list((await session.execute(stale)).scalars().all())
        if not seqs:
            return []
        rows = (
            await session.execute(
                update(DeliveryRow)
                .where(DeliveryRow.seq.in_(seqs), DeliveryRow.status == "pending")
                .values(status="dead", last_error=EXPIRED_ERROR, claimed_until=0.0)
                .returning(DeliveryRow)
            )
        ).scalars()
        return [_delivery(r) for r in rows]

    async def release(self, host_id: str) -> None:
        """End `host_id`'s leases on rows it has not settled (a stopping host), so others take them now."""
        stmt = (
            update(DeliveryRow)
            .where(DeliveryRow.claimed_by == host_id, DeliveryRow.status == "pending")
            .values(claimed_until=0.0)
        )
        async with self._db.write() as session:
            await session.execute(stmt)

    async def delivered(self, lease: DeliveryLease) -> bool:
        """Record the send of `lease` as delivered; False when the lease was taken over meanwhile (the
        send is still counted)."""
        return await self._settle(
            lease, sent=True, status="delivered", delivered_at=time.time(), last_error=None
        )

    async def retry(
        self,
        lease: DeliveryLease,
        *,
        error: str,
        next_attempt_at: float,
        dead: bool,
        body: JSONObject | None = None,
    ) -> bool:
        """Record a failed send: try again at `next_attempt_at`, or end `dead`; False when the lease was
        taken over meanwhile (the send is still counted). `body` replaces the row's (a chat reply
        records the parts it already sent, so a retry sends only the rest)."""
        progress: dict[str, Any] = {} if body is None else {"body": body}
        return await self._settle(
            lease,
            sent=True,
            status="dead" if dead else "pending",
            next_attempt_at=next_attempt_at,
            last_error=error[:MAX_ERROR_CHARS],
            **progress,
        )

    async def bury(self, lease: DeliveryLease, *, error: str) -> bool:
        """End `lease`'s row `dead` without a request (`error` says why); False when the lease was taken
        over meanwhile."""
        return await self._settle(lease, sent=False, status="dead", last_error=error[:MAX_ERROR_CHARS])

    async def _settle(self, lease: DeliveryLease, *, sent: bool, **values: Any) -> bool:
        held = update(DeliveryRow).where(
            DeliveryRow.delivery_id == lease.delivery_id,
            DeliveryRow.claimed_by == lease.claimed_by,
            DeliveryRow.claimed_until == lease.claimed_until,
            DeliveryRow.status == "pending",
        )
        async with self._db.write() as session:
            # An UPDATE's result is a CursorResult; execute() is typed as the general Result.
            result = cast(
                "CursorResult[Any]",
                await session.execute(
                    held.values(attempts=DeliveryRow.attempts + int(sent), claimed_until=0.0, **values)
                ),
            )
            if result.rowcount == 1:
                return True
            if sent:  # the request was made: counted, though its outcome is the new holder's to write
                await session.execute(
                    update(DeliveryRow)
                    .where(DeliveryRow.delivery_id == lease.delivery_id)
                    .values(attempts=DeliveryRow.attempts + 1)
                )
            return False

    @idempotent
    async def get(self, delivery_id: str) -> DeliveryRecord:
        async with self._db.read() as session:
            row = (
                await session.execute(select(DeliveryRow).where(DeliveryRow.delivery_id == delivery_id))
            ).scalar_one_or_none()
        if row is None:
            raise NotFoundError(
                f"Delivery {delivery_id!r} does not exist.", details={"delivery_id": delivery_id}
            )
        return _delivery(row)

    @idempotent
    async def list(
        self,
        *,
        status: DeliveryStatus | None = None,
        run_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[DeliveryRecord]:
        """Deliveries newest first, optionally of one status and/or one run."""
        check_limit(limit)
        stmt = select(DeliveryRow)
        if status is not None:
            stmt = stmt.where(DeliveryRow.status == status)
        if run_id is not None:
            stmt = stmt.where(DeliveryRow.run_id == run_id)
        if cursor is not None:
            stmt = stmt.where(DeliveryRow.seq < self._cursors.decode_seq(cursor, "deliveries"))
        stmt = stmt.order_by(DeliveryRow.seq.desc()).limit(limit + 1)
        async with self._db.read() as session:
            rows = (await session.execute(stmt)).scalars().all()
        has_more = len(rows) > limit
        kept = rows[:limit]
        return Page[DeliveryRecord](
            items=[_delivery(r) for r in kept],
            next_cursor=self._cursors.encode("deliveries", kept[-1].seq) if has_more else None,
            prev_cursor=None,
            has_more=has_more,
        )

    async def redeliver(self, delivery_id: str, *, max_age_s: float) -> DeliveryRecord:
        """Put a delivery back to `pending`, due now, retried for another `max_age_s`.

        Raises:
            NotFoundError: no such delivery.
        """
        now = time.time()
        async with self._db.write() as session:
            row = (
                await session.execute(
                    update(DeliveryRow)
                    .where(DeliveryRow.delivery_id == delivery_id)
                    .values(
                        status="pending",
                        next_attempt_at=now,
                        expires_at=now + max_age_s,
                        claimed_until=0.0,
                        claimed_by=None,
                        delivered_at=None,
                    )
                    .returning(DeliveryRow)
                )
            ).scalar_one_or_none()
        if row is None:
            raise NotFoundError(
                f"Delivery {delivery_id!r} does not exist.", details={"delivery_id": delivery_id}
            )
        return _delivery(row)
