"""The orchestrator's state machine with an in-process fake runner (no subprocess), on real stores.

`FakeExecutor` satisfies `RunnerExecution` (and what the registry lists of a plugin): what it does is
chosen by the event's text. Each test drives one path of a run — completed, cancelled while executing,
past its deadline, parked, a crashing executor, a host failure, storage failing at the close — and
checks the run's phase in this process, its recorded end, and that the registry lets it go.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.memory import MemoryObjectSendStream

from mcphost.bindings import Bindings
from mcphost.errors import PluginError, StorageUnavailableError
from mcphost.models import Run, RunStatus
from mcphost.orchestrator import (
    HOST_FAILED,
    ActiveRun,
    ActiveRuns,
    IllegalTransition,
    Orchestrator,
    RunPhase,
)
from mcphost.orchestrator import _tuning as tuning
from mcphost.plugins.process import RawResult
from mcphost.plugins.registry import RegisteredRunner, RejectedManifestView, RunnerRegistry
from mcphost.protocol import AgentRunContext, AgentRunnerManifest, JSONObject, RunProjection
from mcphost.stores import Stores
from tests.mcphost.hostkit import agent, message

RUNNER = "plugin:test/fake/default"


class FakeExecutor:
    """A runner executed in this process. The event's text says what it does:
    `ok` (a message, then `run.completed`), `linger` (the same, then its call never returns), `hang`
    (waits until cancelled, then stops), `deaf` (waits and ignores cancels), `crash` (the executor fails:
    `PluginError`), `bug` (any other exception)."""

    name = "fake"
    command = ("fake",)
    state = "running"
    pid = None
    restarts = 0
    last_error = None
    rejected: Sequence[RejectedManifestView] = ()

    def __init__(self) -> None:
        self.manifests = [AgentRunnerManifest(id=RUNNER, name="fake")]
        self.cancels: list[tuple[str, str]] = []
        self.abandoned: list[str] = []
        """Runs whose call was cancelled by the host (not through `cancel`)."""
        self.started: dict[str, anyio.Event] = {}
        self._stop: dict[str, anyio.Event] = {}

    def started_event(self, run_id: str) -> anyio.Event:
        return self.started.setdefault(run_id, anyio.Event())

    async def run(
        self,
        runner_name: str,
        ctx: AgentRunContext,
        results: MemoryObjectSendStream[RawResult],
        *,
        projection: RunProjection | None = None,
    ) -> str:
        assert runner_name == "default"
        run_id = ctx.run_id
        text = ctx.input.text
        self.started_event(run_id).set()
        async with results:
            if text == "ok":
                await results.send(
                    _raw(run_id, "message.completed", {"message": {"role": "assistant", "content": "hi"}})
                )
                await results.send(
                    _raw(run_id, "run.completed", {"finish_reason": "stop", "usage": {"input_tokens": 2}})
                )
                return "completed"
            if text in ("huge", "nan", "nul"):  # a terminal result whose usage a store cannot keep
                usage = {
                    "huge": {"input_tokens": 2**70},
                    "nan": {"cost": float("nan")},
                    "nul": {"note": "a\x00b"},
                }
                await results.send(_raw(run_id, "message.completed", {"message": {"content": "hi"}}))
                await results.send(
                    _raw(run_id, "run.completed", {"finish_reason": "stop", "usage": usage[text]})
                )
                return "completed"
            if text == "linger":  # completes, then never answers its call
                await results.send(_raw(run_id, "message.completed", {"message": {"content": "hi"}}))
                await results.send(_raw(run_id, "run.completed", {"finish_reason": "stop", "usage": {}}))
                try:
                    await anyio.sleep_forever()
                finally:
                    self.abandoned.append(run_id)
            if text == "crash":
                raise PluginError("the plugin process exited with code 1")
            if text == "bug":
                raise RuntimeError("a bug in the executor, with private detail")
            if text in ("hang", "deaf", "stubborn"):
                stop = self._stop.setdefault(run_id, anyio.Event())
                if text == "deaf":
                    await anyio.sleep_forever()
                await stop.wait()
                if text == "stubborn":  # asked to stop, it completes all the same
                    await results.send(_raw(run_id, "message.completed", {"message": {"content": "done"}}))
                    await results.send(_raw(run_id, "run.completed", {"finish_reason": "stop", "usage": {}}))
                    return "completed"
                return "failed"
            raise AssertionError(f"unknown script {text!r}")

    async def cancel(self, run_id: str, reason: str) -> bool:
        self.cancels.append((run_id, reason))
        self._stop.setdefault(run_id, anyio.Event()).set()
        return True


def _raw(run_id: str, rtype: str, data: JSONObject) -> RawResult:
    return RawResult(obj={"type": rtype, "run_id": run_id, "data": data}, nbytes=100)


@pytest.fixture
async def fake() -> FakeExecutor:
    return FakeExecutor()


def _orchestrator(stores: Stores, fake: FakeExecutor, *, max_concurrent_runs: int = 64) -> Orchestrator:
    return Orchestrator(
        stores=stores,
        registry=RunnerRegistry([fake]),
        bindings=Bindings([agent("fake", RUNNER, timeout_s=30), agent("quick", RUNNER, timeout_s=0.5)]),
        public_url="http://127.0.0.1:1",
        max_concurrent_runs=max_concurrent_runs,
    )


@pytest.fixture
async def orchestrator(
    stores: Stores, fake: FakeExecutor, tmp_path: Path
) -> AsyncGenerator[Orchestrator, None]:
    del tmp_path
    orchestrator = _orchestrator(stores, fake)
    with anyio.fail_after(60):
        async with orchestrator.running():
            yield orchestrator


async def ended_here(orchestrator: Orchestrator, run_id: str) -> None:
    """Until the run's close in this process is over (its `on_run_end` callbacks ran)."""
    done = anyio.Event()

    async def seen(ended_id: str, _run: Run | None) -> None:
        if ended_id == run_id:
            done.set()

    orchestrator.on_run_end.append(seen)
    if orchestrator.phase(run_id) in (
        None,
        RunPhase.ADMITTING,
        RunPhase.QUEUED,
        RunPhase.EXECUTING,
        RunPhase.CLOSING,
    ):
        await done.wait()


