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
from mcphost.models import RunFailure, RunStatus
from mcphost.stores import DeliveryLease, Stores, open_stores
from mcphost.stores.deliveries import EXPIRED_ERROR
from mcphost.stores.runs import RunEnd
from tests.mcphost.stores.factories import admitted

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
ALL = WebhookConfig(url="http://127.0.0.1:9/all", secret=SECRET)
OTHERS = WebhookConfig(url="http://127.0.0.1:9/others", secret=SECRET, agents=["someone-else"])
ENDS = WebhookConfig(url="http://127.0.0.1:9/ends", secret=SECRET, events=["run.failed"], max_age_s=60)


@pytest.fixture
async def outboxed(database_url: str, tmp_path: Path) -> AsyncGenerator[Stores, None]:
    async with open_stores(database_url, tmp_path / "data", webhooks=[ALL, OTHERS, ENDS]) as opened:
        yield opened


MESSAGE_THEN_FAILED = [(ALL.url, "message.completed"), (ALL.url, "run.failed"), (ENDS.url, "run.failed")]
"""The rows of a run that said a message and then failed: every receiver's that takes each."""


def message(text: str) -> dict[str, object]:
    return {"type": "message.completed", "data": {"message": {"role": "assistant", "content": text}}}


async def test_results_and_run_ends_are_announced_once_with_their_transaction(outboxed: Stores) -> None:
    run = await admitted(outboxed)
    await outboxed.results.append_many(run.run_id, [("message.completed", message("hi"))], first_seq=1)
    await outboxed.results.append_many(run.run_id, [("message.completed", message("hi"))], first_seq=1)
    with pytest.raises(ConflictError):  # a refused write announces nothing
        await outboxed.results.append_many(run.run_id, [("message.completed", message("other"))], first_seq=1)
    await outboxed.runs.transition(run.run_id, RunStatus.RUNNING)
    error = RunFailure(code="deadline_exceeded", message="too slow")
    await outboxed.runs.finish(run.run_id, RunStatus.FAILED, error=error)
    await outboxed.runs.finish(run.run_id, RunStatus.COMPLETED)  # already ended: no second announcement
    items = (await outboxed.deliveries.list(run_id=run.run_id)).items
    assert sorted((d.url, d.type) for d in items) == MESSAGE_THEN_FAILED
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
    leased: dict[str, DeliveryLease] = {}
    claimed: dict[str, list[str]] = {}

    async def claim(host: str) -> None:
        claims = await outboxed.deliveries.claim(host, lease_s=30, limit=16)
        leased.update((r.delivery_id, r) for r in claims.leases)
        claimed[host] = [r.delivery_id for r in claims.leases]

    async with anyio.create_task_group() as tg:
        tg.start_soon(claim, "host-a")
        tg.start_soon(claim, "host-b")
    together = claimed["host-a"] + claimed["host-b"]
    assert len(together) == len(set(together)) == 24
    assert (await outboxed.deliveries.claim("host-c", lease_s=30)).leases == []  # every lease still runs
    first = claimed["host-a"][0] if claimed["host-a"] else claimed["host-b"][0]
    owner = "host-a" if first in claimed["host-a"] else "host-b"
    lease = leased[first]
    assert lease.claimed_by == owner
    forged = lease.model_copy(update={"claimed_by": "host-c"})
    assert await outboxed.deliveries.delivered(forged) is False  # not its lease: fenced out
    assert await outboxed.deliveries.retry(lease, error="HTTP 500", next_attempt_at=0.0, dead=False)
    again = (await outboxed.deliveries.claim("host-c", lease_s=30)).leases
    assert [r.delivery_id for r in again] == [first]
    assert again[0].attempts == 2  # the fenced-out send and the recorded one
    assert again[0].last_error == "HTTP 500"
    await outboxed.deliveries.release("host-c")
    assert [r.delivery_id for r in (await outboxed.deliveries.claim("host-d", lease_s=30)).leases] == [first]


async def test_a_dead_delivery_is_listed_and_redelivered_with_its_id(outboxed: Stores) -> None:
    run = await admitted(outboxed)
    await outboxed.runs.transition(run.run_id, RunStatus.RUNNING)
    await outboxed.runs.finish(run.run_id, RunStatus.COMPLETED)
    (row,) = (await outboxed.deliveries.claim("host-a", lease_s=30)).leases
    assert row.type == "run.completed"
    assert await outboxed.deliveries.retry(row, error="HTTP 503", next_attempt_at=time.time() + 99, dead=True)
    dead = (await outboxed.deliveries.list(status="dead")).items
    assert [(d.delivery_id, d.last_error) for d in dead] == [(row.delivery_id, "HTTP 503")]
    assert (await outboxed.deliveries.claim("host-a", lease_s=30)).leases == []
    back = await outboxed.deliveries.redeliver(row.delivery_id, max_age_s=10)
    assert back.status == "pending"
    assert back.expires_at > time.time() + 5
    (again,) = (await outboxed.deliveries.claim("host-b", lease_s=30)).leases
    assert again.delivery_id == row.delivery_id
    assert await outboxed.deliveries.delivered(again)
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


