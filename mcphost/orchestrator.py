"""The run orchestrator: admission, the run state machine, deadline, cancel and result delivery.

Owns the lifetime of every run this host process executes (DESIGN §3). One `Orchestrator` is entered
with `async with orchestrator.running():`, which owns the task group of all runs, the cancel poller and
host liveness; nothing of a run outlives it.

Invariants:
- Admission is all-or-nothing: binding, runner and runner config are resolved before anything is
  stored, so an event that cannot run changes nothing; the runs row and the event's inbound event-log
  row are written in one transaction. A repeated `event_id` returns its latest run, unless that run
  failed `host.restarted`: then it is admitted again as the next attempt (`runs.admit`).
- A run admitted while a slot of `max_concurrent_runs` is free is started by its admission transaction
  when `try_start` would start it (`_start_at_once`, `RunStart`), holding that slot; otherwise it is
  admitted `queued`, the slot is given back and `_wait_turn` starts it later.
- At start-up, runs a stopped host left `running` fail `host.restarted`; the ones it left `queued` are
  adopted and run here (`_resume`) in their original queue order, with their original deadline.
- Everything after the grant is built sits inside one try/finally: whatever fails, the run gets a
  terminal status with a reason and its grant is revoked, under a shielded, bounded scope.
- Conversation concurrency is decided by the database (`runs.admit` / `runs.try_start`), so the
  `enqueue`/`reject`/`interrupt` policies hold across host processes sharing one PostgreSQL.
- The deadline counts from admission: an event that waited in its conversation's queue past its
  agent's timeout is stale and fails with `deadline_exceeded` without starting.
- Results are persisted before they are published. A reader of a run active on this process takes them
  from the run's in-memory feed (`feed.py`), in the order persisted; readers of other processes' runs,
  of ended runs, or further behind than the feed keeps read the store. Either way a reader that
  resumes after sequence N gets every later result exactly once.
- Waiting on another process (following or waiting for its run, a queued run behind its run, a cancel
  it wrote for a run here) is woken by its notifications on PostgreSQL (`stores/wakeups.py`, `_woken`)
  and polled only as a safety net (`NOTIFIED_RECHECK_S`); without a listening connection (SQLite, or
  while it reconnects) at `QUEUE_POLL_S` / `CANCEL_POLL_S`.
- No run stays `queued`/`running` without an executor on its live host. The terminal write (the
  journal's terminal result, then `RunStore.finish`) is idempotent and retried with jittered
  exponential back-off for up to `TERMINAL_RETRY_S` when storage fails; a run whose end still could not
  be written is remembered with its outcome, and the sweeper (every `SWEEP_S`) writes it later. The
  sweeper also fails (`host.run_lost`) any other active run this host owns that no task of this
  process holds (admitted, then the admission's caller failed), so a conversation's queue never wedges
  until a restart. Readers of such a run poll the store and end when the sweeper ends it.
- What a client sees of a host failure is a code and a short message (`HOST_FAILED`, or a storage
  error's fixed message); the exception itself is logged with the run id, never stored in the run.
- A run's context is built once, as it starts, inside the transaction that moves it to `running`
  (`runs.try_start`, which also appends the run's user input): the runs store keeps it without its
  token, for every replica's facts server; the copy with the token lives in memory only while the run
  is active on this process (`context(run_id)`, the facts server's context provider). `on_run_end` callbacks
  run once per run, after its terminal status is written and its grant revoked, inside the shielded,
  bounded close; a failing callback is logged and does not stop the others.
- A recorded run (`grant.record`) has its recording header (envelope, token-free context, agent entry)
  written after it started and before its runner is called, so every MCP call it makes is recorded.
- A run parks (`park`, asked by the facts server when a call of a runner that parks needs a
  person's decision) like a cancel: `runner/cancel` and `CANCEL_GRACE_S` for the runner to stop its
  CLI (so the continuation never shares the session folder with a CLI still stopping), but what the
  runner sends from then on is dropped and the run ends `parked`; its grant is revoked as for any end.
  What continues it is not this class's business (`continuations.py` submits the continuation as
  an ordinary event).
- Inspection grants (runs without a runner, `inspection.py`) end through this class too: `cancel`
  revokes one at once, and the grant sweeper (every `GRANT_SWEEP_S`) completes those past their
  deadline; `on_run_end` runs for them as for any run. Within a host process, nothing else writes a
  run's status.

Size: past 600 lines because the run state machine — admission, the concurrency policies, start, the
deadline, cancel, the terminal write and recovery — is one set of transitions that must be read together;
what could leave it has left (the journal, the context builder, inspection grants, the stores).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream
from pydantic import ValidationError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

from mcphost import tracing
from mcphost.bindings import Bindings
from mcphost.common.validation import describe
from mcphost.context import (
    SNAPSHOT_SCOPES,
    build_context,
    content_sha256,
    runner_config,
    with_token,
    with_trace,
)
from mcphost.errors import (
    HostError,
    InvalidArgumentError,
    PluginError,
    StorageFullError,
    StorageUnavailableError,
    find_error,
)
from mcphost.feed import ResultFeed, RunSignals, Signal
from mcphost.grants import build_grant, mint_token
from mcphost.inspection import GRANT_SWEEP_S, end_expired, end_grant
from mcphost.journal import RunJournal, RunOutcome, user_item
from mcphost.models import AgentBinding, AgentEventEnvelope, Run, RunError, RunGrant, RunStatus, new_id
from mcphost.plugins.process import PluginProcess, RawResult
from mcphost.plugins.registry import RegisteredRunner, RunnerRegistry
from mcphost.protocol import AgentRunContext, HostModelInfo, JSONObject
from mcphost.stores import RecordingHeader, ScopeSnapshot, Stores, event_values
from mcphost.stores.hosts import HOST_RESTARTED
from mcphost.stores.results import StoredResult
from mcphost.stores.runs import RunStart, StartContext, interrupted_by
from mcphost.stores.wakeups import Listener, Wake
from mcphost.warm import WarmSessions, wants_warm

logger = logging.getLogger(__name__)

CANCEL_GRACE_S = 5.0
"""How long a cancelled runner has to stop by itself before its run is cut off."""
TERMINAL_DRAIN_S = 5.0
"""How long after a terminal result the host waits for the plugin's `runner/run` response."""
QUEUE_POLL_S = 0.25
"""Poll interval for runs waiting on another host's run of the same conversation, and for following
another host's run, while no wake-up connection listens (SQLite, or PostgreSQL while it reconnects)."""
NOTIFIED_RECHECK_S = 5.0
"""The same poll while this process listens for other processes' wake-ups (PostgreSQL `LISTEN`,
`stores/wakeups.py`): a safety net only, so a lost notification delays a waiter but never hangs it."""
LOCAL_RECHECK_S = 5.0
"""How long a reader of a run active on this process waits for its signal before looking again (a
safety net only: signals are not lost, and with many readers a short poll would cost real CPU)."""
CANCEL_POLL_S = 0.5
"""How often cancel requests other processes wrote for this process's runs are looked for (one query,
only while runs are active), while no wake-up connection listens; `NOTIFIED_RECHECK_S` while one does."""
TOOL_LISTS_KEPT = 256
"""Sets of allowed tools whose `tools/list` the orchestrator keeps built (`_tools_of`)."""
MAX_BATCH = 512
RECENT_ENDS = 1024
"""How many of this process's latest run ends `wait` answers from memory (an end never changes)."""
RESULTS_PAGE = 1000
"""How many results `results()` reads from the store at a time."""
TERMINAL_RETRY_S = 6.0
"""How long a run's close keeps retrying its terminal write (result and status) before it leaves the
run to the sweeper."""
SWEEP_S = 5.0
"""How often the sweeper looks for runs this host owns but no longer executes (one indexed query)."""
CLOSE_BOUND_S = TERMINAL_RETRY_S + 10.0
"""The bound on a run's whole close: its terminal write, then the `on_run_end` callbacks."""
LOST = RunError(
    code="host.run_lost",
    message="The host stopped executing this run without recording its end; it was closed by the sweeper.",
)
HOST_FAILED = "The host failed while running this run; the cause is in the host's log under this run id."
STORAGE_ERRORS = (StorageUnavailableError, StorageFullError)
IngestVia = Literal["api", "hook", "schedule", "cli", "approval"]
"""Where an event came in: `POST /v1/events`, a signed webhook, a schedule's fire, `mcphost run`, the
decision on a parked run's approval (its continuation)."""


