"""The `Orchestrator`: the run state machine of one host process, over the parts of this package.

Owns the lifetime of every run this host process executes (DESIGN §3) and every move of its phase
(`_active.RunPhase`): admission (`submit`), the wait for its turn, execution, the close, cancel, park,
recovery at start-up and the sweepers. One `Orchestrator` is entered with
`async with orchestrator.running():`, which owns the task group of all runs, the cancel poller and host
liveness; nothing of a run outlives it. What each step builds or decides lives next door: admission's
checks and the context (`_admission.py`), the runner call (`_execution.py`), the end decision
(`_end.py`), the terminal write and the sweeper (`_closing.py`), the readers (`feed.RunReader`).

The package's invariants are in its `__init__.py`.

Size: past 600 lines because the transitions of a run's phase — admission, the start at once or after
the queue, cancel, park and the wake-ups that carry them between processes, the close — are one state
machine that must be read together; what each step builds or decides has left for the modules beside it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Literal

import anyio
from anyio.abc import TaskGroup

from mcphost import tracing
from mcphost.bindings import Bindings
from mcphost.common.periodic import Periodic
from mcphost.context import runner_config, with_trace
from mcphost.errors import HostError
from mcphost.feed import ResultFeed, RunReader, RunSignals, Signal
from mcphost.inspection import GRANT_SWEEP_S, end_expired, end_grant
from mcphost.journal import RunJournal, RunOutcome, user_item
from mcphost.models import AgentBinding, AgentEventEnvelope, Run, RunGrant, RunStatus, new_id
from mcphost.orchestrator import _admission as admission
from mcphost.orchestrator import _closing as closing
from mcphost.orchestrator import _tuning as tuning
from mcphost.orchestrator._active import HELD, ActiveRun, ActiveRuns, RunPhase
from mcphost.orchestrator._end import Happened, decide_end
from mcphost.orchestrator._execution import (
    ExecutingPlugin,
    ExecutingRunner,
    begin_recording,
    conversation_attribute,
    execute,
    stored_trace,
)
from mcphost.plugins.registry import RunnerRegistry
from mcphost.projection import Projector
from mcphost.protocol import AgentRunContext, HostModelInfo, JSONObject
from mcphost.runtimes.remote import RemoteRuns
from mcphost.stores import Stores
from mcphost.stores.hosts import HOST_RESTARTED
from mcphost.stores.results import StoredResult
from mcphost.stores.runs import RunStart, StartContext, interrupted_by
from mcphost.stores.wakeups import Listener, Wake
from mcphost.warm import WarmSessions

logger = logging.getLogger("mcphost.orchestrator")

IngestVia = Literal["api", "hook", "channel", "schedule", "cli", "approval"]
"""Where an event came in: `POST /v1/events`, a signed webhook, a chat channel, a schedule's fire, `mcphost run`, the
decision on a parked run's approval (its continuation)."""


@dataclass(frozen=True)
class Admission:
    """The answer to `submit`: the run and whether this call created it."""

    run: Run
    created: bool


