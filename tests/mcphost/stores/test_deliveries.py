"""The outbox (`stores/deliveries.py`) on SQLite and PostgreSQL: rows written in the transaction of the
fact they announce, leases that never hand one row to two hosts, dead letters and redelivery."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import pytest

from mcphost.config import WebhookConfig
from mcphost.errors import ConflictError, NotFoundError
from mcphost.models import RunError, RunStatus
from mcphost.stores import Stores, open_stores
from tests.mcphost.stores.factories import admitted

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
ALL = WebhookConfig(url="http://127.0.0.1:9/all", secret=SECRET)
OTHERS = WebhookConfig(url="http://127.0.0.1:9/others", secret=SECRET, agents=["someone-else"])
ENDS = WebhookConfig(url="http://127.0.0.1:9/ends", secret=SECRET, events=["run.failed"], max_age_s=60)


@pytest.fixture
async def outboxed(database_url: str, tmp_path: Path) -> AsyncGenerator[Stores, None]:
    async with open_stores(database_url, tmp_path / "data", webhooks=[ALL, OTHERS, ENDS]) as opened:
        yield opened


def message(text: str) -> dict[str, object]:
    return {"type": "message.completed", "data": {"message": {"role": "assistant", "content": text}}}


async def test_results_and_run_ends_are_announced_once_with_their_transaction(outboxed: Stores) -> None:
    run = await admitted(outboxed)
    await outboxed.results.append_many(run.run_id, [("message.completed", message("hi"))], first_seq=1)
    await outboxed.results.append_many(run.run_id, [("message.completed", message("hi"))], first_seq=1)
    with pytest.raises(ConflictError):  # a refused write announces nothing
        await outboxed.results.append_many(run.run_id, [("message.completed", message("other"))], first_seq=1)
    await outboxed.runs.transition(run.run_id, RunStatus.RUNNING)
    error = RunError(code="deadline_exceeded", message="too slow")
    await outboxed.runs.finish(run.run_id, RunStatus.FAILED, error=error)
    await outboxed.runs.finish(run.run_id, RunStatus.COMPLETED)  # already ended: no second announcement
    items = (await outboxed.deliveries.list(run_id=run.run_id)).items
    assert sorted((d.url, d.type) for d in items) == [
        (ALL.url, "message.completed"),
        (ALL.url, "run.failed"),
        (ENDS.url, "run.failed"),
    ]
    failed = next(d for d in items if d.url == ENDS.url)
    assert failed.status == "pending"
    assert failed.expires_at == pytest.approx(failed.created_at + 60)
    body = failed.body
    assert (body["type"], body["run_id"], body["conversation_id"]) == ("run.failed", run.run_id, "conv-1")
    assert body["delivery_id"] == failed.delivery_id
    data = body["data"]
    assert isinstance(data, dict)
    assert data["status"] == "failed"
    assert data["notice"] == {
        "text": "Sorry — this took too long and was stopped. Please try again, perhaps with a smaller request.",
        "code": "deadline_exceeded",
    }
    said = next(d for d in items if d.type == "message.completed").body["data"]
    assert said == {"message": {"role": "assistant", "content": "hi"}}


async def test_two_hosts_claiming_at_once_never_get_the_same_row(outboxed: Stores) -> None:
    for _ in range(12):
        run = await admitted(outboxed, conversation_id=None)
        await outboxed.runs.transition(run.run_id, RunStatus.RUNNING)
        await outboxed.runs.finish(run.run_id, RunStatus.FAILED)  # one row for ALL, one for ENDS
    claimed: dict[str, list[str]] = {}

    async def claim(host: str) -> None:
        rows = await outboxed.deliveries.claim(host, lease_s=30, limit=16)
        claimed[host] = [r.delivery_id for r in rows]

    async with anyio.create_task_group() as tg:
        tg.start_soon(claim, "host-a")
        tg.start_soon(claim, "host-b")
    together = claimed["host-a"] + claimed["host-b"]
    assert len(together) == len(set(together)) == 24
    assert await outboxed.deliveries.claim("host-c", lease_s=30) == []  # every lease still runs
    first = claimed["host-a"][0] if claimed["host-a"] else claimed["host-b"][0]
    owner = "host-a" if first in claimed["host-a"] else "host-b"
    assert await outboxed.deliveries.delivered(first, "host-c") is False  # not its claim
    assert await outboxed.deliveries.retry(first, owner, error="HTTP 500", next_attempt_at=0.0, dead=False)
    again = await outboxed.deliveries.claim("host-c", lease_s=30)
    assert [r.delivery_id for r in again] == [first]
    assert again[0].attempts == 1
    assert again[0].last_error == "HTTP 500"
    await outboxed.deliveries.release("host-c")
    assert [r.delivery_id for r in await outboxed.deliveries.claim("host-d", lease_s=30)] == [first]


async def test_a_dead_delivery_is_listed_and_redelivered_with_its_id(outboxed: Stores) -> None:
    run = await admitted(outboxed)
    await outboxed.runs.transition(run.run_id, RunStatus.RUNNING)
    await outboxed.runs.finish(run.run_id, RunStatus.COMPLETED)
    (row,) = await outboxed.deliveries.claim("host-a", lease_s=30)
    assert row.type == "run.completed"
    assert await outboxed.deliveries.retry(
        row.delivery_id, "host-a", error="HTTP 503", next_attempt_at=time.time() + 99, dead=True
    )
    dead = (await outboxed.deliveries.list(status="dead")).items
    assert [(d.delivery_id, d.last_error) for d in dead] == [(row.delivery_id, "HTTP 503")]
    assert await outboxed.deliveries.claim("host-a", lease_s=30) == []
    back = await outboxed.deliveries.redeliver(row.delivery_id, max_age_s=10)
    assert back.status == "pending"
    assert back.expires_at > time.time() + 5
    assert [r.delivery_id for r in await outboxed.deliveries.claim("host-b", lease_s=30)] == [row.delivery_id]
    assert await outboxed.deliveries.delivered(row.delivery_id, "host-b")
    assert (await outboxed.deliveries.get(row.delivery_id)).status == "delivered"
    with pytest.raises(NotFoundError):
        await outboxed.deliveries.redeliver("msg_unknown", max_age_s=10)


async def test_deliveries_page_newest_first_with_cursors(outboxed: Stores) -> None:
    for _ in range(3):
        run = await admitted(outboxed, conversation_id=None)
        await outboxed.runs.transition(run.run_id, RunStatus.RUNNING)
        await outboxed.runs.finish(run.run_id, RunStatus.COMPLETED)
    first = await outboxed.deliveries.list(limit=2)
    assert first.has_more
    assert first.next_cursor is not None
    rest = await outboxed.deliveries.list(limit=2, cursor=first.next_cursor)
    ids = [d.delivery_id for d in first.items + rest.items]
    assert len(ids) == len(set(ids)) == 3
    assert [d.created_at for d in first.items + rest.items] == sorted(
        (d.created_at for d in first.items + rest.items), reverse=True
    )
