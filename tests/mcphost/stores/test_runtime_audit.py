"""A remote run's runtime audit (`stores/runtime_audit.py`, written by `stores/dispatch.py`): the claim's
runtime, fence and timings, lease renewals counted, every claim's story told by its events, kept once
the queue row is dropped and deleted with the run's conversation; on SQLite and PostgreSQL."""

from __future__ import annotations

import threading

import pytest

from mcphost.errors import ConflictError
from mcphost.models import RunStatus
from mcphost.stores import RuntimeRecord, Stores, engine
from mcphost.stores.dispatch import PostedResult, QueuedRun
from tests.mcphost.stores.factories import admitted

RUNNER = "plugin:mcphost/echo/default"


async def _runtime(stores: Stores, name: str) -> RuntimeRecord:
    record, _ = await stores.runtimes.add(name, {"pool": "a"})
    return await stores.runtimes.register(
        record.runtime_id, capabilities={"runners": [RUNNER]}, slots=2, labels={}
    )


def _queued(run_id: str, deadline_at: float) -> QueuedRun:
    return QueuedRun(
        run_id=run_id,
        host_id="host-1",
        runner_id=RUNNER,
        selector={"pool": "a"},
        on_lost="requeue",
        context={},
        token_hash="0" * 64,
        deadline_at=deadline_at,
    )


def _result(seq: int) -> PostedResult:
    return PostedResult(seq=seq, nbytes=10, dropped=False, result={"type": "message.delta", "sequence": seq})


async def test_a_claims_story_is_kept_through_a_requeue_and_after_the_run_ends(stores: Stores) -> None:
    run = await admitted(stores)
    dispatch = stores.dispatch
    assert await dispatch.audit(run.run_id) is None, "a run never queued for a runtime ran locally"
    first, second = await _runtime(stores, "r1"), await _runtime(stores, "r2")
    await dispatch.enqueue(_queued(run.run_id, run.deadline_at))
    queued = await dispatch.audit(run.run_id)
    assert queued is not None
    assert (queued.state, queued.runtime_id, queued.fence, queued.claimed_at) == ("queued", None, 0, None)

    claim = await dispatch.claim(first, lease_s=30)
    assert claim is not None
    for _ in range(3):
        await dispatch.heartbeat(first, [(run.run_id, claim.fence)], lease_s=30)
    await dispatch.post_results(first.runtime_id, run.run_id, claim.fence, 1, [_result(1)])
    await dispatch.post_output(
        first.runtime_id, run.run_id, claim.fence, artifact_id="art_1", size=5, cut_bytes=0
    )
    held = await dispatch.audit(run.run_id)
    assert held is not None
    assert (held.state, held.runtime_id, held.runtime_name, held.renewals) == (
        "claimed",
        first.runtime_id,
        "r1",
        3,
    )
    assert held.claimed_at is not None
    assert held.first_result_at is not None
    assert held.claimed_at <= held.first_result_at
    assert held.lease_until is not None
    assert held.last_renewal_at is not None
    assert held.output_artifact_id == "art_1"
    listed = await dispatch.held_runs()
    assert [(c.run_id, c.fence, c.attempt) for c in listed[first.runtime_id]] == [
        (run.run_id, claim.fence, 1)
    ]

    assert not await dispatch.lose(run.run_id, claim.fence + 5, "stale"), "a loss is fenced"
    assert await dispatch.requeue(run.run_id, claim.fence, "runtime r1 missed its heartbeats")
    again = await dispatch.claim(second, lease_s=30)
    assert again is not None
    with pytest.raises(ConflictError) as refused:
        await dispatch.post_output(
            first.runtime_id, run.run_id, claim.fence, artifact_id="art_late", size=1, cut_bytes=0
        )
    assert refused.value.details["reason"] == "not_held"
    await dispatch.post_end(second.runtime_id, run.run_id, again.fence, "completed", 0)
    await dispatch.drop(run.run_id)

    kept = await dispatch.audit(run.run_id)
    assert kept is not None
    assert (kept.state, kept.runtime_name, kept.fence, kept.attempts, kept.renewals) == (
        "ended",
        "r2",
        again.fence,
        2,
        0,
    )
    assert kept.end_status == "completed"
    assert kept.output_artifact_id is None, "the output belongs to the first claim, not the last"
    events = kept.events
    assert [e["event"] for e in events] == ["queued", "claimed", "output", "requeued", "claimed", "ended"]
    requeued = events[3]
    assert (requeued["runtime"], requeued["fence"], requeued["renewals"]) == ("r1", claim.fence, 3)
    assert requeued["first_result_at"] is not None
    assert (events[1]["runtime_id"], events[4]["runtime_id"]) == (first.runtime_id, second.runtime_id)
    assert await dispatch.events(run.run_id) == events

    await stores.runs.finish(run.run_id, RunStatus.CANCELLED)
    await stores.conversations.delete(run.conversation_id or "")
    assert await dispatch.audit(run.run_id) is None, "deleted with its run"


async def test_dropping_the_row_of_a_run_the_host_does_not_know_keeps_nothing(stores: Stores) -> None:
    await stores.dispatch.enqueue(_queued("run_gone", 2e9))
    await stores.dispatch.drop("run_gone")
    assert await stores.dispatch.audit("run_gone") is None


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_a_posted_batch_of_megabytes_is_written_off_the_event_loop(stores: Stores) -> None:
    # A runtime may post up to 8 MiB at once: on a SQLite file a batch past `LONG_WRITE_BYTES` is written
    # on the writer thread, a small one on the event loop.
    run = await admitted(stores)
    runtime = await _runtime(stores, "r1")
    await stores.dispatch.enqueue(_queued(run.run_id, run.deadline_at))
    claim = await stores.dispatch.claim(runtime, lease_s=30)
    assert claim is not None
    began: list[int] = []
    text = "x" * (engine.LONG_WRITE_BYTES + 1)
    big = PostedResult(
        seq=2, nbytes=len(text), dropped=False, result={"type": "message.delta", "delta": text}
    )

    def begin(_conn: object) -> None:
        began.append(threading.get_ident())

    with stores.db.hooks.added("begin", begin):
        await stores.dispatch.post_results(runtime.runtime_id, run.run_id, claim.fence, 1, [_result(1)])
        await stores.dispatch.post_results(runtime.runtime_id, run.run_id, claim.fence, 2, [big])
    assert [thread == threading.get_ident() for thread in began] == [True, False]
