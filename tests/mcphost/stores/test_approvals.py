"""Approvals (`stores/approvals.py`) on SQLite and PostgreSQL: the state machine, idempotent decisions,
expiry as a denial, one approval per action key, and the deliveries written with each fact."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa

from mcphost.config import WebhookConfig
from mcphost.errors import ConflictError, NotFoundError
from mcphost.models import RunStatus
from mcphost.protocol import JSONObject
from mcphost.stores import ApprovalRecord, Stores, open_stores
from mcphost.stores import approvals as approvals_module
from mcphost.stores.tables import ApprovalRow
from tests.mcphost.stores.factories import admitted

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
ALL = WebhookConfig(url="http://127.0.0.1:9/all", secret=SECRET)


@pytest.fixture
async def desk(database_url: str, tmp_path: Path) -> AsyncGenerator[Stores, None]:
    async with open_stores(database_url, tmp_path / "data", webhooks=[ALL]) as opened:
        yield opened


def action(key: str | None, name: str = "refund") -> tuple[str, JSONObject]:
    data: JSONObject = {"action": name, "target": {"order": "o-1"}, "payload": {"amount": 5}}
    if key is not None:
        data["idempotency_key"] = key
    return ("action.requested", {"type": "action.requested", "data": data})


async def delivered_types(stores: Stores, run_id: str) -> list[str]:
    return sorted(d.type for d in (await stores.deliveries.list(run_id=run_id)).items)


async def expire(stores: Stores, approval_id: str) -> None:
    async with stores.db.write() as session:
        await session.execute(
            sa.update(ApprovalRow).where(ApprovalRow.approval_id == approval_id).values(expires_at=1.0)
        )


async def test_a_tool_approval_is_announced_and_decided_once(desk: Stores) -> None:
    run = await admitted(desk)
    asked = await desk.approvals.request(run.run_id, "tool", {"tool": "state_set", "arguments": {"key": "k"}})
    assert (asked.status, asked.kind, asked.agent_id, asked.conversation_id) == (
        "pending",
        "tool",
        "default",
        "conv-1",
    )
    assert asked.expires_at == pytest.approx(asked.created_at + 24 * 3600)
    announced = (await desk.deliveries.list(run_id=run.run_id)).items
    assert [d.type for d in announced] == ["approval.requested"]
    assert announced[0].body["data"] == {
        "approval_id": asked.approval_id,
        "kind": "tool",
        "request": {"tool": "state_set", "arguments": {"key": "k"}},
        "expires_at": asked.expires_at,
    }
    approved, changed = await desk.approvals.decide(asked.approval_id, "approve", note="fine")
    assert (approved.status, approved.note, changed) == ("approved", "fine", True)
    again, changed = await desk.approvals.decide(asked.approval_id, "approve", note="other note")
    assert (again, changed) == (approved, False)
    with pytest.raises(ConflictError, match="already approved; it cannot be denied"):
        await desk.approvals.decide(asked.approval_id, "deny")
    assert await desk.approvals.get(asked.approval_id) == approved
    assert await delivered_types(desk, run.run_id) == [
        "approval.requested"
    ]  # a tool approval executes nothing


async def test_listing_filters_by_status_and_run_and_pages_newest_first(desk: Stores) -> None:
    first, second = await admitted(desk), await admitted(desk, conversation_id="conv-2")
    made = [
        await desk.approvals.request(r.run_id, "tool", {"tool": f"t{i}"})
        for i, r in enumerate([first, second, first])
    ]
    await desk.approvals.decide(made[1].approval_id, "deny")
    pending = (await desk.approvals.list(status="pending")).items
    assert [a.approval_id for a in pending] == [made[2].approval_id, made[0].approval_id]
    assert [a.approval_id for a in (await desk.approvals.list(status="denied")).items] == [
        made[1].approval_id
    ]
    assert [a.approval_id for a in (await desk.approvals.list(run_id=second.run_id)).items] == [
        made[1].approval_id
    ]
    page = await desk.approvals.list(limit=2)
    assert page.has_more
    assert page.next_cursor is not None
    rest = await desk.approvals.list(limit=2, cursor=page.next_cursor)
    assert [a.approval_id for a in [*page.items, *rest.items]] == [m.approval_id for m in reversed(made)]


async def test_an_expired_approval_counts_as_denied(desk: Stores) -> None:
    run = await admitted(desk)
    asked = await desk.approvals.request(run.run_id, "tool", {"tool": "state_set"})
    await expire(desk, asked.approval_id)
    seen = await desk.approvals.get(asked.approval_id)
    assert (seen.status, seen.decided_at) == ("expired", 1.0)
    assert [a.approval_id for a in (await desk.approvals.list(status="expired")).items] == [asked.approval_id]
    assert (await desk.approvals.list(status="pending")).items == []
    with pytest.raises(
        ConflictError, match="already expired; it cannot be approved now \\(an expired approval"
    ):
        await desk.approvals.decide(asked.approval_id, "approve")
    denied, changed = await desk.approvals.decide(asked.approval_id, "deny")
    assert (denied.status, changed) == ("expired", False)


async def test_a_decision_in_this_process_wakes_the_waiting_call_at_once(
    desk: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(approvals_module, "OTHER_PROCESS_POLL_S", 3600.0)  # only the wake can end the wait
    run = await admitted(desk)
    asked = await desk.approvals.request(run.run_id, "tool", {"tool": "state_set"})
    seen: list[ApprovalRecord] = []

    async def waiting() -> None:
        seen.append(await desk.approvals.wait(asked.approval_id, until=time.time() + 3600))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiting)
            # the wait is asleep once its waker is registered (a store-private detail, read to be sure)
            while asked.approval_id not in desk.approvals._wakers:  # noqa: ASYNC110  # pyright: ignore[reportPrivateUsage]
                await anyio.sleep(0.01)
            await desk.approvals.decide(asked.approval_id, "approve", note="go")
    assert [(r.status, r.note) for r in seen] == [("approved", "go")]
    assert asked.approval_id not in desk.approvals._wakers  # pyright: ignore[reportPrivateUsage]  # no leak


async def test_a_decision_taken_by_another_process_reaches_the_waiting_call(
    desk: Stores, database_url: str, tmp_path: Path
) -> None:
    run = await admitted(desk)
    asked = await desk.approvals.request(run.run_id, "tool", {"tool": "state_set"})
    seen: list[ApprovalRecord] = []

    async def waiting() -> None:
        seen.append(await desk.approvals.wait(asked.approval_id, until=time.time() + 3600))

    async with open_stores(database_url, tmp_path / "other") as other:  # as a replica or the CLI would
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiting)
                await other.approvals.decide(asked.approval_id, "deny", note="elsewhere")
    assert [(r.status, r.note) for r in seen] == [("denied", "elsewhere")]


async def test_a_wait_that_ends_undecided_leaves_an_expired_approval_saying_why(desk: Stores) -> None:
    run = await admitted(desk)
    asked = await desk.approvals.request(run.run_id, "tool", {"tool": "state_set"})
    still = await desk.approvals.wait(asked.approval_id, until=time.time() + 0.2)
    assert still.status == "pending"  # the caller's deadline came first
    await desk.approvals.abandon(asked.approval_id)
    gone = await desk.approvals.get(asked.approval_id)
    assert (gone.status, gone.note) == ("expired", approvals_module.ABANDONED_NOTE)
    with pytest.raises(ConflictError, match="already expired"):
        await desk.approvals.decide(asked.approval_id, "approve")
    decided = await desk.approvals.request(run.run_id, "tool", {"tool": "state_set"})
    await desk.approvals.decide(decided.approval_id, "approve")
    await desk.approvals.abandon(decided.approval_id)  # a decided approval keeps its decision
    assert (await desk.approvals.get(decided.approval_id)).status == "approved"


async def test_a_tool_approval_of_a_run_that_ended_cannot_be_approved_and_expires(desk: Stores) -> None:
    run = await admitted(desk)
    asked = await desk.approvals.request(run.run_id, "tool", {"tool": "state_set"})
    await desk.runs.finish(run.run_id, RunStatus.CANCELLED)  # as after a host killed mid-wait
    with pytest.raises(ConflictError, match="which has ended \\(cancelled\\): no call waits") as refused:
        await desk.approvals.decide(asked.approval_id, "approve")
    assert refused.value.details == {
        "approval_id": asked.approval_id,
        "status": "expired",
        "run_status": "cancelled",
    }
    assert (await desk.approvals.get(asked.approval_id)).status == "expired"
    # an action outlives its run: it is executed after the decision, so it can still be approved
    later = await admitted(desk, conversation_id="conv-2")
    await desk.results.append_many(later.run_id, [action("after-end")], first_seq=1)
    await desk.runs.finish(later.run_id, RunStatus.CANCELLED)
    (act,) = (await desk.approvals.list(run_id=later.run_id)).items
    assert (await desk.approvals.decide(act.approval_id, "approve"))[0].status == "approved"


async def test_an_unknown_approval_or_run_is_not_found(desk: Stores) -> None:
    with pytest.raises(NotFoundError, match="Approval 'apr_nope' does not exist"):
        await desk.approvals.decide("apr_nope", "approve")
    with pytest.raises(NotFoundError, match="Approval 'apr_nope' does not exist"):
        await desk.approvals.get("apr_nope")
    with pytest.raises(NotFoundError, match="Run 'run_nope' does not exist"):
        await desk.approvals.request("run_nope", "tool", {"tool": "x"})


async def test_two_different_decisions_at_once_leave_exactly_one(desk: Stores) -> None:
    run = await admitted(desk)
    asked = await desk.approvals.request(run.run_id, "tool", {"tool": "state_set"})
    outcomes: dict[str, ApprovalRecord | ConflictError] = {}

    async def decide(decision: str) -> None:
        assert decision in ("approve", "deny")
        try:
            outcomes[decision] = (
                await desk.approvals.decide(asked.approval_id, "approve" if decision == "approve" else "deny")
            )[0]
        except ConflictError as exc:
            outcomes[decision] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(decide, "approve")
        tg.start_soon(decide, "deny")
    records = [o for o in outcomes.values() if isinstance(o, ApprovalRecord)]
    assert len(outcomes) == 2
    assert len(records) == 1
    assert (await desk.approvals.get(asked.approval_id)).status == records[0].status


async def test_an_action_with_a_key_gets_one_approval_and_one_execution_per_key(desk: Stores) -> None:
    run, later = await admitted(desk), await admitted(desk, conversation_id="conv-2")
    long_key = "k" * 10_000  # keys of any length: the unique key stores their digest
    await desk.results.append_many(
        run.run_id, [action("order-1"), action(None, "notify"), action(long_key)], first_seq=1
    )
    await desk.results.append_many(later.run_id, [action("order-1", "refund-again")], first_seq=1)
    made = (await desk.approvals.list()).items
    assert sorted(str(a.request["idempotency_key"]) for a in made) == sorted(["order-1", long_key])
    assert {a.run_id for a in made} == {run.run_id}
    first = next(a for a in made if a.request["idempotency_key"] == "order-1")
    assert (first.kind, first.request["action"], first.request["payload"]) == (
        "action",
        "refund",
        {"amount": 5},
    )
    await desk.approvals.decide(first.approval_id, "approve", note="go")
    await desk.approvals.decide(first.approval_id, "approve")
    other = next(a for a in made if a is not first)
    await desk.approvals.decide(other.approval_id, "deny")
    rows = (await desk.deliveries.list(run_id=run.run_id)).items
    assert sorted(d.type for d in rows) == [
        "action.approved",
        "action.requested",
        "action.requested",
        "action.requested",
        "approval.requested",
        "approval.requested",
    ]
    executed = next(d for d in rows if d.type == "action.approved").body["data"]
    assert executed == {
        "approval_id": first.approval_id,
        "note": "go",
        "action": "refund",
        "target": {"order": "o-1"},
        "payload": {"amount": 5},
        "idempotency_key": "order-1",
    }
    assert await delivered_types(desk, later.run_id) == ["action.requested"]
