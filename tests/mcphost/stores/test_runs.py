"""Runs: idempotent admission, policies, FIFO exclusive starts, the state machine, grants, cancels."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa

from mcphost.errors import (
    ConcurrencyRejectedError,
    IllegalTransitionError,
    InvalidArgumentError,
    RunNotFoundError,
)
from mcphost.models import Run, RunFailure, RunStatus
from mcphost.protocol import AgentRunContext
from mcphost.stores import Stores, open_stores
from mcphost.stores.runs import RunStart, interrupted_by
from mcphost.stores.state import ScopeSnapshot
from mcphost.stores.transcript import item_values
from tests.mcphost.stores.factories import admitted, new_run


async def test_admit_stores_a_queued_run_and_its_grant(stores: Stores) -> None:
    run, grant = new_run("c1", thread_id="t1", host_id="host-a")
    stored, created = await stores.runs.admit(run, grant=grant, concurrency="enqueue")
    assert created
    assert stored == run
    assert await stores.runs.get(run.run_id) == run
    assert await stores.runs.get_by_event(run.event_id) == run
    record = await stores.runs.grant(run.run_id)
    assert record.grant == grant
    assert record.status is RunStatus.QUEUED
    assert not record.revoked
    assert record.active


async def test_an_event_admitted_again_returns_the_first_run(stores: Stores) -> None:
    run, grant = new_run("c1", event_id="evt-1")
    await stores.runs.admit(run, grant=grant, concurrency="enqueue")
    replay, replay_grant = new_run("c1", event_id="evt-1")
    existing, created = await stores.runs.admit(replay, grant=replay_grant, concurrency="reject")
    assert not created
    assert existing.run_id == run.run_id


@pytest.mark.parametrize("conversation_id", ["c1", None])
async def test_twenty_concurrent_admits_of_one_event_create_one_run(
    stores: Stores, conversation_id: str | None
) -> None:
    results: list[tuple[Run, bool]] = []

    async def admit() -> None:
        run, grant = new_run(conversation_id, event_id="evt-race")
        results.append(await stores.runs.admit(run, grant=grant, concurrency="enqueue"))

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(admit)
    assert sum(created for _, created in results) == 1
    assert len({run.run_id for run, _ in results}) == 1
    assert len((await stores.runs.list()).items) == 1


class _BuiltError(Exception):
    """Raised by a context builder once it has seen what the start read: the admission rolls back."""


async def test_an_admission_that_starts_its_run_builds_its_context_from_the_thread_after_its_user_row(
    stores: Stores,
) -> None:
    earlier = await stores.transcript.append(conversation_id="c1", thread_id="t1", role="user", content="a")
    owner = ("runner", "binding", "c1", "t1")
    await stores.state.set("conversation", owner, "count", 1)
    seen: list[tuple[str | None, bool, dict[str, ScopeSnapshot]]] = []

    async def build(
        latest: str | None, has_before: bool, state: Mapping[str, ScopeSnapshot]
    ) -> AgentRunContext:
        seen.append((latest, has_before, dict(state)))
        raise _BuiltError

    run, grant = new_run("c1", thread_id="t1")
    said = item_values(conversation_id="c1", thread_id="t1", role="user", content="b", run_id=run.run_id)
    start = RunStart(
        host_id="h", user_item=said, context=build, state=[("conversation", owner), ("runner", ("r",))]
    )
    with pytest.raises(_BuiltError):
        await stores.runs.admit(run, grant=grant, concurrency="enqueue", start=start)
    ((latest, has_before, state),) = seen
    assert latest is not None
    assert stores.cursors.decode_seq(latest, "transcript") > earlier.seq
    assert has_before
    assert state == {"conversation": ScopeSnapshot(values={"count": 1}), "runner": ScopeSnapshot(values={})}
    # It was one transaction: nothing of it stayed.
    assert await stores.runs.get_by_event(run.event_id) is None
    assert [i.item_id for i in (await stores.transcript.page("c1", "t1")).items] == [earlier.item_id]


async def test_an_admission_starts_its_run_only_in_its_conversations_turn(stores: Stores) -> None:
    first, grant = new_run("c1", host_id="h")
    started, _ = await stores.runs.admit(
        first, grant=grant, concurrency="enqueue", start=RunStart(host_id="h")
    )
    assert started.status is RunStatus.RUNNING
    assert started.started_at is not None
    second, grant = new_run("c1", host_id="h")
    said = item_values(conversation_id="c1", role="user", content="b", run_id=second.run_id)
    queued, created = await stores.runs.admit(
        second, grant=grant, concurrency="enqueue", start=RunStart(host_id="h", user_item=said)
    )
    assert created
    assert (queued.status, queued.started_at) == (RunStatus.QUEUED, None)
    assert (await stores.transcript.page("c1")).items == []  # its user row comes when it starts
    alone, grant = new_run(None, host_id="h")
    assert (await stores.runs.admit(alone, grant=grant, concurrency="enqueue", start=RunStart(host_id="h")))[
        0
    ].status is RunStatus.RUNNING


async def _failed(stores: Stores, event_id: str, code: str, conversation_id: str | None = "c1") -> Run:
    run = await admitted(stores, conversation_id, event_id=event_id)
    return await stores.runs.transition(
        run.run_id, RunStatus.FAILED, error=RunFailure(code=code, message="x")
    )


async def test_an_event_whose_run_failed_host_restarted_is_admitted_again_as_a_linked_attempt(
    stores: Stores,
) -> None:
    first = await _failed(stores, "evt-1", "host.restarted")
    again, grant = new_run("c1", event_id="evt-1")
    second, created = await stores.runs.admit(again, grant=grant, concurrency="enqueue")
    assert created
    assert (second.run_id, second.attempt, second.previous_run_id) == (again.run_id, 2, first.run_id)
    assert second.status is RunStatus.QUEUED
    assert await stores.runs.get_by_event("evt-1") == second
    assert [r.run_id for r in await stores.runs.attempts("evt-1")] == [first.run_id, second.run_id]
    # The second attempt is the event's run now: a third submission returns it.
    third, grant3 = new_run("c1", event_id="evt-1")
    assert await stores.runs.admit(third, grant=grant3, concurrency="enqueue") == (second, False)


async def test_a_run_keeps_the_key_that_created_it_and_lists_filter_by_it(stores: Stores) -> None:
    mine = [await _admitted_by(stores, "sender-a") for _ in range(3)]
    theirs = await _admitted_by(stores, "sender-b")
    keyless = await admitted(stores)
    assert (await stores.runs.get(mine[0].run_id)).created_by == "sender-a"
    assert keyless.created_by is None
    first = await stores.runs.list(created_by="sender-a", limit=2)
    assert [r.run_id for r in first.items] == [mine[2].run_id, mine[1].run_id]
    assert first.next_cursor is not None
    rest = await stores.runs.list(created_by="sender-a", limit=2, cursor=first.next_cursor)
    assert [r.run_id for r in rest.items] == [mine[0].run_id]
    assert not rest.has_more
    assert [r.run_id for r in (await stores.runs.list(created_by="sender-b")).items] == [theirs.run_id]
    assert len((await stores.runs.list()).items) == 5


async def _admitted_by(stores: Stores, key: str, event_id: str | None = None) -> Run:
    run, grant = new_run("c1", event_id=event_id)
    stored, created = await stores.runs.admit(
        run.model_copy(update={"created_by": key}), grant=grant, concurrency="enqueue"
    )
    assert created
    return stored


async def test_only_the_key_that_created_an_event_makes_its_next_attempt_after_a_host_restart(
    stores: Stores,
) -> None:
    first = await _admitted_by(stores, "sender-a", "evt-1")
    first = await stores.runs.transition(
        first.run_id, RunStatus.FAILED, error=RunFailure(code="host.restarted", message="x")
    )
    other, grant = new_run("c1", event_id="evt-1")
    taken = other.model_copy(update={"created_by": "sender-b"})
    assert await stores.runs.admit(taken, grant=grant, concurrency="enqueue") == (first, False)
    assert await stores.runs.attempts("evt-1") == [first]
    again, grant2 = new_run("c1", event_id="evt-1")
    second, created = await stores.runs.admit(
        again.model_copy(update={"created_by": "sender-a"}), grant=grant2, concurrency="enqueue"
    )
    assert created
    assert (second.attempt, second.created_by) == (2, "sender-a")


async def test_an_event_whose_run_failed_any_other_way_gets_that_run_back(stores: Stores) -> None:
    failed = await _failed(stores, "evt-1", "runner.crashed")
    again, grant = new_run("c1", event_id="evt-1")
    assert await stores.runs.admit(again, grant=grant, concurrency="enqueue") == (failed, False)
    assert await stores.runs.attempts("evt-1") == [failed]


@pytest.mark.parametrize("conversation_id", ["c1", None])
async def test_twenty_concurrent_resubmissions_after_a_host_restart_create_one_new_attempt(
    stores: Stores, conversation_id: str | None
) -> None:
    first = await _failed(stores, "evt-race", "host.restarted", conversation_id)
    results: list[tuple[Run, bool]] = []

    async def admit() -> None:
        run, grant = new_run(conversation_id, event_id="evt-race")
        results.append(await stores.runs.admit(run, grant=grant, concurrency="enqueue"))

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(admit)
    assert sum(created for _, created in results) == 1
    assert len({run.run_id for run, _ in results}) == 1
    [(second, _), *_] = results
    assert (second.attempt, second.previous_run_id) == (2, first.run_id)
    assert [r.attempt for r in await stores.runs.attempts("evt-race")] == [1, 2]


async def test_unknown_runs_raise_a_message_that_says_what_to_do(stores: Stores) -> None:
    with pytest.raises(RunNotFoundError, match=r"Run 'run_nope' does not exist; list runs with GET /v1/runs"):
        await stores.runs.get("run_nope")
    with pytest.raises(RunNotFoundError):
        await stores.runs.transition("run_nope", RunStatus.FAILED)
    with pytest.raises(RunNotFoundError):
        await stores.runs.revoke("run_nope")
    assert await stores.runs.get_by_event("evt_nope") is None


async def test_a_run_moves_through_its_states_and_ending_revokes_its_grant(stores: Stores) -> None:
    run = await admitted(stores)
    started = await stores.runs.try_start(run.run_id, host_id="host-a")
    assert started is not None
    assert started.status is RunStatus.RUNNING
    assert started.host_id == "host-a"
    assert started.started_at is not None
    assert started.ended_at is None
    done = await stores.runs.transition(run.run_id, RunStatus.COMPLETED, usage={"input_tokens": 3})
    assert done.status is RunStatus.COMPLETED
    assert done.ended_at is not None
    assert done.usage == {"input_tokens": 3}
    record = await stores.runs.grant(run.run_id)
    assert record.revoked
    assert not record.active


async def test_an_illegal_transition_raises_the_exact_message(stores: Stores) -> None:
    run = await admitted(stores)
    await stores.runs.transition(
        run.run_id, RunStatus.FAILED, error=RunFailure(code="runner.crashed", message="boom")
    )
    with pytest.raises(IllegalTransitionError) as info:
        await stores.runs.transition(run.run_id, RunStatus.RUNNING)
    assert str(info.value) == f"Run {run.run_id!r} is failed; cannot move to running."
    with pytest.raises(IllegalTransitionError, match="is failed; cannot move to completed"):
        await stores.runs.transition(run.run_id, RunStatus.COMPLETED)
    stored = await stores.runs.get(run.run_id)
    assert stored.status is RunStatus.FAILED
    assert stored.error == RunFailure(code="runner.crashed", message="boom")


async def test_finish_ends_a_run_once_and_a_repeat_returns_it_as_it_ended(stores: Stores) -> None:
    run = await admitted(stores)
    await stores.runs.try_start(run.run_id, host_id="h")
    assert await stores.runs.active_on("h") == [run.run_id]
    ended = await stores.runs.finish(run.run_id, RunStatus.COMPLETED, usage={"tokens": 3})
    assert ended.status is RunStatus.COMPLETED
    assert ended.usage == {"tokens": 3}
    again = await stores.runs.finish(run.run_id, RunStatus.FAILED, error=RunFailure(code="x", message="late"))
    assert again == ended  # the first terminal status wins; nothing is rewritten
    assert (await stores.runs.grant(run.run_id)).revoked
    assert await stores.runs.active_on("h") == []


async def test_an_admit_repeated_after_its_commit_reports_the_run_as_created(stores: Stores) -> None:
    run = await admitted(stores)  # the first attempt's commit landed, its answer was lost
    grant = (await stores.runs.grant(run.run_id)).grant
    again, created = await stores.runs.admit(run, grant=grant, concurrency="enqueue")
    assert (again.run_id, created) == (run.run_id, True)


async def test_queued_cannot_complete_without_running(stores: Stores) -> None:
    run = await admitted(stores)
    with pytest.raises(IllegalTransitionError, match="is queued; cannot move to completed"):
        await stores.runs.transition(run.run_id, RunStatus.COMPLETED)


async def test_concurrent_terminal_moves_let_exactly_one_win(stores: Stores) -> None:
    run = await admitted(stores)
    await stores.runs.try_start(run.run_id, host_id="h")
    wins: list[RunStatus] = []
    refused: list[str] = []

    async def end(status: RunStatus) -> None:
        try:
            wins.append((await stores.runs.transition(run.run_id, status)).status)
        except IllegalTransitionError as exc:
            refused.append(str(exc))

    async with anyio.create_task_group() as tg:
        for status in [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED] * 4:
            tg.start_soon(end, status)
    assert len(wins) == 1
    assert len(refused) == 11
    assert (await stores.runs.get(run.run_id)).status is wins[0]


async def test_runs_of_a_conversation_start_one_at_a_time_in_admission_order(stores: Stores) -> None:
    first, second, third = [await admitted(stores, "c1") for _ in range(3)]
    assert await stores.runs.try_start(second.run_id, host_id="h") is None  # an older run is queued
    assert await stores.runs.try_start(first.run_id, host_id="h") is not None
    assert await stores.runs.try_start(first.run_id, host_id="other") is None  # running elsewhere
    again = await stores.runs.try_start(first.run_id, host_id="h")  # a repeat by its own host
    assert again is not None
    assert again.status is RunStatus.RUNNING
    assert await stores.runs.try_start(second.run_id, host_id="h") is None  # first is running
    await stores.runs.transition(first.run_id, RunStatus.COMPLETED)
    assert await stores.runs.try_start(third.run_id, host_id="h") is None  # second is older
    assert await stores.runs.try_start(second.run_id, host_id="h") is not None
    await stores.runs.transition(second.run_id, RunStatus.CANCELLED)
    assert await stores.runs.try_start(third.run_id, host_id="h") is not None


async def test_other_conversations_and_runs_without_one_start_independently(stores: Stores) -> None:
    a, b = await admitted(stores, "c1"), await admitted(stores, "c2")
    n1, n2 = await admitted(stores, None), await admitted(stores, None)
    for run in (a, b, n1, n2):
        assert await stores.runs.try_start(run.run_id, host_id="h") is not None


async def test_concurrent_starts_in_one_conversation_start_exactly_one_run(
    stores: Stores, database_url: str, tmp_path: Path
) -> None:
    runs = [await admitted(stores, "c1") for _ in range(2)]
    await stores.runs.transition(runs[0].run_id, RunStatus.CANCELLED)
    late = [await admitted(stores, "c1") for _ in range(3)]
    # Two independent engines stand in for two host processes.
    async with open_stores(database_url, tmp_path / "other", migrate=False) as other:
        started: set[tuple[str, str]] = set()

        async def start(which: Stores, host_id: str, run_id: str) -> None:
            if await which.runs.try_start(run_id, host_id=host_id) is not None:
                started.add((host_id, run_id))  # a repeat by the winning host answers it again

        async with anyio.create_task_group() as tg:
            for run in [runs[1], *late] * 3:
                tg.start_soon(start, stores, "h1", run.run_id)
                tg.start_soon(start, other, "h2", run.run_id)
    assert len(started) == 1
    assert {run_id for _, run_id in started} == {runs[1].run_id}
    running = await stores.runs.list(conversation_id="c1", status=RunStatus.RUNNING)
    assert [r.run_id for r in running.items] == [runs[1].run_id]


async def test_reject_refuses_while_the_conversation_has_an_active_run(stores: Stores) -> None:
    active = await admitted(stores, "c1")
    run, grant = new_run("c1")
    with pytest.raises(ConcurrencyRejectedError, match=f"already has queued run {active.run_id!r}"):
        await stores.runs.admit(run, grant=grant, concurrency="reject")
    assert await stores.runs.get_by_event(run.event_id) is None
    other, other_grant = new_run("c2")
    assert (await stores.runs.admit(other, grant=other_grant, concurrency="reject"))[1]
    await stores.runs.transition(active.run_id, RunStatus.CANCELLED)
    assert (await stores.runs.admit(run, grant=grant, concurrency="reject"))[1]


async def test_concurrent_rejecting_admits_in_two_processes_let_exactly_one_in(
    stores: Stores, database_url: str, tmp_path: Path
) -> None:
    admitted_ids: list[str] = []
    rejected: list[str] = []

    async def admit(which: Stores) -> None:
        run, grant = new_run("c1")
        try:
            admitted_ids.append((await which.runs.admit(run, grant=grant, concurrency="reject"))[0].run_id)
        except ConcurrencyRejectedError as exc:
            rejected.append(exc.details["active_run_id"])

    async with (
        open_stores(database_url, tmp_path / "other", migrate=False) as other,
        anyio.create_task_group() as tg,
    ):
        for _ in range(10):
            tg.start_soon(admit, stores)
            tg.start_soon(admit, other)
    assert len(admitted_ids) == 1
    assert rejected == admitted_ids * 19


async def test_interrupt_asks_active_runs_to_cancel_and_queues_behind_them(stores: Stores) -> None:
    running = await admitted(stores, "c1")
    await stores.runs.try_start(running.run_id, host_id="host-a")
    waiting = await admitted(stores, "c1")
    elsewhere = await admitted(stores, "c2")
    await stores.runs.try_start(elsewhere.run_id, host_id="host-a")
    run, grant = new_run("c1")
    new, created = await stores.runs.admit(run, grant=grant, concurrency="interrupt")
    assert created
    assert new.status is RunStatus.QUEUED
    # The reason travels with the request, so the host running it ends it as a local interrupt would.
    assert await stores.runs.cancel_requested("host-a") == [(running.run_id, interrupted_by(new.run_id))]
    assert await stores.runs.cancel_requested("host-b") == []
    await stores.runs.transition(running.run_id, RunStatus.CANCELLED)
    await stores.runs.transition(waiting.run_id, RunStatus.CANCELLED)
    assert await stores.runs.cancel_requested("host-a") == []
    assert await stores.runs.try_start(new.run_id, host_id="host-a") is not None


async def test_request_cancel_is_idempotent_and_ignores_finished_runs(stores: Stores) -> None:
    run = await admitted(stores)
    await stores.runs.try_start(run.run_id, host_id="h")
    await stores.runs.request_cancel(run.run_id)
    assert await stores.runs.cancel_requested("h") == [(run.run_id, None)]
    await stores.runs.request_cancel(run.run_id, "first reason")
    await stores.runs.request_cancel(run.run_id, "second reason")  # the first reason given stays
    assert await stores.runs.cancel_requested("h") == [(run.run_id, "first reason")]
    await stores.runs.transition(run.run_id, RunStatus.CANCELLED)
    assert (await stores.runs.request_cancel(run.run_id)).status is RunStatus.CANCELLED
    assert await stores.runs.cancel_requested("h") == []


async def test_revoke_is_idempotent(stores: Stores) -> None:
    run = await admitted(stores)
    await stores.runs.revoke(run.run_id)
    await stores.runs.revoke(run.run_id)
    record = await stores.runs.grant(run.run_id)
    assert record.revoked
    assert not record.active
    assert record.status is RunStatus.QUEUED


async def test_list_pages_newest_first_with_filters(stores: Stores) -> None:
    runs = [await admitted(stores, "c1" if i % 2 else "c2") for i in range(7)]
    await stores.runs.transition(runs[1].run_id, RunStatus.FAILED)
    first = await stores.runs.list(limit=3)
    assert [r.run_id for r in first.items] == [r.run_id for r in runs[::-1][:3]]
    assert first.has_more
    assert first.next_cursor is not None
    rest = await stores.runs.list(limit=10, cursor=first.next_cursor)
    assert [r.run_id for r in rest.items] == [r.run_id for r in runs[::-1][3:]]
    assert not rest.has_more
    c1 = await stores.runs.list(conversation_id="c1")
    assert [r.run_id for r in c1.items] == [runs[5].run_id, runs[3].run_id, runs[1].run_id]
    failed = await stores.runs.list(conversation_id="c1", status=RunStatus.FAILED)
    assert [r.run_id for r in failed.items] == [runs[1].run_id]
    with pytest.raises(InvalidArgumentError, match="belongs to 'runs' paging"):
        await stores.events.page("c1", before=first.next_cursor)


async def test_a_time_window_leaves_out_a_run_whose_clock_disagreed_and_still_fills_its_page(
    stores: Stores,
) -> None:
    # A window is the `created_seq` range between its first and last run by `created_at`; a run inside
    # that range stamped outside the window (its replica's clock behind) is read and dropped, and the
    # page is filled from the runs below it.
    runs = [await admitted(stores, "c1") for _ in range(5)]
    async with stores.db.write() as session:
        await session.execute(
            sa.text("UPDATE runs SET created_at = :at WHERE run_id = :run_id"),
            {"at": runs[0].created_at - 10, "run_id": runs[2].run_id},
        )
    since, until = runs[1].created_at, runs[4].created_at
    first = await stores.runs.list(since=since, until=until, limit=1)
    assert [r.run_id for r in first.items] == [runs[3].run_id]
    assert first.has_more
    rest = await stores.runs.list(since=since, until=until, limit=1, cursor=first.next_cursor)
    assert [r.run_id for r in rest.items] == [runs[1].run_id]
    assert not rest.has_more


async def test_list_filters_by_agent_and_time_window_and_pages_within_them(stores: Stores) -> None:
    runs = [await admitted(stores, "c1", agent_id="a" if i % 2 else "b") for i in range(8)]
    ids = [r.run_id for r in runs]
    by_agent = await stores.runs.list(agent_id="a")
    assert [r.run_id for r in by_agent.items] == ids[7::-2]
    queued_b = await stores.runs.list(agent_id="b", status=RunStatus.QUEUED, conversation_id="c1")
    assert [r.run_id for r in queued_b.items] == ids[6::-2]
    window = await stores.runs.list(since=runs[2].created_at, until=runs[6].created_at, limit=2)
    assert [r.run_id for r in window.items] == [ids[5], ids[4]]
    rest = await stores.runs.list(
        since=runs[2].created_at, until=runs[6].created_at, cursor=window.next_cursor
    )
    assert [r.run_id for r in rest.items] == [ids[3], ids[2]]
    assert not rest.has_more
    newer = await stores.runs.list(since=runs[5].created_at, agent_id="a")
    assert [r.run_id for r in newer.items] == [ids[7], ids[5]]
    assert (await stores.runs.list(until=runs[0].created_at)).items == []
    assert (await stores.runs.list(since=runs[7].created_at + 3600)).items == []
    with pytest.raises(InvalidArgumentError, match="is after until"):
        await stores.runs.list(since=runs[6].created_at, until=runs[2].created_at)