async def completed(stores: Stores) -> None:
    """A run that completes: one `run.completed` row for `ALL`."""
    run = await admitted(stores)
    await stores.runs.transition(run.run_id, RunStatus.RUNNING)
    await stores.runs.finish(run.run_id, RunStatus.COMPLETED)


async def test_a_sender_whose_lease_was_taken_over_cannot_overwrite_the_new_holders_outcome(
    outboxed: Stores,
) -> None:
    await completed(outboxed)
    (first,) = (await outboxed.deliveries.claim("host-a", lease_s=0.2)).leases
    await anyio.sleep(0.3)  # host-a's send outlived its lease
    (second,) = (await outboxed.deliveries.claim("host-a", lease_s=30)).leases  # the same host, again
    assert second.delivery_id == first.delivery_id
    assert await outboxed.deliveries.retry(
        second, error="HTTP 503", next_attempt_at=time.time() + 60, dead=False
    )
    assert await outboxed.deliveries.delivered(first) is False  # the old lease: fenced out
    row = await outboxed.deliveries.get(first.delivery_id)
    assert (row.status, row.last_error, row.delivered_at) == ("pending", "HTTP 503", None)
    assert row.attempts == 2  # both requests were made: each counted once
    assert await outboxed.deliveries.bury(second, error="gone") is False  # a settled lease is spent


async def test_claim_never_hands_out_an_expired_delivery_and_ends_it_dead_with_a_reason(
    outboxed: Stores,
) -> None:
    await completed(outboxed)
    (row,) = (await outboxed.deliveries.list()).items
    await outboxed.deliveries.redeliver(row.delivery_id, max_age_s=0.05)
    await anyio.sleep(0.1)
    claims = await outboxed.deliveries.claim("host-a", lease_s=30)
    assert claims.leases == []
    assert [(r.delivery_id, r.status, r.last_error, r.attempts) for r in claims.expired] == [
        (row.delivery_id, "dead", EXPIRED_ERROR, 0)
    ]
    assert (await outboxed.deliveries.claim("host-b", lease_s=30)).expired == []  # once
    assert [d.delivery_id for d in (await outboxed.deliveries.list(status="dead")).items] == [row.delivery_id]


async def test_claim_holds_at_most_per_url_rows_of_one_receiver_and_leaves_the_rest_to_others(
    outboxed: Stores,
) -> None:
    for _ in range(6):
        run = await admitted(outboxed, conversation_id=None)
        await outboxed.runs.transition(run.run_id, RunStatus.RUNNING)
        await outboxed.runs.finish(run.run_id, RunStatus.FAILED)  # one row for ALL, one for ENDS
    claims = await outboxed.deliveries.claim("host-a", lease_s=30, per_url=4, in_flight={ALL.url: 3})
    assert sorted(r.url for r in claims.leases) == [ALL.url] + [ENDS.url] * 4
    full = await outboxed.deliveries.claim(
        "host-a", lease_s=30, per_url=4, in_flight={ALL.url: 4, ENDS.url: 4}
    )
    assert full.leases == []
    rest = await outboxed.deliveries.claim("host-a", lease_s=30, per_url=4, in_flight={ALL.url: 4})
    assert [r.url for r in rest.leases] == [ENDS.url] * 2


async def test_a_run_ended_with_its_last_results_is_announced_in_that_transaction(outboxed: Stores) -> None:
    """A run's end written with its last batch (`append_ending`) makes the rows `finish` would, once."""
    run = await admitted(outboxed)
    await outboxed.runs.transition(run.run_id, RunStatus.RUNNING)
    _, ended = await outboxed.results.append_ending(
        run.run_id,
        [("message.completed", message("bye")), ("run.completed", {"data": {}})],
        first_seq=1,
        end=RunEnd(RunStatus.FAILED, error=RunFailure(code="runner.error", message="it broke")),
    )
    assert ended is not None
    assert ended.status is RunStatus.FAILED
    await outboxed.runs.finish(run.run_id, RunStatus.COMPLETED)  # already ended: no second announcement
    items = (await outboxed.deliveries.list(run_id=run.run_id)).items
    assert sorted((d.url, d.type) for d in items) == MESSAGE_THEN_FAILED
    failed = next(d for d in items if d.url == ENDS.url).body["data"]
    assert isinstance(failed, dict)
    assert failed["error"] == {"code": "runner.error", "message": "it broke", "details": {}}
