"""Executing one started run: its runner called through the `RunnerExecution` seam, the deadline, the
cancel watch and the pump that feeds the runner's results to the run's journal.

Owns the span from the runner call to the end of its stream. It does not decide how the run ends: it
returns what happened (`Happened`), and the close decides (`_end.decide_end`). It does not know what
executes the runner: anything with `run` and `cancel` as `RunnerExecution` states (a plugin process,
`mcphost.plugins.PluginProcess`, is one) can be registered for a runner id.

Invariants:
- The deadline bounds the runner call and the pump; past it the runner is told `runner/cancel`
  ("deadline exceeded") unless the run had already settled, parked or been cancelled.
- A cancel or a park sends `runner/cancel` and gives the runner `CANCEL_GRACE_S` to stop by itself before
  the call is cut off; from a park on, what the runner still sends is dropped.
- After the runner's terminal result, or when the host ended the run (a violation), the plugin's answer
  is awaited at most `TERMINAL_DRAIN_S`; what still arrives is recorded as ignored by the journal.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from mcphost import tracing
from mcphost.errors import PluginError
from mcphost.journal import RunJournal, RunOutcome
from mcphost.models import AgentBinding, AgentEventEnvelope, RunGrant
from mcphost.orchestrator import _tuning as tuning
from mcphost.orchestrator._active import ActiveRun
from mcphost.orchestrator._end import Happened
from mcphost.plugins.process import RawResult
from mcphost.plugins.registry import RegisteredRunner, RunnerPlugin
from mcphost.projection import ProjectionError
from mcphost.protocol import AgentRunContext, JSONObject, RunProjection
from mcphost.stores import RecordingHeader, Stores


class RunnerExecution(Protocol):
    """What the orchestrator needs of whatever executes a runner (the execution seam)."""

    async def run(
        self,
        runner_name: str,
        ctx: AgentRunContext,
        results: MemoryObjectSendStream[RawResult],
        *,
        projection: RunProjection | None = None,
    ) -> str:
        """Run `runner_name` on `ctx`, sending each raw result to `results` and closing it on return;
        the executor's own status (`completed`/`failed`). `PluginError` when the executor crashed or
        broke the protocol."""
        ...

    async def cancel(self, run_id: str, reason: str) -> bool:
        """Ask the run to stop; False when this executor is not running it (nothing to wait for)."""
        ...


class ExecutingPlugin(RunnerPlugin, RunnerExecution, Protocol):
    """A plugin the registry lists and the orchestrator executes runners on."""


ExecutingRunner = RegisteredRunner[ExecutingPlugin]
Ask = Callable[[str, JSONObject], Awaitable[None]]
"""How the pump turns an `interaction.requested` into a parked approval and parks the run."""


async def execute(
    active: ActiveRun,
    ctx: AgentRunContext,
    journal: RunJournal,
    *,
    executor: RunnerExecution | None = None,
    project: Callable[[], RunProjection | None] | None = None,
    deadline_at: float,
    timeout_s: float,
    ask: Ask,
) -> Happened:
    """Call the run's runner on `ctx` (on `executor`, else on its plugin) and feed its results to
    `journal` until it ends; what happened."""
    run_id = active.run_id
    runner_name = active.runner.manifest.id.rsplit("/", 1)[1]
    executor = executor or active.runner.plugin
    send, receive = anyio.create_memory_object_stream[RawResult](math.inf)
    stream_status: str | None = None
    crash: PluginError | ProjectionError | None = None

    async def call_runner() -> None:
        nonlocal stream_status, crash
        async with send:
            try:
                # Reads secret files and skill folders: off the event loop.
                projection = await anyio.to_thread.run_sync(project) if project is not None else None
                active.runner_called = True
                stream_status = await executor.run(runner_name, ctx, send, projection=projection)
            except (PluginError, ProjectionError) as exc:
                crash = exc

    async def stop_runner(scope: anyio.CancelScope) -> None:
        reason = "parked" if active.parked_on is not None else active.cancel_reason or "cancelled"
        if await executor.cancel(run_id, reason):
            await anyio.sleep(tuning.CANCEL_GRACE_S)
        # Else the executor is not running it (e.g. the run waits for a restart): nothing to let finish.
        scope.cancel()

    remaining = deadline_at - time.time()
    with receive, anyio.move_on_after(max(remaining, 0)) as deadline_scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(call_runner)

            # Stopped on request (`ActiveRun.request_cancel`), by a task started only then.
            def stop() -> None:
                tg.start_soon(stop_runner, tg.cancel_scope)

            active.on_cancel = stop
            try:
                if active.cancel_requested:  # asked for before the runner started
                    stop()
                outcome = await _pump(receive, journal, active, ask)
                if outcome is not None and not outcome.by_runner:
                    # The host ended the run (a violation): stop the runner now.
                    await executor.cancel(
                        run_id, outcome.error.message if outcome.error else "ended by the host"
                    )
                    tg.cancel_scope.cancel()
                else:
                    # Stream ended, or the runner's terminal result: let the executor answer, bounded.
                    with anyio.move_on_after(tuning.TERMINAL_DRAIN_S) as drain:
                        await _pump_rest(receive, journal)
                    # Its stream closed: the runner's call has returned. Unless a stop was started, no
                    # task is left to cancel, and a cancel would only cancel this one (anyio delivers it
                    # again on every loop turn until the group is left).
                    if drain.cancelled_caught or active.cancel_requested:
                        tg.cancel_scope.cancel()
            finally:
                active.on_cancel = None

    deadline_passed = deadline_scope.cancelled_caught
    if deadline_passed and not journal.ended and active.parked_on is None and active.cancel_reason is None:
        await executor.cancel(run_id, "deadline exceeded")
    return Happened(
        settled=journal.outcome,
        executed=True,
        parked_on=active.parked_on,
        cancel_reason=active.cancel_reason,
        deadline_passed=deadline_passed,
        timeout_s=timeout_s,
        crash=crash.message if crash is not None else None,
        stream_status=stream_status,
        saw_message=journal.saw_message,
    )


async def _pump(
    receive: MemoryObjectReceiveStream[RawResult], journal: RunJournal, active: ActiveRun, ask: Ask
) -> RunOutcome | None:
    """Feed results to the journal in batches until the run ends or the stream closes; once the run is
    `parked`, what its stopping runner still sends is dropped (it cannot change the end). An
    `interaction.requested` (the harness asks the user) becomes a parked `interaction` approval and
    parks the run (`ask`)."""
    async for first in receive:
        if active.parked_on is not None:
            continue
        batch = [first]
        while len(batch) < tuning.MAX_BATCH:
            try:
                batch.append(receive.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
        outcome = await journal.accept(batch)
        if outcome is not None:
            return outcome
        while journal.questions:
            await ask(active.run_id, journal.questions.pop(0))
    return None


async def _pump_rest(receive: MemoryObjectReceiveStream[RawResult], journal: RunJournal) -> None:
    """After the end: whatever else arrives is recorded as ignored by the journal."""
    async for first in receive:
        await journal.accept([first])


def stored_trace(grant: RunGrant) -> dict[str, str] | None:
    """The ingest span's context as the run's admission stored it, else None (the current span)."""
    return tracing.carrier_of(grant.traceparent, grant.tracestate)


def conversation_attribute(conversation_id: str | None) -> dict[str, str]:
    """The run span's conversation attribute, when the run has a conversation."""
    return {} if conversation_id is None else {tracing.CONVERSATION_ID: conversation_id}


async def begin_recording(
    stores: Stores,
    active: ActiveRun,
    recorded: AgentRunContext,
    event: AgentEventEnvelope,
    binding: AgentBinding,
) -> None:
    """Write a recorded run's header (envelope, token-free context, agent entry) before its runner runs."""
    await stores.recordings.begin(
        RecordingHeader(
            run_id=active.run_id,
            agent_id=binding.agent.id,
            runner_id=active.runner.manifest.id,
            envelope=event.model_dump(mode="json"),
            context=recorded.model_dump(mode="json"),
            agent=binding.agent.model_dump(mode="json"),
        )
    )