async def _running(orchestrator: Orchestrator, fake: FakeExecutor, text: str, **kw: str) -> str:
    admission = await orchestrator.submit(
        message(text, bot=kw.get("bot", "fake"), conversation=kw.get("conversation", "c1"))
    )
    run_id = admission.run.run_id
    await fake.started_event(run_id).wait()
    assert orchestrator.phase(run_id) is RunPhase.EXECUTING
    assert run_id in orchestrator.active_run_ids()
    return run_id


async def _ended(orchestrator: Orchestrator, run_id: str) -> Run:
    run = await orchestrator.wait(run_id)
    assert orchestrator.phase(run_id) is RunPhase.ENDED
    assert run_id not in orchestrator.active_run_ids()
    assert await orchestrator.context(run_id) is None  # the token's copy is let go at the close
    return run


async def test_a_run_completes_with_what_its_runner_said(
    orchestrator: Orchestrator, fake: FakeExecutor
) -> None:
    admission = await orchestrator.submit(message("ok", bot="fake"))
    run = await _ended(orchestrator, admission.run.run_id)
    assert run.status is RunStatus.COMPLETED
    assert run.error is None
    types = [r.type async for r in orchestrator.results(run.run_id)]
    assert types == ["message.completed", "run.completed"]
    assert fake.cancels == []