@dataclass(eq=False)  # identity: also the borrower token of the capacity limiter
class _ActiveRun:
    run_id: str
    conversation_id: str | None
    runner: RegisteredRunner[PluginProcess]
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    cancel_reason: str | None = None
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)
    parked_on: str | None = None
    """The approval the run parks on (`park`): it stops and ends `parked`, whatever it says after."""


@dataclass(frozen=True)
class Admission:
    """The answer to `submit`: the run and whether this call created it."""

    run: Run
    created: bool


def _no_tools(grant: RunGrant) -> Sequence[JSONObject]:
    """The tool list of an orchestrator built without the facts server's table (tests): none."""
    del grant
    return ()


class Orchestrator:
    """Runs events through bound agents' runners; the only writer of run lifecycles in this process."""

    def __init__(
        self,
        *,
        stores: Stores,
        registry: RunnerRegistry[PluginProcess],
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
        self._revise_context = revise_context
        self._warm = warm
        """Warm harness sessions: agents with `warm = true` get the session endpoint, bound per run."""
        """Replaces each run's freshly built context (a replay runs on the recorded one)."""
        self._recording: dict[str, AgentRunContext] = {}
        """The token-free contexts of recorded runs that started, until their recording begins."""
        self._registry = registry
        self._bindings = bindings
        self._public_url = public_url
        self._default_timeout_s = default_timeout_s
        self._limiter = anyio.CapacityLimiter(max_concurrent_runs)
        self._knowledge_bases = dict(knowledge_bases or {})
        self._skills = dict(skills or {})
        self._models = dict(models or {})
        self._tool_list: Callable[[RunGrant], Sequence[JSONObject]] = tool_list or _no_tools
        """The facts tools a grant allows, as `tools/list` shows them (hashed into `static_refs`): a
        function of the grant's `tools` alone, so kept per set of tools (`_tools_of`)."""
        self._tool_lists: dict[frozenset[str], tuple[Sequence[JSONObject], str]] = {}
        self.host_id = new_id("host")
        self._tg: TaskGroup | None = None
        self._active: dict[str, _ActiveRun] = {}
        self._recent: dict[str, Run] = {}
        """The latest runs of this process that ended, as recorded (oldest first; `RECENT_ENDS`)."""
        self._feeds: dict[str, ResultFeed] = {}
        """The results of each run active here, for this process's readers (persist, then publish)."""
        self._conversation_signal = Signal()
        self._cancel_signal = Signal()
        """Woken when another process asked to cancel a run active here (`_poll_cancels`)."""
        self._remote = RunSignals()
        """Readers here of runs other processes execute, woken by those processes' wake-ups."""
        self._listener: Listener | None = None
        """This process's `LISTEN` for other processes' wake-ups (PostgreSQL only)."""
        self._contexts: dict[str, AgentRunContext] = {}
        self._admitting: set[str] = set()
        """Runs whose admission is under way (the sweeper leaves them alone)."""
        self._unfinished: dict[str, tuple[RunJournal, RunOutcome]] = {}
        """Runs whose close could not write their end, with the outcome the sweeper is to write."""
        self.on_run_end: list[Callable[[str, Run | None], Awaitable[None]]] = []
        """Called once each run of this process has ended (e.g. `FactsServer.end_run`), with its id and
        the run as recorded at its end (None when that record could not be written or read)."""

    @property
    def public_url(self) -> str:
        return self._public_url

    @public_url.setter
    def public_url(self, value: str) -> None:
        # `mcphost run` learns its ephemeral MCP port only after the server binds.
        self._public_url = value

    def active_run_ids(self) -> list[str]:
        """Runs this process is executing or holding in its queue right now."""
        return list(self._active)

    async def context(self, run_id: str) -> AgentRunContext | None:
        """The context an active run of this process was started with (token included), else None."""
        return self._contexts.get(run_id)

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
                    tg.start_soon(self._poll_cancels)
                    for run_id in recovery.requeued:
                        await self._resume(run_id)
                    # After the resumes: an adopted run is ours and held by a task from here on.
                    tg.start_soon(self._sweep_forever)
                    tg.start_soon(self._sweep_grants_forever)
                    try:
                        yield self
                    finally:
                        for active in list(self._active.values()):
                            active.cancel_reason = active.cancel_reason or "the host is shutting down"
                            active.scope.cancel()
                        tg.cancel_scope.cancel()
                        self._tg = None
                        self._listener = None
            finally:
                # A last chance for ends that could not be written; what remains is failed
                # (`host.restarted`) by the next host that starts on this database.
                with anyio.CancelScope(shield=True), anyio.move_on_after(TERMINAL_RETRY_S):
                    try:
                        await self.sweep()
                    except Exception:
                        logger.exception("the last sweep before shutdown failed")

    async def drain(self, grace_s: float) -> None:
        """Let active runs finish for up to `grace_s`, then cancel the rest."""
        with anyio.move_on_after(grace_s):
            while self._active:
                await Signal.wait(self._conversation_signal.ticket(), 0.5)
        for run_id in list(self._active):
            await self.cancel(run_id, reason="the host is shutting down")

    # -- admission -------------------------------------------------------------------------------------

    def resolve(self, event: AgentEventEnvelope) -> tuple[AgentBinding, RegisteredRunner[PluginProcess]]:
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
            admission = await self._admit(event, created_by)
            run = admission.run
            tracing.annotate(
                current,
                {
                    tracing.RUN_ID: run.run_id,
                    tracing.AGENT_NAME: run.agent_id,
                    tracing.RUN_STATUS: str(run.status),
                    tracing.REPLAYED: not admission.created,
                },
            )
            return admission

    async def _admit(self, event: AgentEventEnvelope, created_by: str | None) -> Admission:
        bind_ns = time.time_ns()
        bound: AgentBinding | None = None
        try:
            binding, runner = self.resolve(event)
            bound = binding
            self._check_inputs(event)
            for ref in event.input.attachments:
                await self._stores.artifacts.get(ref.artifact_id)  # NotFoundError: nothing stored yet
            if event.raw_ref is not None:
                await self._stores.artifacts.get(event.raw_ref)
        except HostError as exc:
            # A replay still gets its run when its agent or attachments have gone since.
            existing = await self._stores.runs.get_by_event(event.event_id)
            refused = exc.code if bound is None else None
            _trace_binding(bind_ns, event, bound, existing.run_id if existing else None, refused)
            if existing is not None:
                return Admission(existing, created=False)
            raise

        run_id = new_id("run")
        now = time.time()
        timeout = binding.agent.timeout_s or self._default_timeout_s
        token, token_hash = mint_token()
        grant = build_grant(
            run_id=run_id,
            event=event,
            binding=binding,
            manifest=runner.manifest,
            token_hash=token_hash,
            deadline_at=now + timeout,
        )
        if tracing.enabled():  # the ingest span, for whichever host starts the run
            trace = tracing.carrier()
            grant = grant.model_copy(
                update={
                    "traceparent": trace.get(tracing.TRACEPARENT),
                    "tracestate": trace.get(tracing.TRACESTATE),
                }
            )
        run = Run(
            run_id=run_id,
            event_id=event.event_id,
            event_type=event.event_type,
            agent_id=binding.agent.id,
            runner_id=runner.manifest.id,
            conversation_id=event.conversation_id,
            thread_id=event.thread_id,
            status=RunStatus.QUEUED,
            created_at=now,
            deadline_at=grant.deadline_at,
            host_id=self.host_id,
            created_by=created_by,
        )
        active = _ActiveRun(run_id=run_id, conversation_id=event.conversation_id, runner=runner)
        start = self._start_at_once(active, event, binding, grant, token)
        self._admitting.add(run_id)
        try:
            try:
                run, created = await self._stores.runs.admit(
                    run,
                    grant=grant,
                    concurrency=binding.agent.concurrency,
                    inbound=self._inbound(event, run_id),
                    start=start,
                )
            except BaseException:
                self._not_started(active, start)
                raise
            started = created and run.status is RunStatus.RUNNING
            if not started:
                self._not_started(active, start)
            _trace_binding(bind_ns, event, binding, run.run_id, None)
            if not created:
                return Admission(run, created=False)
            self._start(active, event, binding, grant, token, started=started)
        finally:
            self._admitting.discard(run_id)
        if binding.agent.concurrency == "interrupt" and event.conversation_id is not None:
            await self._interrupt_others(event.conversation_id, keep=run_id)
        return Admission(run, created=True)

    def _task_group(self) -> TaskGroup:
        if self._tg is None:
            raise RuntimeError("Orchestrator.submit() needs `async with orchestrator.running()`")
        return self._tg

    def _start_at_once(
        self,
        active: _ActiveRun,
        event: AgentEventEnvelope,
        binding: AgentBinding,
        grant: RunGrant,
        token: str,
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
            context=self._starter(active, event, binding, grant, token),
            state=self._snapshot_scopes(grant),
        )

    def _not_started(self, active: _ActiveRun, start: RunStart | None) -> None:
        """The admission did not start the run: give back the slot `_start_at_once` took."""
        if start is not None:
            self._limiter.release_on_behalf_of(active)
            self._contexts.pop(active.run_id, None)
            self._recording.pop(active.run_id, None)

    def _start(
        self,
        active: _ActiveRun,
        event: AgentEventEnvelope,
        binding: AgentBinding,
        grant: RunGrant,
        token: str,
        *,
        started: bool = False,
    ) -> None:
        """Hand the run to a task of this process: it waits for its turn unless `started` (running
        already, holding its slot)."""
        tg = self._task_group()
        self._feeds[active.run_id] = ResultFeed()
        self._active[active.run_id] = active
        tg.start_soon(self._run, active, event, binding, grant, token, started)

    async def _resume(self, run_id: str) -> None:
        """Run a queued run this host adopted from a stopped one (`hosts.recover_abandoned`).

        It keeps its place in its conversation's queue and its deadline; it gets a new token (the old
        one died with its host). Its event is read back from the event log and bound again: when the
        event no longer binds to the same agent and runner, the run fails `host.restarted` with why.
        """
        try:
            run = await self._stores.runs.get(run_id)
            try:
                event = AgentEventEnvelope.model_validate(
                    (await self._stores.events.get(run.event_id)).payload
                )
                binding, runner = self.resolve(event)
                if (binding.agent.id, runner.manifest.id) != (run.agent_id, run.runner_id):
                    raise InvalidArgumentError(
                        f"its event now binds to agent {binding.agent.id!r} (runner {runner.manifest.id!r}) "
                        f"instead of {run.agent_id!r} ({run.runner_id!r})"
                    )
            except (HostError, ValidationError) as exc:
                # A validation error's text quotes the input (event text): only `where: what` is stored.
                message = exc.message if isinstance(exc, HostError) else describe(exc, root="(event)")
                error = HOST_RESTARTED.model_copy(
                    update={"message": f"{HOST_RESTARTED.message} It could not be re-queued: {message}"}
                )
                await self._stores.runs.transition(run_id, RunStatus.FAILED, error=error)
                logger.warning("run %s could not be re-queued after a host restart: %s", run_id, message)
                return
            token, token_hash = mint_token()
            grant = (await self._stores.runs.grant(run_id)).grant.model_copy(
                update={"token_hash": token_hash}
            )
            if await self._stores.runs.replace_grant(run_id, grant, host_id=self.host_id):
                active = _ActiveRun(run_id=run_id, conversation_id=event.conversation_id, runner=runner)
                self._start(active, event, binding, grant, token)
                logger.info("run %s re-queued after a host restart", run_id)
        except Exception:
            logger.exception("run %s: could not re-queue it after a host restart", run_id)
            try:  # never leave it queued with nobody to run it (else the sweeper ends it: host.run_lost)
                await self._stores.runs.finish(run_id, RunStatus.FAILED, error=HOST_RESTARTED)
            except Exception:
                logger.exception("run %s: could not fail it either; the sweeper will end it", run_id)

    def _check_inputs(self, event: AgentEventEnvelope) -> None:
        for content in event.input.contents:
            if content.type != "text" and not any(
                a.artifact_id == content.artifact_id for a in event.input.attachments
            ):
                raise InvalidArgumentError(
                    f"input.contents names artifact {content.artifact_id!r}, which is not among input.attachments; "
                    "upload it first and list it in attachments"
                )

    @staticmethod
    def _inbound(event: AgentEventEnvelope, run_id: str) -> dict[str, Any]:
        """The event-log row of a run's event, written together with the run."""
        return event_values(
            event_id=event.event_id,
            event_type=event.event_type,
            kind="inbound",
            conversation_id=event.conversation_id,
            thread_id=event.thread_id,
            run_id=run_id,
            actor_id=event.actor.actor_id if event.actor else None,
            source=event.source,
            payload=event.model_dump(mode="json"),
        )

    async def _interrupt_others(self, conversation_id: str, *, keep: str) -> None:
        # `runs.admit` flagged them in the database (for other hosts, with the same reason); act on ours
        # without waiting.
        for run_id, active in list(self._active.items()):
            if run_id != keep and active.conversation_id == conversation_id:
                await self.cancel(run_id, reason=interrupted_by(keep))

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
            await self._ended(run_id, run)
            return run
        active = self._active.get(run_id)
        if active is None:
            await self._stores.runs.request_cancel(run_id, reason)  # its host ends it with `reason`
            return run
        if active.cancel_reason is None:
            active.cancel_reason = reason
            active.cancel_requested.set()
            self._conversation_signal.notify()
        return run

    async def park(self, run_id: str, approval_id: str) -> None:
        """Stop a running run (as `cancel` does) and end it `parked` on `approval_id` (a call of a run whose runner
        parks needs a person's decision; the decision starts a continuation run).

        A run of another host process is flagged as cancel-requested in the database; its poller
        parks it, as the run has a pending parked approval (`ApprovalStore.pending_parked`).
        """
        active = self._active.get(run_id)
        if active is None:
            await self._stores.runs.request_cancel(run_id)
            return
        if active.cancel_reason is None and active.parked_on is None:
            active.parked_on = approval_id
            active.cancel_requested.set()
            self._conversation_signal.notify()

    @property
    def listener(self) -> Listener | None:
        """The wake-up listener (PostgreSQL, while `running`), else None."""
        return self._listener

    def _poll_s(self, fallback: float) -> float:
        """How long a waiter on other processes may sleep: `fallback` unless wake-ups are heard."""
        listening = self._listener is not None and self._listener.server_pid is not None
        return NOTIFIED_RECHECK_S if listening else fallback

    def _woken(self, wake: Wake | None) -> None:
        """Another process committed a change this process may be waiting for (None: maybe several)."""
        if wake is None:
            self._remote.notify_all()
            self._conversation_signal.notify()
            self._cancel_signal.notify()
            return
        kind, run_id = wake
        if kind == "cancel":
            if run_id in self._active:
                self._cancel_signal.notify()
            return
        self._remote.notify(run_id)
        if kind == "end" and run_id not in self._recent:  # our own ends wake our queue already
            self._conversation_signal.notify()

    async def _poll_cancels(self) -> None:
        ticket = self._cancel_signal.ticket()
        while True:
            await Signal.wait(ticket, self._poll_s(CANCEL_POLL_S))
            ticket = self._cancel_signal.ticket()  # before the query: a request after it wakes the next wait
            if not self._active:
                continue  # nothing here to cancel: no query
            try:
                for run_id, reason in await self._stores.runs.cancel_requested(self.host_id):
                    if run_id not in self._active:
                        continue
                    parking = await self._stores.approvals.pending_parked(run_id)
                    if parking is not None:  # another replica's facts server asked to park it
                        await self.park(run_id, parking.approval_id)
                    else:
                        await self.cancel(run_id, reason=reason or "cancelled by request")
            except Exception:
                logger.exception("cancel poll failed; will retry")

    # -- one run ---------------------------------------------------------------------------------------

    async def _run(
        self,
        active: _ActiveRun,
        event: AgentEventEnvelope,
        binding: AgentBinding,
        grant: RunGrant,
        token: str,
        started: bool,
    ) -> None:
        run_id = active.run_id
        feed = self._feeds[run_id]
        journal = RunJournal(self._stores, run_id=run_id, grant=grant, event=event, publish=feed.publish)
        outcome: RunOutcome | None = None
        agent_id = binding.agent.id
        runner_id = active.runner.manifest.id
        ids = {tracing.RUN_ID: run_id, tracing.AGENT_NAME: agent_id}
        with tracing.span(
            f"invoke_agent {agent_id}",
            parent=_stored_trace(grant),
            attributes={**ids, tracing.OPERATION: "invoke_agent", tracing.RUNNER_ID: runner_id}
            | _conversation(active.conversation_id),
        ) as run_span:
            try:
                with active.scope:
                    if not started:
                        with tracing.span("mcphost.run.queued", attributes=ids):
                            started = await self._wait_turn(
                                active, grant, journal, self._starter(active, event, binding, grant, token)
                            )
                    if started:
                        tracing.event(run_span, "started")
                        try:
                            with tracing.span(
                                f"mcphost.runner {runner_id}",
                                kind="client",
                                attributes={**ids, tracing.RUNNER_ID: runner_id},
                            ) as runner_span:
                                if runner_span is not None:  # the runner and its MCP calls descend from it
                                    self._contexts[run_id] = with_trace(
                                        self._contexts[run_id], tracing.carrier()
                                    )
                                outcome = await self._execute(active, event, binding, grant, token, journal)
                                tracing.annotate(runner_span, {tracing.OUTCOME: str(outcome.status)})
                        finally:
                            self._limiter.release_on_behalf_of(active)
            except Exception as exc:
                outcome = _host_failure(run_id, exc)
            finally:
                ended: RunOutcome | None = None
                with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_BOUND_S):
                    ended = await self._close(active, journal, outcome, started=started)
                if run_span is not None and ended is not None:
                    _trace_end(run_span, ended)

    def _starter(
        self,
        active: _ActiveRun,
        event: AgentEventEnvelope,
        binding: AgentBinding,
        grant: RunGrant,
        token: str,
    ) -> StartContext:
        """The run's context builder, called by `runs.try_start` inside the start transaction: the
        token-free context is stored on the run, the one with the token is kept for the runner. It
        awaits nothing: on SQLite it runs on the writer thread (`Database.run_write`)."""

        async def build(
            latest: str | None, has_before: bool, state: Mapping[str, ScopeSnapshot]
        ) -> AgentRunContext:
            tools, tools_sha256 = self._tools_of(grant)
            ctx = build_context(
                run_id=active.run_id,
                event=event,
                binding=binding,
                grant=grant,
                manifest=active.runner.manifest,
                public_url=self._public_url,
                latest_cursor=latest,
                has_history_before=has_before,
                state=state,
                knowledge_bases=self._knowledge_bases,
                skills=self._skills,
                models=self._models,
                tools=tools,
                tools_sha256=tools_sha256,
            )
            if self._revise_context is not None:
                ctx = self._revise_context(ctx)
            warm = self._warm if self._warm is not None and wants_warm(binding.agent.config) else None
            if warm is not None:
                ctx = warm.offer(ctx, agent_id=binding.agent.id, public_url=self._public_url)
            if grant.record:
                self._recording[active.run_id] = ctx
            runner_ctx = with_token(ctx, token)
            self._contexts[active.run_id] = warm.with_token(runner_ctx) if warm is not None else runner_ctx
            return ctx

        return build

    def _tools_of(self, grant: RunGrant) -> tuple[Sequence[JSONObject], str]:
        """`tool_list(grant)` and its hash (`static_refs`), built once per set of allowed tools (agents
        reuse a handful of sets)."""
        kept = self._tool_lists.get(grant.tools)
        if kept is None:
            if len(self._tool_lists) >= TOOL_LISTS_KEPT:
                self._tool_lists.clear()
            tools = tuple(self._tool_list(grant))
            kept = self._tool_lists[grant.tools] = (tools, content_sha256(list(tools)))
        return kept

    async def _wait_turn(
        self, active: _ActiveRun, grant: RunGrant, journal: RunJournal, start: StartContext
    ) -> bool:
        """Wait for a slot of `max_concurrent_runs` and for the database to let this run start.

        True with the slot held (released by the caller); False, without a slot, when the run ended
        while queued. The slot is taken before asking the database, so a run marked `running` is never
        waiting for capacity, and given back while the conversation is busy, so a queued run never
        holds a slot that others could use.
        """
        while True:
            if active.cancel_reason is not None:
                return False
            if time.time() >= grant.deadline_at:
                active.cancel_reason = "deadline"
                return False
            await self._limiter.acquire_on_behalf_of(active)
            ticket = self._conversation_signal.ticket()
            try:
                run = await self._stores.runs.try_start(
                    active.run_id,
                    host_id=self.host_id,
                    user_item=journal.user_item(),
                    context=start,
                    state=self._snapshot_scopes(grant),
                )
            except BaseException:
                self._limiter.release_on_behalf_of(active)
                raise
            if run is not None:
                return True
            self._limiter.release_on_behalf_of(active)
            # Woken when any run of this process ends or is cancelled, and by other processes' run ends
            # (their wake-ups); polled as a safety net.
            await Signal.wait(ticket, self._poll_s(QUEUE_POLL_S))

    async def _execute(
        self,
        active: _ActiveRun,
        event: AgentEventEnvelope,
        binding: AgentBinding,
        grant: RunGrant,
        token: str,
        journal: RunJournal,
    ) -> RunOutcome:
        run_id = active.run_id
        ctx = self._contexts[run_id]  # built as the run started (`_starter`)
        recorded = self._recording.pop(run_id, None)
        if recorded is not None:
            # Before the runner starts, so its first MCP call finds the recording to append to.
            await self._stores.recordings.begin(
                RecordingHeader(
                    run_id=run_id,
                    agent_id=binding.agent.id,
                    runner_id=active.runner.manifest.id,
                    envelope=event.model_dump(mode="json"),
                    context=recorded.model_dump(mode="json"),
                    agent=binding.agent.model_dump(mode="json"),
                )
            )
        runner_name = active.runner.manifest.id.rsplit("/", 1)[1]
        plugin = active.runner.plugin
        send, receive = anyio.create_memory_object_stream[RawResult](math.inf)
        plugin_status: str | None = None
        crash: PluginError | None = None

        async def call_plugin() -> None:
            nonlocal plugin_status, crash
            async with send:
                try:
                    plugin_status = await plugin.run(runner_name, ctx, send)
                except PluginError as exc:
                    crash = exc

        async def watch_cancel(scope: anyio.CancelScope) -> None:
            await active.cancel_requested.wait()
            reason = "parked" if active.parked_on is not None else active.cancel_reason or "cancelled"
            if await plugin.cancel(run_id, reason):
                await anyio.sleep(CANCEL_GRACE_S)
            # Else the plugin is not running it (e.g. the run waits for a restart): nothing to let finish.
            scope.cancel()

        remaining = grant.deadline_at - time.time()
        with receive, anyio.move_on_after(max(remaining, 0)) as deadline_scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(call_plugin)
                tg.start_soon(watch_cancel, tg.cancel_scope)
                outcome = await self._pump(receive, journal, active)
                if outcome is not None and not outcome.by_runner:
                    # The host ended the run (a violation): stop the runner now.
                    await plugin.cancel(
                        run_id, outcome.error.message if outcome.error else "ended by the host"
                    )
                    tg.cancel_scope.cancel()
                else:
                    # Stream ended, or the runner's terminal result: let the plugin answer, bounded.
                    with anyio.move_on_after(TERMINAL_DRAIN_S):
                        await self._pump_rest(receive, journal)
                    tg.cancel_scope.cancel()

        if active.parked_on is not None and not journal.ended:
            return await journal.end(
                RunOutcome(
                    RunStatus.PARKED,
                    RunError(
                        code="parked",
                        message=f"The run parked on approval {active.parked_on!r}; its decision starts a "
                        "continuation run of the same conversation.",
                        details={"approval_id": active.parked_on},
                    ),
                )
            )
        if active.cancel_reason is not None and not journal.ended:
            return await journal.end(
                RunOutcome(
                    RunStatus.CANCELLED,
                    RunError(code="cancelled", message=f"Run cancelled: {active.cancel_reason}."),
                )
            )
        if deadline_scope.cancelled_caught and not journal.ended:
            await plugin.cancel(run_id, "deadline exceeded")
            timeout = binding.agent.timeout_s or self._default_timeout_s
            return await journal.end(
                RunOutcome.failed(
                    "deadline_exceeded", f"The run did not finish within its {timeout:g} s deadline."
                )
            )
        if crash is not None and not journal.ended:
            return await journal.end(RunOutcome.failed("runner.crashed", crash.message))
        return await journal.end_of_stream(plugin_status)

    async def _pump(
        self, receive: MemoryObjectReceiveStream[RawResult], journal: RunJournal, active: _ActiveRun
    ) -> RunOutcome | None:
        """Feed results to the journal in batches until the run ends or the stream closes; once the
        run is `parked`, what its stopping runner still sends is dropped (it cannot change the end).
        An `interaction.requested` (the harness asks the user) becomes a parked `interaction`
        approval and parks the run."""
        async for first in receive:
            if active.parked_on is not None:
                continue
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(receive.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
            outcome = await journal.accept(batch)
            if outcome is not None:
                return outcome
            while journal.questions:
                asked = journal.questions.pop(0)
                approval = await self._stores.approvals.request(
                    active.run_id, "interaction", asked, parked=True
                )
                await self.park(active.run_id, approval.approval_id)
        return None

    async def _pump_rest(self, receive: MemoryObjectReceiveStream[RawResult], journal: RunJournal) -> None:
        """After the end: whatever else arrives is recorded as ignored by the journal."""
        async for first in receive:
            await journal.accept([first])

    @staticmethod
    def _snapshot_scopes(grant: RunGrant) -> list[tuple[str, tuple[str, ...]]]:
        """The (scope, owner) pairs whose state the run's context shows (read as it starts)."""
        return [
            (scope, owner)
            for scope in SNAPSHOT_SCOPES
            if scope in grant.state_read and (owner := grant.state_scope_id(scope)) is not None
        ]

    async def _close(
        self, active: _ActiveRun, journal: RunJournal, outcome: RunOutcome | None, *, started: bool
    ) -> RunOutcome:
        """End the run: record its end, revoke, wake its readers; the outcome recorded (or to be)."""
        run_id = active.run_id
        outcome = self._settle(active, outcome)
        ended: Run | None = None
        try:
            with anyio.move_on_after(TERMINAL_RETRY_S):
                outcome, ended = await self._record_end(run_id, journal, outcome, active.cancel_reason)
        except Exception:
            logger.exception("run %s: could not record its end; the sweeper will retry", run_id)
        finally:
            if ended is None:
                self._unfinished[run_id] = (journal, outcome)
                ended = await self._revoke_after_failed_close(run_id)
            self._active.pop(run_id, None)
            self._contexts.pop(run_id, None)
            self._recording.pop(run_id, None)
            await self._ended(run_id, ended)
            if ended is not None and ended.status.is_terminal:
                self._recent[run_id] = ended
                if len(self._recent) > RECENT_ENDS:
                    del self._recent[next(iter(self._recent))]
            feed = self._feeds.pop(run_id, None)
            if feed is not None:
                feed.close(ended)
            self._conversation_signal.notify()
            logger.info(
                "run %s ended %s%s%s",
                run_id,
                outcome.status,
                f" ({outcome.error.code})" if outcome.error else "",
                "" if run_id not in self._unfinished else "; its end is not recorded yet",
            )
        return outcome

    async def _ended(self, run_id: str, run: Run | None) -> None:
        """Run the `on_run_end` callbacks of an ended run; a failing one does not stop the others."""
        for callback in list(self.on_run_end):
            try:
                await callback(run_id, run)
            except Exception:
                logger.exception("run %s: an on_run_end callback failed", run_id)

    @staticmethod
    def _settle(active: _ActiveRun, outcome: RunOutcome | None) -> RunOutcome:
        """The outcome to record: the one given, else what the cancel reason says."""
        if outcome is None:
            if active.cancel_reason == "deadline":
                outcome = RunOutcome.failed(
                    "deadline_exceeded", "The run's deadline passed while it waited in its queue."
                )
            elif active.cancel_reason is not None:
                outcome = RunOutcome(
                    RunStatus.CANCELLED,
                    RunError(code="cancelled", message=f"Run cancelled: {active.cancel_reason}."),
                )
            else:
                outcome = RunOutcome.failed("runtime_error", "The run ended without an outcome.")
        return outcome

    async def _record_end(
        self, run_id: str, journal: RunJournal, outcome: RunOutcome, cancel_reason: str | None
    ) -> tuple[RunOutcome, Run]:
        """Write the terminal result and the terminal status, retrying storage failures with back-off.

        Both writes are idempotent, so a retry after a write that did land changes nothing. The first
        outcome the journal settled wins; a cancel keeps why the host cancelled in the run's error.
        """
        async for attempt in AsyncRetrying(
            stop=stop_after_delay(TERMINAL_RETRY_S),
            wait=wait_random_exponential(multiplier=0.1, max=2.0),
            retry=retry_if_exception(lambda exc: isinstance(exc, STORAGE_ERRORS)),
            sleep=anyio.sleep,
            before_sleep=lambda state: _log_terminal_retry(run_id, state),
            reraise=True,
        ):
            with attempt:
                final = await self._end_journal(run_id, journal, outcome)
                if final.status is RunStatus.CANCELLED and cancel_reason and final.error is not None:
                    # Keep why the host cancelled, whatever the runner said when it stopped.
                    details = {**final.error.details, "reason": cancel_reason}
                    final = replace(final, error=final.error.model_copy(update={"details": details}))
                ended = await self._stores.runs.finish(
                    run_id, final.status, error=final.error, usage=final.usage or None
                )
                if ended.status is not final.status:
                    logger.warning(
                        "run %s had already ended %s; not moved to %s", run_id, ended.status, final.status
                    )
                return final, ended
        raise AssertionError("unreachable: tenacity re-raises the last failure")

    @staticmethod
    async def _end_journal(run_id: str, journal: RunJournal, outcome: RunOutcome) -> RunOutcome:
        """The journal's terminal result; a storage failure is raised (to retry), any other logged."""
        try:
            return await journal.end(outcome)
        except STORAGE_ERRORS:
            raise
        except Exception:
            # The status must still end (the stream's `event: end` carries it).
            logger.exception("run %s: its terminal result could not be stored", run_id)
            return journal.outcome or outcome

    async def _revoke_after_failed_close(self, run_id: str) -> Run | None:
        """The end was not recorded by this close: make sure the grant is revoked anyway."""
        try:
            await self._stores.runs.revoke(run_id)
            return await self._stores.runs.get(run_id)
        except Exception:
            logger.exception("run %s: could not revoke its grant", run_id)
            return None

    # -- the sweeper -----------------------------------------------------------------------------------

    async def _sweep_forever(self) -> None:
        while True:
            await anyio.sleep(SWEEP_S)
            try:
                await self.sweep()
            except Exception as exc:
                logger.warning("the run sweep failed; retrying in %g s: %s", SWEEP_S, exc.__cause__ or exc)

    async def sweep(self) -> list[str]:
        """End the runs this host owns that none of its tasks holds; their ids.

        A run whose close could not write its end gets the outcome it was closing with; any other is
        failed with `host.run_lost`. Runs that are executing, or being admitted, are never touched.
        """
        remembered = set(self._unfinished)  # before the read: a close may fail while this sweep waits
        owned = await self._stores.runs.active_on(self.host_id)
        ended: list[str] = []
        for run_id in owned:
            if run_id in self._active or run_id in self._admitting:
                continue
            journal, outcome = self._unfinished.get(run_id, (None, RunOutcome(RunStatus.FAILED, LOST)))
            try:
                if journal is not None:
                    outcome = await self._end_journal(run_id, journal, outcome)
                run = await self._stores.runs.finish(
                    run_id, outcome.status, error=outcome.error, usage=outcome.usage or None
                )
            except Exception as exc:
                logger.warning("run %s: the sweeper could not end it yet: %s", run_id, exc.__cause__ or exc)
                continue
            self._unfinished.pop(run_id, None)
            ended.append(run_id)
            logger.warning(
                "run %s had no executor on this host; the sweeper ended it %s%s",
                run_id,
                run.status,
                f" ({run.error.code})" if run.error else "",
            )
        for run_id in remembered - set(owned):
            self._unfinished.pop(run_id, None)  # no longer active: ended by someone else meanwhile
        if ended:
            self._conversation_signal.notify()  # queued runs of their conversations may start now
        return ended

    async def _sweep_grants_forever(self) -> None:
        while True:
            await anyio.sleep(GRANT_SWEEP_S)
            try:
                await self.sweep_grants()
            except Exception:
                logger.exception("the inspection grant sweep failed; retrying in %g s", GRANT_SWEEP_S)

    async def sweep_grants(self) -> list[str]:
        """Close the inspection grants past their deadline (their tokens already stopped working); their ids."""
        ended = await end_expired(self._stores)
        for run in ended:
            await self._ended(run.run_id, run)
        return [run.run_id for run in ended]

    # -- reading ---------------------------------------------------------------------------------------

    async def wait(self, run_id: str) -> Run:
        """Wait until the run is terminal (the latest ends of this process are answered from memory)."""
        feed = self._feeds.get(run_id)
        if feed is not None:
            # Active here: its feed is closed, with the run as it ended, once its end is written.
            while not feed.closed:
                await Signal.wait(feed.signal.ticket(), LOCAL_RECHECK_S)
        if (recent := self._recent.get(run_id)) is not None:
            return recent
        with self._remote.watch(run_id) as signal:  # another host's run (or one whose end was not recorded)
            while True:
                ticket = signal.ticket()
                run = await self._stores.runs.get(run_id)
                if run.status.is_terminal:
                    return run
                await Signal.wait(ticket, self._poll_s(QUEUE_POLL_S))

    async def results(self, run_id: str, *, after: int = 0) -> AsyncIterator[StoredResult]:
        """Every persisted result of the run after host sequence `after`, live, until the run ends.

        A run active on this process is followed in memory (its `ResultFeed`: persist, then publish),
        with no reads unless the reader is further behind than the feed keeps; any other run (another
        replica's, or one that has ended) by reading the store, polling while it is active.
        """
        feed = self._feeds.get(run_id)
        if feed is not None:
            async for item in self._follow(feed, run_id, after):
                after = item.seq
                yield item
            if feed.run is not None and feed.run.status.is_terminal:
                return
            # Its end could not be recorded: follow the store until the sweeper records it.
        else:
            await self._stores.runs.get(run_id)  # RunNotFoundError for unknown ids
        with self._remote.watch(run_id) as signal:
            while True:
                ticket = signal.ticket()  # before reading: another process's wake-up after it sets it
                batch = await self._stores.results.list(run_id, after=after, limit=RESULTS_PAGE)
                for item in batch:
                    after = item.seq
                    yield item
                if batch:
                    continue
                run = await self._stores.runs.get(run_id)
                if run.status.is_terminal:
                    for item in await self._stores.results.list(run_id, after=after, limit=RESULTS_PAGE):
                        after = item.seq
                        yield item
                    return
                await Signal.wait(ticket, self._poll_s(QUEUE_POLL_S))

    async def _follow(self, feed: ResultFeed, run_id: str, after: int) -> AsyncIterator[StoredResult]:
        """The results of a run active here after `after`, from its feed, until its end is written."""
        while True:
            ticket = feed.signal.ticket()  # before reading: a publish after this sets it
            closed = feed.closed
            batch = feed.after(after)
            if batch is None:  # behind what the feed keeps: catch up from the store
                batch = await self._stores.results.list(run_id, after=after, limit=RESULTS_PAGE)
            for item in batch:
                after = item.seq
                yield item
            if batch:
                continue
            if closed:
                return
            await Signal.wait(ticket, LOCAL_RECHECK_S)


def _stored_trace(grant: RunGrant) -> dict[str, str] | None:
    """The ingest span's context as the run's admission stored it, else None (the current span)."""
    if grant.traceparent is None:
        return None
    trace = {tracing.TRACEPARENT: grant.traceparent}
    if grant.tracestate is not None:
        trace[tracing.TRACESTATE] = grant.tracestate
    return trace


def _trace_end(run_span: tracing.Span, ended: RunOutcome) -> None:
    status = str(ended.status)
    tracing.event(run_span, "ended", {tracing.RUN_STATUS: status})
    tracing.annotate(run_span, {tracing.RUN_STATUS: status})
    if ended.status is RunStatus.FAILED:
        tracing.fail(run_span, ended.error.code if ended.error else "failed")
    elif ended.error is not None:
        tracing.annotate(run_span, {tracing.ERROR_TYPE: ended.error.code})


def _conversation(conversation_id: str | None) -> dict[str, str]:
    return {} if conversation_id is None else {tracing.CONVERSATION_ID: conversation_id}


def _trace_binding(
    start_ns: int,
    event: AgentEventEnvelope,
    binding: AgentBinding | None,
    run_id: str | None,
    error: str | None,
) -> None:
    """The binding step as a finished child of the ingest span, once the run it chose is known."""
    if not tracing.enabled():
        return
    attributes: dict[str, str | int | float | bool] = {tracing.EVENT_TYPE: event.event_type}
    if binding is not None:
        attributes[tracing.AGENT_NAME] = binding.agent.id
        attributes[tracing.BINDING_ID] = binding.binding_id
    if run_id is not None:
        attributes[tracing.RUN_ID] = run_id
    tracing.record("mcphost.binding", start_ns=start_ns, attributes=attributes, error_type=error)


def _host_failure(run_id: str, exc: Exception) -> RunOutcome:
    """The outcome of a run the host itself failed: a code and a short message, the detail logged."""
    storage = find_error(exc, STORAGE_ERRORS)
    if storage is not None:
        logger.warning("run %s failed on storage: %s", run_id, storage.__cause__ or storage.message)
        return RunOutcome.failed(storage.code, storage.message)
    logger.exception("run %s failed inside the host", run_id)
    return RunOutcome.failed("runtime_error", HOST_FAILED)


def _log_terminal_retry(run_id: str, state: RetryCallState) -> None:
    failure = state.outcome.exception() if state.outcome is not None else None
    logger.warning(
        "run %s: could not record its end (attempt %d); retrying: %s",
        run_id,
        state.attempt_number,
        getattr(failure, "__cause__", None) or failure,
    )
