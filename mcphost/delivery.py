"""The sender of outbound webhooks: claims due outbox rows and POSTs them, signed per Standard Webhooks.

Owns sending (httpx2, only to the configured `[[webhooks]]` URL of each row), signing (`webhook-id`,
`webhook-timestamp`, `webhook-signature` through the `standardwebhooks` package), and the retry policy:
exponential back-off with jitter until the row's `expires_at`, then `dead`. Does not own which facts
become rows or the lease protocol (`stores/deliveries.py`).

Invariants:
- The sender is a task owned by the host (`DeliverySender.running()`, entered by `app.open_host`); it
  stops with the host, and a row it had claimed is claimed again by any host once the lease ends, so
  rows survive restarts and are spread across replicas without being sent twice by two live hosts.
- A 2xx answer is a delivery; anything else (another status, a timeout, a refused connection) is a
  failed attempt. Delivery is at least once: a host that dies between the receiver's 2xx and recording
  it sends the row again (with the same `webhook-id`, which receivers use to deduplicate).
- A row whose URL is no longer configured goes `dead` without a request (its secret is gone).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import anyio
import httpx2
from standardwebhooks import Webhook

from mcphost.config import WebhookConfig
from mcphost.stores import DeliveryRecord, DeliveryStore

logger = logging.getLogger(__name__)

POLL_S = 0.5
"""How often an idle sender looks for due rows."""
LEASE_S = 60.0
"""How long a claim holds a row: longer than a send (`SEND_TIMEOUT_S`) can take."""
SEND_TIMEOUT_S = 15.0
RETRY_BASE_S = 2.0
RETRY_MAX_S = 3600.0


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
        timeout_s: float | None = None,
    ) -> None:
        """Timings default to the module's constants, read when the sender is made."""
        self._deliveries = deliveries
        self._secrets = {w.url: w.secret for w in webhooks}
        self._host_id = host_id
        self._poll_s = POLL_S if poll_s is None else poll_s
        self._lease_s = LEASE_S if lease_s is None else lease_s
        self._retry_base_s = RETRY_BASE_S if retry_base_s is None else retry_base_s
        self._timeout_s = SEND_TIMEOUT_S if timeout_s is None else timeout_s

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[None, None]:
        """Send due rows in the background for the block (nothing runs without webhooks)."""
        if not self._secrets:
            yield
            return
        async with (
            httpx2.AsyncClient(timeout=self._timeout_s, follow_redirects=False) as client,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(self._loop, client)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    await self._deliveries.release(self._host_id)  # its rows: for the next host now

    async def _loop(self, client: httpx2.AsyncClient) -> None:
        while True:
            try:
                sent = await self.send_due(client)
            except Exception as exc:
                logger.warning("webhook sender: %s; retrying in %g s", exc.__cause__ or exc, self._poll_s)
                sent = 0
            if not sent:
                await anyio.sleep(self._poll_s)

    async def send_due(self, client: httpx2.AsyncClient) -> int:
        """Claim the due rows and send each once; how many were claimed."""
        rows = await self._deliveries.claim(self._host_id, lease_s=self._lease_s)
        async with anyio.create_task_group() as tg:
            for row in rows:
                tg.start_soon(self._send, client, row)
        return len(rows)

    async def _send(self, client: httpx2.AsyncClient, row: DeliveryRecord) -> None:
        secret = self._secrets.get(row.url)
        if secret is None:
            await self._deliveries.retry(
                row.delivery_id,
                self._host_id,
                error="the webhook URL is no longer configured in [[webhooks]]",
                next_attempt_at=time.time(),
                dead=True,
            )
            return
        body = json.dumps(row.body, separators=(",", ":"), ensure_ascii=False)
        error: str | None
        try:
            response = await client.post(row.url, content=body.encode(), headers=signed_headers(
                secret, row.delivery_id, body, now=time.time()
            ))  # fmt: skip
            error = None if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"
        except httpx2.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:300]
        if error is None:
            await self._deliveries.delivered(row.delivery_id, self._host_id)
            logger.info("delivered %s %s of run %s", row.delivery_id, row.type, row.run_id)
            return
        next_at = time.time() + backoff(row.attempts + 1, base_s=self._retry_base_s)
        dead = next_at > row.expires_at
        await self._deliveries.retry(
            row.delivery_id, self._host_id, error=error, next_attempt_at=next_at, dead=dead
        )
        logger.warning(
            "delivery %s to %s failed (%s)%s", row.delivery_id, row.url, error, "; it is dead" if dead else ""
        )