async def test_a_run_started_at_admission_has_called_its_runner_when_submit_returns(
    orchestrator: Orchestrator, fake: FakeExecutor
) -> None:
    """The runner works while the caller answers its client: an admission that started the only run
    executing yields until the run's runner call has begun (`Orchestrator._admit`)."""
    admission = await orchestrator.submit(message("hang", bot="fake", conversation="c-first"))
    run_id = admission.run.run_id
    assert admission.run.status is RunStatus.RUNNING
    assert fake.started_event(run_id).is_set()
    await orchestrator.cancel(run_id, reason="done looking")
    assert (await _ended(orchestrator, run_id)).status is RunStatus.CANCELLED


async def test_cancel_while_executing_tells_the_runner_and_ends_cancelled(
    orchestrator: Orchestrator, fake: FakeExecutor
) -> None:
    run_id = await _running(orchestrator, fake, "hang")
    await orchestrator.cancel(run_id, reason="the user changed their mind")
    run = await _ended(orchestrator, run_id)
    assert run.status is RunStatus.CANCELLED
    assert run.error is not None
    assert run.error.message == "Run cancelled: the user changed their mind."
    assert run.error.details["reason"] == "the user changed their mind"
    assert fake.cancels == [(run_id, "the user changed their mind")]


async def test_a_run_past_its_deadline_fails_and_its_runner_is_told(
    orchestrator: Orchestrator, fake: FakeExecutor
) -> None:
    run_id = await _running(orchestrator, fake, "deaf", bot="quick")
    run = await _ended(orchestrator, run_id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert (run.error.code, run.error.message) == (
        "deadline_exceeded",
        "The run did not finish within its 0.5 s deadline.",
    )
    assert fake.cancels == [(run_id, "deadline exceeded")]


async def test_a_parked_run_ends_parked_on_its_approval(
    orchestrator: Orchestrator, fake: FakeExecutor
) -> None:
    run_id = await _running(orchestrator, fake, "hang")
    await orchestrator.park(run_id, "apr_test")
    run = await _ended(orchestrator, run_id)
    assert run.status is RunStatus.PARKED
    assert run.error is not None
    assert (run.error.code, run.error.details) == ("parked", {"approval_id": "apr_test"})
    assert fake.cancels == [(run_id, "parked")]


async def test_a_runner_that_completes_and_never_answers_is_let_go_after_the_drain(
    orchestrator: Orchestrator, fake: FakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After its terminal result the runner's call gets `TERMINAL_DRAIN_S` to return; then it is
    cancelled and the run ends as its runner said."""
    monkeypatch.setattr(tuning, "TERMINAL_DRAIN_S", 0.2)
    admission = await orchestrator.submit(message("linger", bot="fake"))
    with anyio.fail_after(10):  # well before its deadline (30 s), which would end it too
        run = await _ended(orchestrator, admission.run.run_id)
    assert run.status is RunStatus.COMPLETED
    assert fake.abandoned == [run.run_id]
    assert fake.cancels == []  # cut off by the host, not asked to cancel


async def test_an_executor_that_crashes_fails_the_run_runner_crashed(
    orchestrator: Orchestrator, fake: FakeExecutor
) -> None:
    admission = await orchestrator.submit(message("crash", bot="fake"))
    run = await _ended(orchestrator, admission.run.run_id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert (run.error.code, run.error.message) == ("runner.crashed", "the plugin process exited with code 1")


async def test_any_other_exception_fails_the_run_without_its_detail(
    orchestrator: Orchestrator, caplog: pytest.LogCaptureFixture
) -> None:
    admission = await orchestrator.submit(message("bug", bot="fake"))
    run = await _ended(orchestrator, admission.run.run_id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert (run.error.code, run.error.message) == ("runtime_error", HOST_FAILED)
    assert "private detail" not in run.model_dump_json()
    assert "private detail" in caplog.text  # logged with the run id, for the operator


async def test_storage_failing_at_the_close_leaves_the_end_to_the_sweeper(
    orchestrator: Orchestrator, stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tuning, "TERMINAL_RETRY_S", 0.3)
    finish = stores.runs.finish

    async def unavailable(*_args: object, **_kw: object) -> Run:
        raise StorageUnavailableError("The database is unavailable.")

    monkeypatch.setattr(stores.runs, "finish", unavailable)
    # A crash: the close decides the end (a runner's own `run.completed` would carry it in its batch).
    admission = await orchestrator.submit(message("crash", bot="fake"))
    run_id = admission.run.run_id
    with anyio.fail_after(20):
        await ended_here(orchestrator, run_id)
    assert orchestrator.phase(run_id) is RunPhase.UNFINISHED
    assert (await stores.runs.get(run_id)).status is RunStatus.RUNNING
    assert run_id not in orchestrator.active_run_ids()
    assert await orchestrator.sweep() == []  # storage still failing: nothing ended, nothing forgotten
    assert orchestrator.phase(run_id) is RunPhase.UNFINISHED

    monkeypatch.setattr(stores.runs, "finish", finish)
    assert await orchestrator.sweep() == [run_id]
    run = await stores.runs.get(run_id)
    assert run.error is not None
    assert (run.status, run.error.code) == (
        RunStatus.FAILED,
        "runner.crashed",
    )  # the close's, not host.run_lost
    assert orchestrator.phase(run_id) is None  # the registry let it go
    assert (await orchestrator.wait(run_id)).status is RunStatus.FAILED


async def test_a_runner_that_completes_ends_its_run_with_its_last_batch(
    orchestrator: Orchestrator, stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner's own `run.completed` settles the end: written with its batch, never by `finish`,
    after the close's callbacks, which run once."""
    events: list[str] = []
    append_ending = stores.results.append_ending

    async def unavailable(*_args: object, **_kw: object) -> Run:
        raise StorageUnavailableError("The database is unavailable.")

    async def ending(*args: Any, **kwargs: Any) -> Any:
        events.append("ending")
        return await append_ending(*args, **kwargs)

    async def closing(run_id: str) -> None:
        events.append(f"closing {(await stores.runs.get(run_id)).status}")

    monkeypatch.setattr(stores.runs, "finish", unavailable)
    monkeypatch.setattr(stores.results, "append_ending", ending)
    orchestrator.on_run_closing.append(closing)
    run_id = (await orchestrator.submit(message("ok", bot="fake"))).run.run_id
    with anyio.fail_after(20):
        await ended_here(orchestrator, run_id)
    assert orchestrator.phase(run_id) is RunPhase.ENDED
    assert events == ["closing running", "ending"]
    run = await stores.runs.get(run_id)
    assert run == await orchestrator.wait(run_id)
    assert (run.status, run.usage) == (RunStatus.COMPLETED, {"input_tokens": 2, "extra": {}})
    assert (await stores.runs.grant(run_id)).revoked
    assert [r.type for r in await stores.results.list(run_id)] == ["message.completed", "run.completed"]


async def test_a_run_the_host_asked_to_stop_is_ended_by_its_close(
    orchestrator: Orchestrator, stores: Stores, fake: FakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run the host asked to stop is not ended with its runner's last batch, even one that says
    `run.completed`: its close writes the end (`finish`), the runner's outcome first as always."""
    finish = stores.runs.finish
    finished: list[str] = []

    async def counted(run_id: str, *args: Any, **kwargs: Any) -> Run:
        finished.append(run_id)
        return await finish(run_id, *args, **kwargs)

    monkeypatch.setattr(stores.runs, "finish", counted)
    run_id = (await orchestrator.submit(message("stubborn", bot="fake"))).run.run_id
    await fake.started_event(run_id).wait()
    await orchestrator.cancel(run_id, reason="not needed")
    with anyio.fail_after(20):
        await ended_here(orchestrator, run_id)
    assert finished == [run_id]
    assert (await stores.runs.get(run_id)).status is RunStatus.COMPLETED


async def test_the_sweeper_does_not_claim_a_run_that_ended_while_it_looked(
    orchestrator: Orchestrator,
    stores: Stores,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    admission = await orchestrator.submit(message("ok", bot="fake"))
    run_id = admission.run.run_id
    assert (await _ended(orchestrator, run_id)).status is RunStatus.COMPLETED

    async def stale(_host_id: str) -> list[str]:  # read before the run's close wrote its end
        return [run_id]

    finished: list[str] = []

    async def finish(run_id: str, *_args: object, **_kw: object) -> Run:
        finished.append(run_id)
        raise AssertionError("the sweeper wrote to a run whose close had written its end")

    monkeypatch.setattr(stores.runs, "active_on", stale)
    monkeypatch.setattr(stores.runs, "finish", finish)
    assert await orchestrator.sweep() == []
    assert finished == []  # its close wrote its end (ENDED here): not even a write that changes nothing
    assert "had no executor" not in caplog.text
    assert (await stores.runs.get(run_id)).status is RunStatus.COMPLETED


async def test_a_queued_run_waits_for_its_conversation_then_executes(
    orchestrator: Orchestrator, fake: FakeExecutor
) -> None:
    first = await _running(orchestrator, fake, "hang", conversation="shared")
    second = (await orchestrator.submit(message("ok", bot="fake", conversation="shared"))).run.run_id
    assert orchestrator.phase(second) is RunPhase.QUEUED
    assert set(orchestrator.active_run_ids()) == {first, second}
    await orchestrator.cancel(first)
    assert (await _ended(orchestrator, second)).status is RunStatus.COMPLETED
    assert (await _ended(orchestrator, first)).status is RunStatus.CANCELLED


async def test_the_registry_keeps_only_the_latest_ends(
    orchestrator: Orchestrator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tuning, "RECENT_ENDS", 2)
    ids: list[str] = []
    for i in range(3):  # one after the other: runs executing side by side may end in any order
        ids.append((await orchestrator.submit(message("ok", bot="fake", conversation=f"r{i}"))).run.run_id)
        await orchestrator.wait(ids[-1])
    assert [orchestrator.phase(run_id) for run_id in ids] == [None, RunPhase.ENDED, RunPhase.ENDED]
    assert orchestrator.active_run_ids() == []
    assert (await orchestrator.wait(ids[0])).status is RunStatus.COMPLETED  # from the store now


async def test_a_run_holds_its_slot_until_its_end_is_written(stores: Stores, fake: FakeExecutor) -> None:
    orchestrator = _orchestrator(stores, fake, max_concurrent_runs=1)
    during_close: list[tuple[str, RunStatus, int]] = []

    async def admit_another(_closing_id: str) -> None:
        if during_close:
            return
        admitted = (await orchestrator.submit(message("ok", bot="fake", conversation="other"))).run
        running = await stores.runs.list(status=RunStatus.RUNNING, limit=10)
        during_close.append((admitted.run_id, admitted.status, len(running.items)))

    orchestrator.on_run_closing.append(admit_another)
    with anyio.fail_after(60):
        async with orchestrator.running():
            first = (await orchestrator.submit(message("ok", bot="fake", conversation="one"))).run.run_id
            assert (await orchestrator.wait(first)).status is RunStatus.COMPLETED
            [(second, status, running)] = during_close
            # Admitted while the first closed, its end not written yet: the one slot was still taken.
            assert (status, running) == (RunStatus.QUEUED, 1)
            assert (await orchestrator.wait(second)).status is RunStatus.COMPLETED


def _active(run_id: str = "run_x") -> ActiveRun:
    return ActiveRun(
        run_id=run_id,
        conversation_id=None,
        runner=RegisteredRunner(FakeExecutor().manifests[0], FakeExecutor()),
    )


@pytest.mark.parametrize(
    ("path", "illegal"),
    [
        ([], RunPhase.CLOSING),
        ([], RunPhase.ENDED),
        ([RunPhase.QUEUED], RunPhase.ADMITTING),
        ([RunPhase.EXECUTING], RunPhase.QUEUED),
        ([RunPhase.EXECUTING, RunPhase.CLOSING], RunPhase.EXECUTING),
        ([RunPhase.EXECUTING, RunPhase.CLOSING, RunPhase.ENDED], RunPhase.CLOSING),
        ([RunPhase.QUEUED, RunPhase.CLOSING, RunPhase.UNFINISHED], RunPhase.ENDED),
    ],
)
async def test_an_illegal_phase_move_raises_and_changes_nothing(
    path: list[RunPhase], illegal: RunPhase
) -> None:
    run = _active()
    for phase in path:
        run.move(phase)
    before = run.phase
    with pytest.raises(IllegalTransition):
        run.move(illegal)
    assert run.phase is before


@pytest.mark.parametrize("held", [RunPhase.QUEUED, RunPhase.EXECUTING, RunPhase.CLOSING])
async def test_a_held_run_cannot_be_forgotten(held: RunPhase) -> None:
    runs = ActiveRuns()
    run = _active()
    runs.admit(run)
    for phase in {RunPhase.QUEUED: [RunPhase.QUEUED], RunPhase.EXECUTING: [RunPhase.EXECUTING]}.get(
        held, [RunPhase.EXECUTING, RunPhase.CLOSING]
    ):
        runs.move(run, phase)
    with pytest.raises(IllegalTransition):
        runs.forget(run)
    assert runs.held(run.run_id) is run
    with pytest.raises(IllegalTransition):
        runs.admit(_active())  # one entry per run id


async def test_a_cancel_calls_the_executions_stop_once_or_waits_for_it_to_start() -> None:
    """`request_cancel` stops an executing run through its `on_cancel` (no task per run waits for it),
    once however often it is asked; asked before the execution began, it is a flag the execution reads
    as it starts (`_execution.execute`)."""
    stops: list[str] = []
    executing = _active()
    executing.on_cancel = lambda: stops.append("stop")
    executing.request_cancel()
    executing.request_cancel()
    assert (executing.cancel_requested, stops) == (True, ["stop"])
    early = _active()
    early.request_cancel()  # nothing executes it yet
    assert early.cancel_requested
    early.on_cancel = lambda: stops.append("late")
    early.request_cancel()
    assert stops == ["stop"]  # the execution that starts now sees the flag and stops itself


async def test_a_second_cancel_or_a_park_after_it_tells_the_runner_once(
    orchestrator: Orchestrator, fake: FakeExecutor
) -> None:
    run_id = await _running(orchestrator, fake, "hang")
    await orchestrator.cancel(run_id, reason="first")
    await orchestrator.cancel(run_id, reason="second")
    await orchestrator.park(run_id, "apr_late")
    run = await _ended(orchestrator, run_id)
    assert run.status is RunStatus.CANCELLED
    assert fake.cancels == [(run_id, "first")]


@pytest.mark.parametrize("script", ["huge", "nan", "nul"])
async def test_a_terminal_result_a_store_cannot_keep_ends_the_run_without_storing_it(
    orchestrator: Orchestrator, stores: Stores, script: str
) -> None:
    """A `run.completed` whose usage holds an integer past 64 bits, NaN or NUL is refused before its
    batch (and the end that would go with it) is written: the run fails, with what it said before."""
    run_id = (await orchestrator.submit(message(script, bot="fake"))).run.run_id
    with anyio.fail_after(20):
        await ended_here(orchestrator, run_id)
    run = await stores.runs.get(run_id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert run.error.code != "runtime_error"  # refused as a result, not a failure inside the host
    types = [r.type for r in await stores.results.list(run_id)]
    assert types[0] == "message.completed"
    assert "run.completed" not in types
    assert types[-1] == "run.failed"
    assert (await stores.runs.grant(run_id)).revoked
