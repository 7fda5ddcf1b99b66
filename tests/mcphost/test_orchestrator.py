"""The orchestrator end to end with real plugin subprocesses, on a SQLite file and on PostgreSQL.

Each rule of PROTOCOL §4 is driven by the misbehaving test plugin; the echo plugin shows the happy path.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import pytest

from mcphost.app import Host, open_host
from mcphost.cli import EXIT_USAGE
from mcphost.errors import ConcurrencyRejectedError, NoBindingError, RunnerNotFoundError
from mcphost.grants import build_grant, mint_token
from mcphost.models import AgentEventEnvelope, Run, RunStatus, new_id
from mcphost.orchestrator import _tuning as orchestrator_module
from mcphost.stores import event_values
from mcphost.stores.results import StoredResult
from tests.examples.clikit import mcphost
from tests.mcphost.hostkit import ECHO_RUNNER, error_code, host_settings, message, run_event, wait_running
from tests.mcphost.stores.factories import nested_json, overwrite_json


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    async with open_host(host_settings(database_url, tmp_path / "data")) as opened:
        yield opened


async def results_of(host: Host, run: Run) -> list[StoredResult]:
    out: list[StoredResult] = []
    while batch := await host.stores.results.list(run.run_id, after=out[-1].seq if out else 0, limit=5000):
        out += batch
    return out


async def event_types_of(host: Host, run: Run) -> list[str]:
    return [e.event_type for e in await host.stores.events.for_run(run.run_id, limit=1000)]


async def test_one_message_through_echo_leaves_every_fact(host: Host) -> None:
    run = await run_event(host, message("hello", bot="echo"))

    assert run.status is RunStatus.COMPLETED
    assert run.runner_id == ECHO_RUNNER
    results = await results_of(host, run)
    assert [r.seq for r in results] == list(range(1, len(results) + 1))
    assert [r.type for r in results] == [
        "message.delta",
        "message.completed",
        "state.updated",
        "run.completed",
    ]
    events = await host.stores.events.for_run(run.run_id, limit=100)
    assert [(e.event_type, e.kind) for e in events] == [("message.received", "inbound")]
    page = await host.stores.transcript.page("c1", None, limit=10)
    assert [(t.role, t.content) for t in reversed(page.items)] == [("user", "hello"), ("assistant", "hello")]
    grant = await host.stores.runs.grant(run.run_id)
    assert grant.revoked
    owner = grant.grant.state_scope_id("conversation")
    assert owner is not None
    entry = await host.stores.state.get("conversation", owner, "turns")
    assert entry is not None
    assert entry.value == 1

    second = await run_event(host, message("again", bot="echo"))
    assert second.status is RunStatus.COMPLETED
    entry = await host.stores.state.get("conversation", owner, "turns")
    assert entry is not None
    assert entry.value == 2  # the echo runner read 1 from its context's state snapshot


async def test_a_repeated_event_id_returns_the_existing_run(host: Host) -> None:
    event = message("ok", event_id="evt-fixed-1")
    first = await run_event(host, event)
    again = await host.orchestrator.submit(event)
    assert not again.created
    assert again.run.run_id == first.run_id
    page = await host.stores.runs.list(limit=10)
    assert [r.run_id for r in page.items] == [first.run_id]
    assert len((await host.stores.transcript.page("c1", None, limit=10)).items) == 2


async def test_a_replay_gets_its_run_even_when_its_agent_is_gone(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = message("ok", event_id="evt-fixed-2")
    first = await run_event(host, event)

    def no_agent(_event: AgentEventEnvelope) -> None:
        raise NoBindingError("the agent was removed from the config")

    monkeypatch.setattr(host.orchestrator, "resolve", no_agent)
    again = await host.orchestrator.submit(event)
    assert (again.created, again.run.run_id) == (False, first.run_id)
    with pytest.raises(NoBindingError, match="removed"):
        await host.orchestrator.submit(message("new", event_id="evt-fresh"))


async def test_a_run_and_its_inbound_event_are_admitted_together(host: Host) -> None:
    admission = await host.orchestrator.submit(message("slow:30", event_id="evt-together"))
    # Before the run has even started, its event is in the log, tied to the run.
    stored = await host.stores.events.get("evt-together")
    assert (stored.kind, stored.run_id, stored.conversation_id) == ("inbound", admission.run.run_id, "c1")
    assert stored.payload["input"]["text"] == "slow:30"
    await host.orchestrator.cancel(admission.run.run_id)
    with anyio.fail_after(60):
        await host.orchestrator.wait(admission.run.run_id)


async def test_a_run_whose_inbound_event_cannot_be_written_is_not_admitted(host: Host) -> None:
    # One transaction: when the event row fails, the run row it would have joined is rolled back too
    # (on PostgreSQL both are parts of one statement, `stores/_admit.py`).
    def refuse_the_event_row(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if "insert into events" in statement.lower():
            raise RuntimeError("the event log refused the row")

    with (
        host.stores.db.hooks.added("before_cursor_execute", refuse_the_event_row),
        pytest.raises(RuntimeError, match="refused the row"),
    ):
        await host.orchestrator.submit(message("ok", event_id="evt-half"))
    assert (await host.stores.runs.list(limit=10)).items == []
    assert await host.stores.runs.get_by_event("evt-half") is None


async def test_no_wake_up_is_lost_when_polling_is_switched_off(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With an hour between polls, only the signals can move `results`, `wait` and the conversation
    # queue along: a notify lost between a read and the wait that follows it would hang here.
    monkeypatch.setattr(orchestrator_module, "QUEUE_POLL_S", 3600.0)
    monkeypatch.setattr(orchestrator_module, "LOCAL_RECHECK_S", 3600.0)
    with anyio.fail_after(90):
        for i in range(15):
            admission = await host.orchestrator.submit(message(f"m{i}", bot="echo", conversation=f"s{i}"))
            types = [r.type async for r in host.orchestrator.results(admission.run.run_id)]
            assert types[-1] == "run.completed"
            assert (await host.orchestrator.wait(admission.run.run_id)).status is RunStatus.COMPLETED
        queued = [
            await host.orchestrator.submit(message(f"q{i}", bot="echo", conversation="one-queue"))
            for i in range(8)
        ]
        ended = [await host.orchestrator.wait(a.run.run_id) for a in queued]
    assert [r.status for r in ended] == [RunStatus.COMPLETED] * 8
    assert [r.started_at for r in ended] == sorted(r.started_at or 0 for r in ended)


async def test_an_event_no_agent_takes_changes_nothing(host: Host) -> None:
    with pytest.raises(NoBindingError, match=r"No agent is bound to 'message\.received'"):
        await host.orchestrator.submit(message("hi", bot="nobody"))
    with pytest.raises(NoBindingError, match="Agent 'ghost' is not configured"):
        await host.orchestrator.submit(message("hi", agent_id="ghost"))
    assert (await host.stores.runs.list(limit=10)).items == []
    assert (await host.stores.events.page("c1", None, limit=10)).items == []


async def test_an_unregistered_runner_refuses_the_event_before_storing(
    database_url: str, tmp_path: Path
) -> None:
    settings = host_settings(database_url, tmp_path / "data")
    ghost = settings.agents[0].model_copy(update={"runner": "plugin:ghost/none/default"})
    settings = settings.model_copy(update={"agents": [ghost, *settings.agents[1:]]})
    async with open_host(settings) as opened:
        with pytest.raises(RunnerNotFoundError, match="'plugin:ghost/none/default' is not registered"):
            await opened.orchestrator.submit(message("hi", bot="echo"))
        assert (await opened.stores.runs.list(limit=10)).items == []


@pytest.mark.parametrize(
    ("text", "code", "message_part"),
    [
        ("oversized", "payload_too_large", "exceeds the 1048576-byte limit"),
        ("line-too-long", "payload_too_large", "exceeds the 1048576-byte limit"),
        ("invalid-data", "invalid_argument", "data.chunk.content"),
        ("unstorable:nul", "invalid_argument", "data.message.content: contains a NUL character"),
        ("unstorable:surrogate", "invalid_argument", "data.message.content: contains a lone surrogate"),
        ("unstorable:nan", "invalid_argument", "data.usage.input_tokens: nan is not a finite number"),
        ("unstorable:bigint", "invalid_argument", "sequence: the integer is outside the signed 64-bit"),
        ("unstorable:unknown-nul", "invalid_argument", "type: contains a NUL character"),
        ("no-output", "runner.empty_output", "without producing any message"),
        ("crash", "runner.crashed", "exited with code 7"),
        ("fail", "runner.error", ""),
        ("artifact-bad-sha", "invalid_argument", "does not match the content"),
        ("deep-metadata:900", "invalid_argument", "nest more than 64 levels deep"),
        ("deep-tool-call:252", "invalid_argument", "nest more than 64 levels deep"),
        ("deep-state:300", "invalid_argument", "nest more than 64 levels deep"),
    ],
)
async def test_a_misbehaving_runner_fails_its_run_with_the_protocol_code(
    host: Host, text: str, code: str, message_part: str
) -> None:
    run = await run_event(host, message(text))
    assert run.status is RunStatus.FAILED
    assert error_code(run) == code
    assert run.error is not None
    assert message_part in run.error.message
    results = await results_of(host, run)
    assert results[-1].type == "run.failed"
    assert results[-1].payload["data"]["code"] == code
    assert [r.seq for r in results] == list(range(1, len(results) + 1))
    assert (await host.stores.runs.grant(run.run_id)).revoked


async def test_an_unknown_result_type_is_recorded_and_ignored(host: Host) -> None:
    run = await run_event(host, message("unknown-type"))
    assert run.status is RunStatus.COMPLETED
    assert "telemetry.custom" not in [r.type for r in await results_of(host, run)]
    events = await host.stores.events.for_run(run.run_id, limit=100)
    ignored = [e for e in events if e.event_type == "result.ignored"]
    assert [(e.kind, e.payload["type"]) for e in ignored] == [("ignored", "telemetry.custom")]


async def test_duplicate_sequences_are_dropped(host: Host) -> None:
    run = await run_event(host, message("dup-seq"))
    assert run.status is RunStatus.COMPLETED
    runner_seqs = [r.payload.get("sequence") for r in await results_of(host, run)]
    assert runner_seqs == [1, 2, 3, 4]
    assert "result.duplicate" in await event_types_of(host, run)


async def test_a_sequence_gap_is_a_warning(host: Host) -> None:
    run = await run_event(host, message("gap-seq"))
    assert run.status is RunStatus.COMPLETED
    assert [r.payload.get("sequence") for r in await results_of(host, run)] == [1, 2, 5, 6, 7]
    gaps = [
        e
        for e in await host.stores.events.for_run(run.run_id, limit=100)
        if e.event_type == "result.sequence_gap"
    ]
    assert [(g.payload["expected"], g.payload["got"]) for g in gaps] == [(3, 5)]


async def test_a_result_for_another_run_is_rejected(host: Host) -> None:
    run = await run_event(host, message("wrong-run-id"))
    assert run.status is RunStatus.COMPLETED
    assert all(r.payload["run_id"] == run.run_id for r in await results_of(host, run))
    assert "result.rejected" in await event_types_of(host, run)


async def test_nothing_is_accepted_after_run_completed(host: Host) -> None:
    run = await run_event(host, message("after-complete"))
    assert run.status is RunStatus.COMPLETED
    types = [r.type for r in await results_of(host, run)]
    assert types[-1] == "run.completed"
    assert "message.delta" not in types[types.index("run.completed") :]
    assert "result.ignored" in await event_types_of(host, run)


async def test_a_runner_that_hangs_past_its_deadline_fails_with_deadline_exceeded(host: Host) -> None:
    started = time.monotonic()
    run = await run_event(host, message("hang", bot="short"))
    assert run.status is RunStatus.FAILED
    assert error_code(run) == "deadline_exceeded"
    assert time.monotonic() - started < 10
    assert (await host.stores.runs.grant(run.run_id)).revoked
    # The plugin is still healthy for the next run.
    assert (await run_event(host, message("ok"))).status is RunStatus.COMPLETED


async def test_a_flood_of_ten_thousand_deltas_is_persisted_in_order(host: Host) -> None:
    run = await run_event(host, message("flood:10000"))
    assert run.status is RunStatus.COMPLETED
    results = await results_of(host, run)
    assert len(results) == 10_001
    assert [r.seq for r in results] == list(range(1, 10_002))
    chunks = [r.payload["data"]["chunk"]["content"] for r in results[:-1]]
    assert chunks == [f"chunk {i}" for i in range(1, 10_001)]
    transcript = await host.stores.transcript.page("c1", None, limit=1)
    assert transcript.items[0].content == "flooded 10000"  # run.completed's message is the final one


async def test_state_updates_are_checked_against_the_grant(host: Host) -> None:
    ok = await run_event(host, message("state:conversation", bot="wide"))
    assert ok.status is RunStatus.COMPLETED
    refused = await run_event(host, message("state:runner", bot="wide"))
    assert refused.status is RunStatus.FAILED
    assert error_code(refused) == "unauthorized"
    assert refused.error is not None
    assert "may not write 'runner' state" in refused.error.message


async def test_a_result_nested_too_deep_is_refused_before_anything_is_stored(host: Host) -> None:
    deep_state = await run_event(host, message("deep-state:300", bot="wide"))
    deep_call = await run_event(host, message("deep-tool-call:252", bot="wide"))
    for run in (deep_state, deep_call):
        assert (run.status, error_code(run)) == (RunStatus.FAILED, "invalid_argument")
        types = [r.type for r in await results_of(host, run)]
        assert "state.updated" not in types
        assert "tool.call.started" not in types
        assert "tool.call.started" not in await event_types_of(host, run)
    grant = (await host.stores.runs.grant(deep_state.run_id)).grant
    owner = grant.state_scope_id("conversation")
    assert owner is not None
    assert await host.stores.state.get("conversation", owner, "deep") is None
    # The conversation's event log still pages, and the next run of the same scope starts.
    assert (await host.stores.events.page("c1", None, limit=100)).items
    assert (await run_event(host, message("ok", bot="wide"))).status is RunStatus.COMPLETED


@pytest.mark.parametrize("depth", [300, 5000])
async def test_a_stored_state_value_too_deep_to_serve_is_an_error_entry_and_runs_go_on(
    host: Host, depth: int
) -> None:
    first = await run_event(host, message("state:conversation", bot="wide"))
    grant = (await host.stores.runs.grant(first.run_id)).grant
    owner = grant.state_scope_id("conversation")
    assert owner is not None
    await host.stores.state.set("conversation", owner, "good", {"kept": True})
    await host.stores.state.set("conversation", owner, "bad", 1)
    await overwrite_json(
        host.stores,
        "state",
        "value",
        nested_json(depth),
        scope="conversation",
        owner=json.dumps(list(owner), separators=(",", ":")),
        key="bad",
    )
    run = await run_event(host, message("show-state", bot="wide"))
    assert run.status is RunStatus.COMPLETED, run.error
    final = (await results_of(host, run))[-2]
    state = json.loads(final.payload["data"]["message"]["content"])
    assert state["conversation"] == {"good": {"kept": True}, "misbehave": 1}
    [error] = state["errors"]
    assert (error["scope"], error["key"], error["code"]) == ("conversation", "bad", "runtime_error")
    assert "mcphost state delete conversation bad" in error["message"]


async def test_an_inline_artifact_is_registered_and_owned_by_the_run(host: Host) -> None:
    run = await run_event(host, message("artifact-inline"))
    assert run.status is RunStatus.COMPLETED
    created = [
        e
        for e in await host.stores.events.for_run(run.run_id, limit=100)
        if e.event_type == "artifact.created"
    ]
    assert len(created) == 1
    artifact_id = created[0].payload["artifact"]["artifact_id"]
    record = await host.stores.artifacts.get(artifact_id)
    assert record.owner_run_id == run.run_id
    assert await host.stores.artifacts.read(artifact_id) == b"hello artifact"


async def test_a_message_names_its_own_inline_artifact_by_the_runners_id(host: Host) -> None:
    run = await run_event(host, message("artifact-inline-msg"))
    assert run.status is RunStatus.COMPLETED, run.error
    created = [
        e
        for e in await host.stores.events.for_run(run.run_id, limit=100)
        if e.event_type == "artifact.created"
    ]
    host_id = created[0].payload["artifact"]["artifact_id"]
    assert host_id != "art_inline"
    row = (await host.stores.transcript.page("c1", None, limit=10)).items[0]
    assert row.role == "assistant"
    assert [a.artifact_id for a in row.artifacts] == [host_id]
    assert [c["artifact_id"] for c in row.contents] == [host_id]
    assert (await host.stores.artifacts.get(host_id)).owner_run_id == run.run_id


async def test_cancel_ends_a_running_run_as_cancelled(host: Host) -> None:
    admission = await host.orchestrator.submit(message("slow:30"))
    run_id = admission.run.run_id
    await wait_running(host, run_id)
    await host.orchestrator.cancel(run_id)
    with anyio.fail_after(10):
        run = await host.orchestrator.wait(run_id)
    assert run.status is RunStatus.CANCELLED
    assert error_code(run) == "cancelled"
    assert (await host.stores.runs.grant(run_id)).revoked


async def test_non_message_events_never_become_user_transcript_rows(host: Host) -> None:
    event = AgentEventEnvelope.model_validate(
        {
            "event_type": "group.member_joined",
            "conversation": {"conversation_id": "c9", "bot_id": "wide"},
            "actor": {"actor_id": "newcomer"},
            "input": {"text": "ok"},
        }
    )
    run = await run_event(host, event)
    assert run.status is RunStatus.COMPLETED
    rows = (await host.stores.transcript.page("c9", None, limit=10)).items
    assert [r.role for r in rows] == ["assistant"]
    assert [e.event_type for e in (await host.stores.events.page("c9", None, limit=10)).items] == [
        "group.member_joined"
    ]


async def test_results_can_be_followed_live_and_resumed_exactly_once(host: Host) -> None:
    admission = await host.orchestrator.submit(message("flood:300"))
    run_id = admission.run.run_id
    seen: list[int] = []
    async for item in host.orchestrator.results(run_id):
        seen.append(item.seq)
        if len(seen) == 100:
            break
    async for item in host.orchestrator.results(run_id, after=seen[-1]):
        seen.append(item.seq)
    assert seen == list(range(1, 302))


# -- concurrency ---------------------------------------------------------------------------------------


async def test_enqueue_keeps_per_conversation_order_and_loses_nothing(host: Host) -> None:
    submitted: dict[str, list[str]] = {}
    for i in range(50):
        conversation = f"q{i % 10}"
        admission = await host.orchestrator.submit(message("slow:0.02", conversation=conversation))
        submitted.setdefault(conversation, []).append(admission.run.run_id)
    runs: dict[str, Run] = {}
    with anyio.fail_after(120):
        for run_ids in submitted.values():
            for run_id in run_ids:
                runs[run_id] = await host.orchestrator.wait(run_id)
    assert all(r.status is RunStatus.COMPLETED for r in runs.values())
    for run_ids in submitted.values():
        ordered = [runs[r] for r in run_ids]
        for earlier, later in itertools.pairwise(ordered):
            assert earlier.ended_at is not None
            assert later.started_at is not None
            assert earlier.ended_at <= later.started_at, (
                "two runs of one conversation overlapped or reordered"
            )
    for conversation in submitted:
        rows = (await host.stores.transcript.page(conversation, None, limit=100)).items
        assert len(rows) == 10  # 5 user + 5 assistant rows


async def test_reject_refuses_a_second_event_while_one_runs(host: Host) -> None:
    first = await host.orchestrator.submit(message("slow:30", bot="rej"))
    with pytest.raises(ConcurrencyRejectedError, match=first.run.run_id):
        await host.orchestrator.submit(message("ok", bot="rej"))
    await host.orchestrator.cancel(first.run.run_id)
    with anyio.fail_after(10):
        await host.orchestrator.wait(first.run.run_id)
    assert (await run_event(host, message("ok", bot="rej"))).status is RunStatus.COMPLETED
    assert len((await host.stores.runs.list(limit=10)).items) == 2


async def test_interrupt_cancels_the_running_run(host: Host) -> None:
    first = await host.orchestrator.submit(message("slow:30", bot="int"))
    await wait_running(host, first.run.run_id)
    second = await run_event(host, message("ok", bot="int"))
    assert second.status is RunStatus.COMPLETED
    first_run = await host.stores.runs.get(first.run.run_id)
    assert first_run.status is RunStatus.CANCELLED
    assert first_run.error is not None
    assert "interrupted by a newer event" in first_run.error.details["reason"]


async def test_max_concurrent_runs_bounds_the_running_runs(database_url: str, tmp_path: Path) -> None:
    settings = host_settings(database_url, tmp_path / "data", max_concurrent_runs=2)
    async with open_host(settings) as opened:
        admissions = [
            await opened.orchestrator.submit(message("slow:0.3", conversation=f"cap{i}")) for i in range(6)
        ]
        peak = 0
        with anyio.fail_after(30):
            while True:
                page = await opened.stores.runs.list(status=RunStatus.RUNNING, limit=100)
                peak = max(peak, len(page.items))
                done = [await opened.stores.runs.get(a.run.run_id) for a in admissions]
                if all(r.status.is_terminal for r in done):
                    break
                await anyio.sleep(0.02)
        assert all(r.status is RunStatus.COMPLETED for r in done)
        assert peak == 2


async def _left_by_a_dead_host(host: Host, text: str, conversation: str, *, running: bool = False) -> Run:
    """A run admitted (and started) by a host that was then killed: stored exactly as `submit` stores one."""
    event = message(text, conversation=conversation)
    binding, runner = host.orchestrator.resolve(event)
    run_id, now = new_id("run"), time.time()
    grant = build_grant(
        run_id=run_id,
        event=event,
        binding=binding,
        manifest=runner.manifest,
        token_hash=mint_token()[1],
        deadline_at=now + 60,
    )
    run = Run(
        run_id=run_id,
        event_id=event.event_id,
        event_type=event.event_type,
        agent_id=binding.agent.id,
        runner_id=runner.manifest.id,
        conversation_id=conversation,
        thread_id=None,
        status=RunStatus.QUEUED,
        created_at=now,
        deadline_at=grant.deadline_at,
        host_id="host-killed",
    )
    inbound = event_values(
        event_id=event.event_id,
        event_type=event.event_type,
        kind="inbound",
        conversation_id=conversation,
        thread_id=None,
        run_id=run_id,
        actor_id="u1",
        source=event.source,
        payload=event.model_dump(mode="json"),
    )
    stored, _ = await host.stores.runs.admit(run, grant=grant, concurrency="enqueue", inbound=inbound)
    if running:
        started = await host.stores.runs.try_start(run_id, host_id="host-killed")
        assert started is not None
        return started
    return stored


async def test_a_requeued_run_whose_event_no_longer_validates_fails_without_quoting_the_event(
    database_url: str, tmp_path: Path
) -> None:
    settings = host_settings(database_url, tmp_path / "data")
    async with open_host(settings) as first:
        left = await _left_by_a_dead_host(first, "ok", "c1")
        broken = {"event_id": left.event_id, "event_type": "message.received", "stray": "SECRET-TEXT"}
        await overwrite_json(first.stores, "events", "payload", json.dumps(broken), event_id=left.event_id)
    async with open_host(settings) as second:
        with anyio.fail_after(60):
            failed = await second.orchestrator.wait(left.run_id)
    assert failed.status is RunStatus.FAILED
    assert failed.error is not None
    assert failed.error.code == "host.restarted"
    assert "could not be re-queued: " in failed.error.message
    assert "SECRET-TEXT" not in failed.error.model_dump_json()


async def test_after_a_host_dies_its_queued_runs_run_in_order_and_a_resubmitted_run_is_a_new_attempt(
    database_url: str, tmp_path: Path
) -> None:
    settings = host_settings(database_url, tmp_path / "data")
    async with open_host(settings) as first:
        cut_off = await _left_by_a_dead_host(first, "slow:30", "c1", running=True)
        behind = [await _left_by_a_dead_host(first, "ok", "c1") for _ in range(3)]
        elsewhere = await _left_by_a_dead_host(first, "ok", "c2")
    async with open_host(settings) as second:
        with anyio.fail_after(60):
            done = [await second.orchestrator.wait(r.run_id) for r in [*behind, elsewhere]]
        # Never started: re-queued and run here, one at a time in their conversation's order.
        assert [(r.status, r.error) for r in done] == [(RunStatus.COMPLETED, None)] * 4
        assert {r.host_id for r in done} == {second.orchestrator.host_id}
        starts = [r.started_at or 0 for r in done[:3]]
        ends = [r.ended_at or 0 for r in done[:3]]
        assert starts == sorted(starts)
        assert all(ends[i] <= starts[i + 1] for i in range(2))
        # Was running: its results may be partial, so it is failed, and a retry with the same event_id
        # is a new attempt linked to it rather than the failed run again.
        failed = await second.stores.runs.get(cut_off.run_id)
        assert failed.status is RunStatus.FAILED
        assert error_code(failed) == "host.restarted"
        event = AgentEventEnvelope.model_validate((await second.stores.events.get(cut_off.event_id)).payload)
        retry = await second.orchestrator.submit(event.model_copy(update={"input": message("ok").input}))
        assert retry.created
        assert (retry.run.attempt, retry.run.previous_run_id) == (2, cut_off.run_id)
        with anyio.fail_after(60):
            assert (await second.orchestrator.wait(retry.run.run_id)).status is RunStatus.COMPLETED
        again = await second.orchestrator.submit(event)
        assert (again.created, again.run.run_id) == (False, retry.run.run_id)
        chain = await second.stores.runs.attempts(cut_off.event_id)
        assert [(r.run_id, r.attempt) for r in chain] == [(cut_off.run_id, 1), (retry.run.run_id, 2)]


async def test_mcphost_cancel_with_a_reason_ends_the_run_on_its_host_with_it(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(orchestrator_module, "CANCEL_GRACE_S", 0.2)
    settings = host_settings(database_url, tmp_path / "data")
    config = tmp_path / "mcphost.toml"
    config.write_text(
        f'[host]\ndatabase_url = "{database_url}"\ndata_dir = "{tmp_path / "data"}"\nbundled_plugins = false\n',
        encoding="utf-8",
    )
    async with open_host(settings) as host:
        # `wide` has the default 300 s deadline: a loaded machine may take long to start the CLI.
        run_id = (await host.orchestrator.submit(message("hang", bot="wide"))).run.run_id
        await wait_running(host, run_id)
        code, _, err = await mcphost(
            "cancel", run_id, "--reason", "wrong customer", "--config", str(config), cwd=tmp_path
        )
        assert code == 0, err
        with anyio.fail_after(15):
            run = await host.orchestrator.wait(run_id)
        assert run.error is not None
        assert (run.status, run.error.message) == (RunStatus.CANCELLED, "Run cancelled: wrong customer.")
        code, _, err = await mcphost(
            "cancel", run_id, "--reason", "x" * 501, "--config", str(config), cwd=tmp_path
        )
        assert (code, "--reason takes at most 500 printable characters." in err) == (EXIT_USAGE, True)


async def test_closing_callbacks_run_before_the_end_is_recorded(host: Host) -> None:
    seen: list[tuple[str, RunStatus, bool]] = []

    async def closing(run_id: str) -> None:
        run = await host.stores.runs.get(run_id)
        seen.append((run_id, run.status, host.orchestrator.executing(run_id)))

    host.orchestrator.on_run_closing.append(closing)
    run = await run_event(host, message("hello", bot="echo"))
    assert run.status is RunStatus.COMPLETED
    # Still running in the store, and no longer executing here (the model proxy's grants stop at once).
    assert seen == [(run.run_id, RunStatus.RUNNING, False)]
