"""The sender of outbound webhooks: claims due outbox rows and POSTs them, signed per Standard Webhooks.

Owns sending (httpx2, only to the configured `[[webhooks]]` URL of each row), signing (`webhook-id`,
`webhook-timestamp`, `webhook-signature` through the `standardwebhooks` package), and the retry policy:
exponential back-off with jitter until the row's `expires_at`, then `dead`. Does not own which facts
become rows or the lease protocol (`stores/deliveries.py`).

Invariants:
- The sender is a task owned by the host (`DeliverySender.running()`, entered by `app.open_host`); it
  stops with the host, and a row it had claimed is claimed again by any host once the lease ends, so
  rows survive restarts and are spread across replicas without being sent twice by two live hosts.
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
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Literal, get_args

import anyio
import httpx2
from anyio.abc import TaskGroup
from standardwebhooks import Webhook

from mcphost.config import DELIVERY_LEASE_S, WebhookConfig
from mcphost.stores import DeliveryLease, DeliveryStore
from mcphost.stores.deliveries import EXPIRED_ERROR

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
        on_outcome: Callable[[DeliveryOutcome], None] | None = None,
    ) -> None:
        """Timings default to the module's constants, read when the sender is made; `on_outcome` hears
        of every claimed row's end here (the metrics).

        Raises:
            ValueError: a webhook's `timeout_s` does not end before the lease.
        """
        self._deliveries = deliveries
        self._webhooks = {w.url: w for w in webhooks}
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
        self._wake = anyio.Event()

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[None, None]:
        """Send due rows in the background for the block (nothing runs without webhooks)."""
        if not self._webhooks:
            yield
            return
        async with (
            httpx2.AsyncClient(follow_redirects=False) as client,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(self._loop, client, tg)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    await self._deliveries.release(self._host_id)  # its rows: for the next host now

    def wake(self) -> None:
        """Claim now rather than at the next poll (a row was just made due here)."""
        self._wake.set()

    async def _loop(self, client: httpx2.AsyncClient, tg: TaskGroup) -> None:
        """Claim what this host has room for, start a task per row, and wait for a free slot or the poll."""
        while True:
            self._wake = anyio.Event()  # set by a send that ends from now on
            started = 0
            room = MAX_IN_FLIGHT - self._in_flight.total()
            if room > 0:
                try:
                    claims = await self._deliveries.claim(
                        self._host_id,
                        lease_s=self._lease_s,
                        limit=min(CLAIM_LIMIT, room),
                        per_url=self._per_url,
                        in_flight=self._in_flight,
                    )
                except Exception as exc:
                    logger.warning("webhook sender: %s; retrying in %g s", exc.__cause__ or exc, self._poll_s)
                else:
                    for row in claims.expired:
                        self._count("expired")
                        logger.warning(
                            "delivery %s to %s expired undelivered; it is dead", row.delivery_id, row.url
                        )
                    for lease in claims.leases:
                        self._in_flight[lease.url] += 1
                        tg.start_soon(self._send, client, lease)
                    started = len(claims.leases)
            if not started:
                with anyio.move_on_after(self._poll_s):
                    await self._wake.wait()

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
            self._wake.set()

    async def _attempt(self, client: httpx2.AsyncClient, lease: DeliveryLease) -> DeliveryOutcome:
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