class Orchestrator:
    """Runs events through bound agents' runners; the only writer of run lifecycles in this process."""

    def __init__(
        self,
        *,
        stores: Stores,
        registry: RunnerRegistry[ExecutingPlugin],
        bindings: Bindings,
        public_url: str,
        default_timeout_s: float = 300.0,
        max_concurrent_runs: int = 64,
        knowledge_bases: Mapping[str, tuple[str, str]] | None = None,
        skills: Mapping[str, tuple[str, str]] | None = None,
        models: Mapping[str, HostModelInfo] | None = None,
        tool_list: Callable[[RunGrant], Sequence[JSONObject]] | None = None,
        revise_context: Callable[[AgentRunContext], AgentRunContext] | None = None,
        warm: WarmSessions | None = None,
    ) -> None:
        self._stores = stores
        self._registry = registry
        self._bindings = bindings
        self._default_timeout_s = default_timeout_s
        self._limiter = anyio.CapacityLimiter(max_concurrent_runs)
        self._contexts = admission.ContextBuilder(
            public_url=public_url,
            knowledge_bases=knowledge_bases,
            skills=skills,
            models=models,
            tool_list=tool_list,
            revise_context=revise_context,
            warm=warm,
        )
        self.host_id = new_id("host")
        self._tg: TaskGroup | None = None
        self._runs = ActiveRuns()
        """Every run of this process, from its admission until it is forgotten, with its phase."""
        self._conversation_signal = Signal()
        self._cancel_poll = Periodic("the cancel poll", self._poll_cancels, interval_s=tuning.CANCEL_POLL_S)
        """Woken when another process asked to cancel a run active here (`_poll_cancels`)."""
        self._remote = RunSignals()
        """Readers here of runs other processes execute, woken by those processes' wake-ups."""
        self._listener: Listener | None = None
        """This process's `LISTEN` for other processes' wake-ups (PostgreSQL only)."""
        self._reader = RunReader(
            stores,
            local=self._feed_of,
            ended=self._ended_of,
            remote=self._remote,
            poll_s=lambda: self._poll_s(tuning.QUEUE_POLL_S),
            recheck_s=lambda: tuning.LOCAL_RECHECK_S,
            page=lambda: tuning.RESULTS_PAGE,
        )
        self.on_run_end: list[Callable[[str, Run | None], Awaitable[None]]] = []
        self.on_run_closing: list[Callable[[str], Awaitable[None]]] = []
        """Called as the close of each run this process executed begins, before its end is recorded (e.g.
        `ModelProxy.settle`: the run's usage rows are written first)."""
        self.remote: RemoteRuns | None = None
        """Executes the runs of agents with `[agents.runtime]` on runtimes (set by `app.open_host`)."""
        self.projector: Projector | None = None
        """Builds a local run's projection (secrets, workspace, skill files; set by `app.open_host`)."""
        """Called once each run of this process has ended (e.g. `FactsEndpoint.end_run`), with its id and
        the run as recorded at its end (None when that record could not be written or read)."""

    @property
    def public_url(self) -> str:
        return self._contexts.public_url

    @public_url.setter
    def public_url(self, value: str) -> None:
        # `mcphost run` learns its ephemeral MCP port only after the server binds.
        self._contexts.public_url = value

    def active_run_ids(self) -> list[str]:
        """Runs this process is executing or holding in its queue right now."""
        return [active.run_id for active in self._runs.in_phase(*HELD)]

    def executing(self, run_id: str) -> bool:
        """The run executes on this process and its close has not begun (it begins as its end is
        written with the runner's last results, `closing.ending_gate`, while its runner still stops)."""
        active = self._runs.get(run_id)
        return active is not None and active.phase is RunPhase.EXECUTING and not active.closing_called

    def phase(self, run_id: str) -> RunPhase | None:
        """Where the run is in this process, None when this process holds nothing of it."""
        return self._runs.phase(run_id)

    async def context(self, run_id: str) -> AgentRunContext | None:
        """The context an active run of this process was started with (token included), else None."""
        active = self._runs.get(run_id)
        return None if active is None else active.context

    # -- lifetime --------------------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[Orchestrator, None]:
        """Own every run of this process. On exit, active runs are cancelled and closed properly."""
        async with self._stores.hosts.alive(self.host_id):
            recovery = await self._stores.hosts.recover_abandoned(self.host_id)
            for run_id in recovery.failed:
                logger.warning("run %s was running on a stopped host; marked failed", run_id)
            for approval_id in await self._stores.approvals.abandon_ended():
                logger.warning(
                    "approval %s asked for a call of a run that ended; marked expired", approval_id
                )
            try:
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    if self._stores.db.dialect == "postgresql":
                        self._listener = Listener(self._stores.db, self._woken)
                        await tg.start(self._listener.run)
                    tg.start_soon(self._cancel_poll.run)
                    for run_id in recovery.readopted:  # first: running already, they take slots first
                        await self._readopt(run_id)
                    for run_id in recovery.requeued:
                        await self._resume(run_id)
                    # After the resumes: an adopted run is ours and held by a task from here on.
                    sweep = Periodic(
                        "the run sweep", self._sweep_tick, interval_s=tuning.SWEEP_S, wait_first=True
                    )
                    grants = Periodic(
                        "the inspection grant sweep",
                        self._sweep_grants_tick,
                        interval_s=GRANT_SWEEP_S,
                        wait_first=True,
                    )
                    tg.start_soon(sweep.run)
                    tg.start_soon(grants.run)
                    if self.remote is not None:
                        readopt = Periodic(
                            "the remote run adoption",
                            self._readopt_tick,
                            interval_s=tuning.READOPT_S,
                            wait_first=True,
                        )
                        tg.start_soon(readopt.run)
                    try:
                        yield self
                    finally:
                        for active in self._runs.in_phase(*HELD):
                            active.cancel_reason = active.cancel_reason or "the host is shutting down"
                            active.scope.cancel()
                        tg.cancel_scope.cancel()
                        self._tg = None
                        self._listener = None
            finally:
                # A last chance for ends that could not be written; what remains is failed
                # (`host.restarted`) by the next host that starts on this database.
                with anyio.CancelScope(shield=True), anyio.move_on_after(tuning.TERMINAL_RETRY_S):
                    try:
                        await self.sweep()
                    except Exception:
                        logger.exception("the last sweep before shutdown failed")

    def release_remote(self) -> list[str]:
        """The host is stopping: leave the runs executing on runtimes running there, unfinished and
        still this host's, for the next host that starts to adopt (`_readopt`); their ids. Their
        executors stop following them without a cancel, and their queue rows stay."""
        released: list[str] = []
        if self.remote is None:
            return released
        for active in list(self._runs.in_phase(RunPhase.EXECUTING)):
            if self.remote.release(active.run_id):
                self._runs.move(active, RunPhase.RELEASED)
                active.scope.cancel()
                released.append(active.run_id)
        return released

    async def drain(self, grace_s: float) -> None:
        """Let active runs finish for up to `grace_s`, then cancel the rest."""
        with anyio.move_on_after(grace_s):
            while self.active_run_ids():
                await Signal.wait(self._conversation_signal.ticket(), 0.5)
        for run_id in self.active_run_ids():
            await self.cancel(run_id, reason="the host is shutting down")

    # -- admission -------------------------------------------------------------------------------------

    def resolve(self, event: AgentEventEnvelope) -> tuple[AgentBinding, ExecutingRunner]:
        """Binding and runner for `event`, or the HostError that says why there is none."""
        binding = self._bindings.resolve(event)
        runner = self._registry.get(binding.agent.runner)
        runner_config(binding, runner.manifest)  # a bad runner config refuses the event up front
        return binding, runner

    async def submit(
        self,
        event: AgentEventEnvelope,
        *,
        via: IngestVia = "api",
        parent: tracing.Carrier | None = None,
        created_by: str | None = None,
    ) -> Admission:
        """Admit `event` and start its run in the background. Idempotent on `event_id`; `created_by`
        is the name of the API key that posted it (`Run.created_by`).

        Traced as the ingest span (a child of `parent`, an accepted W3C trace context, else of the
        current span), with the binding as its child; the run's spans descend from it.
        """
        attributes: dict[str, str | int | float | bool] = {
            tracing.EVENT_ID: event.event_id,
            tracing.EVENT_TYPE: event.event_type,
            tracing.INGEST_VIA: via,
        }
        if event.conversation_id is not None:
            attributes[tracing.CONVERSATION_ID] = event.conversation_id
        with tracing.span("mcphost.ingest", parent=parent or None, attributes=attributes) as current:
            admitted = await self._admit(event, created_by)
            run = admitted.run
            tracing.annotate(
                current,
                {
                    tracing.RUN_ID: run.run_id,
                    tracing.AGENT_NAME: run.agent_id,
                    tracing.RUN_STATUS: str(run.status),
                    tracing.REPLAYED: not admitted.created,
                },
            )
            return admitted

    async def _admit(self, event: AgentEventEnvelope, created_by: str | None) -> Admission:
        bind_ns = time.time_ns()
        bound: AgentBinding | None = None
        try:
            binding, runner = self.resolve(event)
            bound = binding
            await admission.check_inputs(self._stores, event)
        except HostError as exc:
            # A replay still gets its run when its agent or attachments have gone since.
            existing = await self._stores.runs.get_by_event(event.event_id)
            refused = exc.code if bound is None else None
            admission.trace_binding(bind_ns, event, bound, existing.run_id if existing else None, refused)
            if existing is not None:
                return Admission(existing, created=False)
            raise

        run, grant, token = admission.new_run(
            event,
            binding,
            runner.manifest,
            host_id=self.host_id,
            timeout_s=binding.agent.timeout_s or self._default_timeout_s,
            created_by=created_by,
        )
        run_id = run.run_id
        active = ActiveRun(run_id=run_id, conversation_id=event.conversation_id, runner=runner)
        start = self._start_at_once(active, event, binding, grant, token)
        self._runs.admit(active)
        try:
            try:
                run, created = await self._stores.runs.admit(
                    run,
                    grant=grant,
                    concurrency=binding.agent.concurrency,
                    inbound=admission.inbound(event, run_id),
                    start=start,
                )
            except BaseException:
                self._not_started(active, start)
                raise
            started = created and run.status is RunStatus.RUNNING
            if not started:
                self._not_started(active, start)
            admission.trace_binding(bind_ns, event, binding, run.run_id, None)
            if not created:
                return Admission(run, created=False)
            self._start(active, event, binding, grant, token, started=started)
        finally:
            if active.phase is RunPhase.ADMITTING:
                self._runs.forget(active)
        if binding.agent.concurrency == "interrupt" and event.conversation_id is not None:
            await self._interrupt_others(event.conversation_id, keep=run_id)
        if started and self._limiter.borrowed_tokens == 1:
            # The only run executing here: the loop turns its tasks need to call its runner (the run's
            # task, then its runner call's), so the runner works while the caller answers its client.
            # With other runs executing, the loop has their work to do: the turns would only cost.
            for _ in range(tuning.RUNNER_FIRST_TURNS):
                if active.runner_called:
                    break
                await anyio.lowlevel.cancel_shielded_checkpoint()
        return Admission(run, created=True)

    def _task_group(self) -> TaskGroup:
        if self._tg is None:
            raise RuntimeError("Orchestrator.submit() needs `async with orchestrator.running()`")
        return self._tg

    def _start_at_once(
        self, active: ActiveRun, event: AgentEventEnvelope, binding: AgentBinding, grant: RunGrant, token: str
    ) -> RunStart | None:
        """What `runs.admit` needs to start the run in its admission transaction, holding a slot of
        `max_concurrent_runs` for it; None (no slot taken) when every slot is busy."""
        self._task_group()  # refuse before anything is stored
        try:
            self._limiter.acquire_on_behalf_of_nowait(active)
        except anyio.WouldBlock:
            return None
        return RunStart(
            host_id=self.host_id,
            user_item=user_item(event, active.run_id),
            context=self._contexts.starter(active, event, binding, grant, token),
            state=admission.snapshot_scopes(grant),
        )

    def _not_started(self, active: ActiveRun, start: RunStart | None) -> None:
        """The admission did not start the run: give back the slot `_start_at_once` took."""
        if start is not None:
            self._limiter.release_on_behalf_of(active)
            active.context = None
            active.recording = None

    def _start(
        self,
        active: ActiveRun,
        event: AgentEventEnvelope,
        binding: AgentBinding,
        grant: RunGrant,
        token: str,
        *,
        started: bool = False,
        adopted: bool = False,
    ) -> None:
        """Hand the run to a task of this process: it waits for its turn unless `started` (running
        already, holding its slot); `adopted`: running on a runtime for a host that stopped, its journal
        continued (`_readopt`)."""
        tg = self._task_group()
        active.feed = ResultFeed()
        self._runs.move(active, RunPhase.EXECUTING if started else RunPhase.QUEUED)
        tg.start_soon(self._run, active, event, binding, grant, token, started, adopted)

    async def _resume(self, run_id: str) -> None:
        """Run a queued run this host adopted from a stopped one (`hosts.recover_abandoned`), with a new
        token, its place in its conversation's queue and its deadline (`_admission.readmit`)."""
        try:
            readmitted = await admission.readmit(self._stores, run_id, self.resolve, host_id=self.host_id)
            if readmitted is not None:
                event, binding, runner, grant, token = readmitted
                active = ActiveRun(run_id=run_id, conversation_id=event.conversation_id, runner=runner)
                self._runs.admit(active)
                self._start(active, event, binding, grant, token)
                logger.info("run %s re-queued after a host restart", run_id)
        except Exception:
            logger.exception("run %s: could not re-queue it after a host restart", run_id)
            try:  # never leave it queued with nobody to run it (else the sweeper ends it: host.run_lost)
                await self._stores.runs.finish(run_id, RunStatus.FAILED, error=HOST_RESTARTED)
            except Exception:
                logger.exception("run %s: could not fail it either; the sweeper will end it", run_id)

    async def _readopt(self, run_id: str) -> None:
        """Follow again a run executing on a runtime that this host adopted from a stopped one
        (`hosts.recover_abandoned`): its grant, deadline and slot as they were, its journal continued,
        its runtime's posted results not yet journaled forwarded (`runtimes/remote.py`)."""
        try:
            readopted = await admission.readopt(
                self._stores, run_id, self.resolve, remote=self.remote is not None
            )
            if readopted is not None:
                event, binding, runner, grant, ctx = readopted
                active = ActiveRun(run_id=run_id, conversation_id=event.conversation_id, runner=runner)
                active.context = ctx  # a followed run's executor needs no token: its runtime has its claim's
                self._runs.admit(active)
                await self._limiter.acquire_on_behalf_of(active)
                self._start(active, event, binding, grant, "", started=True, adopted=True)
                logger.info("run %s: followed again on its runtime after a host restart", run_id)
        except Exception:
            logger.exception("run %s: could not follow it on its runtime after a host restart", run_id)
            try:
                await self._stores.runs.finish(run_id, RunStatus.FAILED, error=HOST_RESTARTED)
                await self._stores.dispatch.drop(run_id)
            except Exception:
                logger.exception("run %s: could not fail it either; the sweeper will end it", run_id)

    async def _readopt_tick(self) -> None:
        """Follow the runs on runtimes of replicas that died since this host started (`_readopt`)."""
        for run_id in await self._stores.hosts.readopt_remote(self.host_id):
            await self._readopt(run_id)

    async def _interrupt_others(self, conversation_id: str, *, keep: str) -> None:
        # `runs.admit` flagged them in the database (for other hosts, with the same reason); act on ours
        # without waiting.
        for active in self._runs.in_phase(*HELD):
            if active.run_id != keep and active.conversation_id == conversation_id:
                await self.cancel(active.run_id, reason=interrupted_by(keep))

    # -- cancel ----------------------------------------------------------------------------------------

    async def cancel(self, run_id: str, *, reason: str = "cancelled by request") -> Run:
        """Cancel a run: queued runs end at once; running ones get `runner/cancel` and a grace period.

        A run owned by another host process is flagged in the database with `reason`; that host's poller
        cancels it with that reason.
        An inspection grant (no runner) is revoked at once and returned ended.
        """
        run = await self._stores.runs.get(run_id)
        if run.status.is_terminal:
            return run
        if run.runner_id is None:  # an inspection grant: nothing executes it, it ends here and now
            run = await end_grant(self._stores, run_id, reason)
            await closing.run_callbacks(self.on_run_end, run_id, run)
            return run
        active = self._runs.held(run_id)
        if active is None:
            await self._stores.runs.request_cancel(run_id, reason)  # its host ends it with `reason`
            return run
        if active.cancel_reason is None:
            active.cancel_reason = reason
            active.request_cancel()
            self._conversation_signal.notify()
        return run

    async def park(self, run_id: str, approval_id: str) -> None:
        """Stop a running run (as `cancel` does) and end it `parked` on `approval_id` (a call of a run whose runner
        parks needs a person's decision; the decision starts a continuation run).

        A run of another host process is flagged as cancel-requested in the database; its poller
        parks it, as the run has a pending parked approval (`ApprovalStore.pending_parked`).
        """
        active = self._runs.held(run_id)
        if active is None:
            await self._stores.runs.request_cancel(run_id)
            return
        if active.cancel_reason is None and active.parked_on is None:
            active.parked_on = approval_id
            active.request_cancel()
            self._conversation_signal.notify()

    @property
    def listener(self) -> Listener | None:
        """The wake-up listener (PostgreSQL, while `running`), else None."""
        return self._listener

    def _poll_s(self, fallback: float) -> float:
        """How long a waiter on other processes may sleep: `fallback` unless wake-ups are heard."""
        listening = self._listener is not None and self._listener.server_pid is not None
        return tuning.NOTIFIED_RECHECK_S if listening else fallback

    def _woken(self, wake: Wake | None) -> None:
        """Another process committed a change this process may be waiting for (None: maybe several)."""
        if wake is None:
            self._remote.notify_all()
            self._conversation_signal.notify()
            self._cancel_poll.wake()
            return
        kind, run_id = wake
        if kind == "cancel":
            if self._runs.held(run_id) is not None:
                self._cancel_poll.wake()
            return
        self._remote.notify(run_id)
        if kind == "end" and self._runs.phase(run_id) is not RunPhase.ENDED:  # our own ends wake our queue
            self._conversation_signal.notify()

    async def _poll_cancels(self) -> float:
        """One pass of the cancel poll: cancel (or park) the runs held here that another process asked to."""
        wait = self._poll_s(tuning.CANCEL_POLL_S)
        if not self.active_run_ids():
            return wait  # nothing here to cancel: no query
        for run_id, reason in await self._stores.runs.cancel_requested(self.host_id):
            if self._runs.held(run_id) is None:
                continue
            parking = await self._stores.approvals.pending_parked(run_id)
            if parking is not None:  # another replica's facts server asked to park it
                await self.park(run_id, parking.approval_id)
            else:
                await self.cancel(run_id, reason=reason or "cancelled by request")
        return wait

    # -- one run ---------------------------------------------------------------------------------------

    async def _run(
        self,
        active: ActiveRun,
        event: AgentEventEnvelope,
        binding: AgentBinding,
        grant: RunGrant,
        token: str,
        started: bool,
        adopted: bool = False,
    ) -> None:
        run_id = active.run_id
        feed = active.feed
        assert feed is not None  # given by `_start`
        journal = RunJournal(self._stores, run_id=run_id, grant=grant, event=event, publish=feed.publish)
        happened = Happened()
        agent_id = binding.agent.id
        runner_id = active.runner.manifest.id
        ids = {tracing.RUN_ID: run_id, tracing.AGENT_NAME: agent_id}
        with tracing.span(
            f"invoke_agent {agent_id}",
            parent=stored_trace(grant),
            attributes={**ids, tracing.OPERATION: "invoke_agent", tracing.RUNNER_ID: runner_id}
            | conversation_attribute(active.conversation_id),
        ) as run_span:
            try:
                with active.scope:
                    if adopted:  # its stream goes on from its stored results
                        await journal.resume()
                        if self.remote is not None:
                            self.remote.adopt(run_id, journal.last_runner_seq)
                    if not started:
                        with tracing.span("mcphost.run.queued", attributes=ids):
                            started = await self._wait_turn(
                                active,
                                grant,
                                journal,
                                self._contexts.starter(active, event, binding, grant, token),
                            )
                    if started:
                        tracing.event(run_span, "started")
                        with tracing.span(
                            f"mcphost.runner {runner_id}",
                            kind="client",
                            attributes={**ids, tracing.RUNNER_ID: runner_id},
                        ) as runner_span:
                            happened = await self._execute(
                                active, event, binding, grant, journal, runner_span
                            )
                            tracing.annotate(runner_span, {tracing.OUTCOME: str(decide_end(happened).status)})
            except Exception as exc:
                closing.log_host_failure(run_id, exc)
                happened = Happened(settled=journal.outcome, failure=exc)
            finally:
                if not happened.executed and happened.failure is None:
                    # Not executed to its end: queued past its deadline, cancelled, or cut off.
                    happened = Happened(
                        settled=journal.outcome,
                        cancel_reason=active.cancel_reason,
                        deadline_passed=active.deadline_passed,
                    )
                ended: RunOutcome | None = None
                try:
                    if active.phase is not RunPhase.RELEASED:  # released: the next host follows it
                        with anyio.CancelScope(shield=True), anyio.move_on_after(tuning.CLOSE_BOUND_S):
                            ended = await closing.close(
                                active,
                                journal,
                                happened,
                                stores=self._stores,
                                runs=self._runs,
                                on_run_end=self.on_run_end,
                                on_run_closing=self.on_run_closing,
                            )
                finally:
                    if started:
                        # Held until its end is written: a run stored `running` always holds a slot.
                        self._limiter.release_on_behalf_of(active)
                self._conversation_signal.notify()
                if run_span is not None and ended is not None:
                    closing.trace_end(run_span, ended)

    async def _wait_turn(
        self, active: ActiveRun, grant: RunGrant, journal: RunJournal, start: StartContext
    ) -> bool:
        """Wait for a slot of `max_concurrent_runs` and for the database to let this run start.

        True with the slot held (the caller gives it back once the run's close is over) and the run
        `EXECUTING`; False, without a slot, when the run ended while queued. The slot is taken before asking the database, so a run marked
        `running` is never waiting for capacity, and given back while the conversation is busy, so a
        queued run never holds a slot that others could use.
        """
        while True:
            if active.cancel_reason is not None:
                return False
            if time.time() >= grant.deadline_at:
                active.deadline_passed = True
                return False
            await self._limiter.acquire_on_behalf_of(active)
            ticket = self._conversation_signal.ticket()
            try:
                run = await self._stores.runs.try_start(
                    active.run_id,
                    host_id=self.host_id,
                    user_item=journal.user_item(),
                    context=start,
                    state=admission.snapshot_scopes(grant),
                )
            except BaseException:
                self._limiter.release_on_behalf_of(active)
                raise
            if run is not None:
                self._runs.move(active, RunPhase.EXECUTING)
                return True
            self._limiter.release_on_behalf_of(active)
            # Woken when any run of this process ends or is cancelled, and by other processes' run ends
            # (their wake-ups); polled as a safety net.
            await Signal.wait(ticket, self._poll_s(tuning.QUEUE_POLL_S))

    async def _execute(
        self,
        active: ActiveRun,
        event: AgentEventEnvelope,
        binding: AgentBinding,
        grant: RunGrant,
        journal: RunJournal,
        runner_span: tracing.Span | None,
    ) -> Happened:
        """Write a recorded run's recording header, then execute its runner (`_execution.execute`)."""
        ctx = active.context
        assert ctx is not None  # built as the run started (`ContextBuilder.starter`)
        if runner_span is not None:  # the runner and its MCP calls descend from it
            ctx = active.context = with_trace(ctx, tracing.carrier())
        recorded, active.recording = active.recording, None
        if recorded is not None:
            # Before the runner starts, so its first MCP call finds the recording to append to.
            await begin_recording(self._stores, active, recorded, event, binding)
        placement = binding.agent.runtime
        # A remote agent's run executes on a runtime (runtimes/remote.py), through the same seam.
        remote = (
            None
            if placement == "local" or self.remote is None
            else self.remote.execution(placement, active.runner.manifest.id, binding.agent)
        )
        if remote is None:  # the runner's last results may carry its end (`closing.ending_gate`)
            journal.end_with = closing.ending_gate(active, self.on_run_closing)
        projector = self.projector
        project = (
            None
            if remote is not None or projector is None or not projector.projects(binding.agent)
            else partial(projector.local, binding.agent)
        )
        return await execute(
            active,
            ctx,
            journal,
            executor=remote,
            project=project,
            deadline_at=grant.deadline_at,
            timeout_s=binding.agent.timeout_s or self._default_timeout_s,
            ask=self._ask,
        )

    async def _ask(self, run_id: str, asked: JSONObject) -> None:
        """An `interaction.requested` of the run: a parked `interaction` approval, and the run parks."""
        approval = await self._stores.approvals.request(run_id, "interaction", asked, parked=True)
        await self.park(run_id, approval.approval_id)

    # -- the sweepers ----------------------------------------------------------------------------------

    async def _sweep_tick(self) -> float:
        await self.sweep()
        return tuning.SWEEP_S

    async def sweep(self) -> list[str]:
        """End the runs this host owns that none of its tasks holds; their ids (`_closing.sweep`)."""
        ended = await closing.sweep(self._stores, self._runs, self.host_id)
        if ended:
            self._conversation_signal.notify()  # queued runs of their conversations may start now
        return ended

    async def _sweep_grants_tick(self) -> None:
        await self.sweep_grants()

    async def sweep_grants(self) -> list[str]:
        """Close the inspection grants past their deadline (their tokens already stopped working); their ids."""
        ended = await end_expired(self._stores)
        for run in ended:
            await closing.run_callbacks(self.on_run_end, run.run_id, run)
        return [run.run_id for run in ended]

    # -- reading ---------------------------------------------------------------------------------------

    async def wait(self, run_id: str) -> Run:
        """Wait until the run is terminal (the latest ends of this process are answered from memory)."""
        return await self._reader.wait(run_id)

    def results(self, run_id: str, *, after: int = 0) -> AsyncGenerator[StoredResult, None]:
        """Every persisted result of the run after host sequence `after`, live, until the run ends
        (`feed.RunReader.results`)."""
        return self._reader.results(run_id, after=after)

    def result_batches(self, run_id: str, *, after: int = 0) -> AsyncGenerator[list[StoredResult], None]:
        """`results`, in the batches they are at hand in (`feed.RunReader.batches`): a stream sends
        each batch in one write."""
        return self._reader.batches(run_id, after=after)

    def _feed_of(self, run_id: str) -> ResultFeed | None:
        active = self._runs.get(run_id)
        return None if active is None else active.feed

    def _ended_of(self, run_id: str) -> Run | None:
        active = self._runs.get(run_id)
        return active.ended if active is not None and active.phase is RunPhase.ENDED else None
