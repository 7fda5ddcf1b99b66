"""The host's side of a remote run: queue it for a runtime, feed what that runtime posts into the run's
result stream, requeue it when the runtime's lease lapses, forward cancel.

Owns `RemoteRuns` (one per host: the lease, the in-process wake-ups of claimers and of executors) and
`RemoteExecution`, which the orchestrator calls exactly as it calls a plugin process
(`run(runner_name, ctx, results) -> status`, `cancel(run_id, reason) -> bool`), so the run state machine,
admission, per-conversation concurrency, deadline and the journal are the same for local and remote
runs. Does not own the queue's SQL (`stores/dispatch.py`), the runtime protocol's routes
(`api/_runtime.py`) or the runtime itself (`daemon.py`).

Invariants:
- The queued context has no token: a claim gets the claim's fenced MCP token (`fence.py`), so a
  runtime whose lease lapsed can neither post results nor call the run's MCP server.
- Results reach the journal in the order the runtime numbered them, each once: the executor reads the
  current fence's results after the last one it forwarded (deleting forwarded ones every
  `FORGET_EVERY`, and all of them with the queue row when the run ends). The runner's
  own `sequence` numbers continue across attempts (attempt N+1's are shifted past attempt N's), so a
  requeued run's results are not taken for duplicates.
- A lease that lapsed is handled by the run's executor, conditionally on the fence it saw: `requeue`
  (the default `on_lost`) puts it back in the queue with a new fence, `fail` fails the run
  (`runner.crashed`, naming the runtime). Never two runtimes at once: the old fence is refused.
- A run still queued a second before its deadline fails with a message naming its selector.
- Whatever way `run` ends, the queue row and its results are deleted (shielded, bounded): a runtime's
  later posts are refused `not_held`.
"""

from __future__ import annotations

import logging
import time

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from mcphost.context import TOKEN_ENV
from mcphost.errors import PluginError
from mcphost.feed import RunSignals, Signal
from mcphost.grants import hash_token
from mcphost.models import AgentConfig, RuntimePlacement
from mcphost.plugins.process import RawResult, RunAnswerStatus
from mcphost.protocol import AgentRunContext, RunProjection
from mcphost.stores import Stores
from mcphost.stores.dispatch import VIEW_LIMIT, DispatchView, QueuedRun, eligible

logger = logging.getLogger(__name__)

POLL_S = 0.25
"""How often an executor looks at its run's queue row when no post in this process woke it (posts
that reach another replica, lease expiry), while few runs wait here."""
POLL_BUDGET = 8
POLL_MAX_S = 1.0
"""With more than `POLL_BUDGET` executors waiting in this process, each looks less often (at most
about `POLL_BUDGET / POLL_S` looks a second in all, each at least every `POLL_MAX_S`): at 32 runs in
flight, a look every 0.25 s each was most of the host's CPU. Posts that reach this process still wake
their executor at once."""
QUEUE_MARGIN_S = 1.0
"""A run still queued this long before its deadline fails naming its selector (before the deadline
would fail it without saying why)."""
FORGET_EVERY = 256
"""Forwarded results are deleted from the queue once this many have piled up (a long run's stay
bounded); a run's last ones go with its queue row (`drop`), so a short run writes no deletes."""
DROP_BOUND_S = 5.0
DEFAULT_LEASE_S = 15.0


def without_token(ctx: AgentRunContext) -> AgentRunContext:
    """`ctx` with the run token taken out of its MCP headers and the bridge's environment."""
    mcp = ctx.context.mcp
    if mcp is None:
        return ctx
    headers = {k: v for k, v in mcp.headers.items() if k.lower() != "authorization"}
    env = {k: v for k, v in mcp.bridge.env.items() if k != TOKEN_ENV}
    bare = mcp.model_copy(update={"headers": headers, "bridge": mcp.bridge.model_copy(update={"env": env})})
    return ctx.model_copy(update={"context": ctx.context.model_copy(update={"mcp": bare})})


def _token(ctx: AgentRunContext) -> str:
    mcp = ctx.context.mcp
    header = mcp.headers.get("Authorization", "") if mcp is not None else ""
    scheme, _, token = header.partition(" ")
    assert scheme == "Bearer", "a run's context carries its token (`with_token`)"
    assert token, "a run's context carries its token (`with_token`)"
    return token


class RemoteRuns:
    """This host's remote executions: the lease runtimes hold runs under, and in-process wake-ups."""

    def __init__(self, stores: Stores, host_id: str, *, lease_s: float = DEFAULT_LEASE_S) -> None:
        self.stores = stores
        self.host_id = host_id
        self.lease_s = lease_s
        self.heartbeat_s = min(0.5, lease_s / 4)
        """Runtimes heartbeat this often: a cancel reaches them within about this long."""
        self.queued = Signal()
        """Woken when a run is queued (or requeued) here: claim long-polls here look again."""
        self._posted = RunSignals()
        self._executions: dict[str, RemoteExecution] = {}
        self.following = 0
        """Executors following a run in this process (they share the look budget)."""

    def poll_s(self) -> float:
        """How long an executor waits for a wake-up before it looks at its row again."""
        return min(POLL_MAX_S, POLL_S * max(1.0, self.following / POLL_BUDGET))

    def execution(
        self, placement: RuntimePlacement, runner_id: str, agent: AgentConfig | None = None
    ) -> RemoteExecution:
        """The executor of runs of `runner_id` placed by `placement` for `agent` (one per distinct
        triple): the queue row names the agent (its projection is built at the claim) and its workspace
        (only a runtime that has it claims the run)."""
        agent_id = agent.id if agent is not None else None
        workspace = agent.workspace if agent is not None else None
        key = f"{runner_id}\x00{placement.model_dump_json()}\x00{agent_id}\x00{workspace}"
        found = self._executions.get(key)
        if found is None:
            found = self._executions[key] = RemoteExecution(
                self, placement, runner_id, agent_id=agent_id, workspace=workspace
            )
        return found

    def posted(self, run_id: str) -> None:
        """A runtime posted results or an end for `run_id` through this process: wake its executor."""
        self._posted.notify(run_id)

    async def _no_runtime(self, placement: RuntimePlacement, runner_id: str) -> str:
        runtimes = await self.stores.runtimes.list()
        now = time.time()
        matching = [r for r in runtimes if eligible(r, placement.labels, runner_id)]
        alive = [r for r in matching if r.state == "online" and r.alive(self.lease_s, now)]
        return (
            f"No runtime with labels {placement.selector()!r} and runner {runner_id!r} claimed the run before "
            f"its deadline ({len(runtimes)} registered, {len(matching)} eligible, {len(alive)} of them online "
            "and not draining). Start one (`mcphost runtime --host URL --token TOKEN --labels "
            f"{placement.selector()}`) or change [agents.runtime] labels."
        )


class RemoteExecution:
    """Runs of one runner and placement, executed by runtimes; called by the orchestrator like a plugin."""

    def __init__(
        self,
        remote: RemoteRuns,
        placement: RuntimePlacement,
        runner_id: str,
        *,
        agent_id: str | None = None,
        workspace: str | None = None,
    ) -> None:
        self._remote = remote
        self.placement = placement
        self.runner_id = runner_id
        self.agent_id = agent_id
        self.workspace = workspace
        self.name = f"runtime[{placement.selector()}]"

    async def run(
        self,
        runner_name: str,
        ctx: AgentRunContext,
        results: MemoryObjectSendStream[RawResult],
        *,
        projection: RunProjection | None = None,
    ) -> RunAnswerStatus:
        """Queue the run, then push what its runtime posts into `results` until it posts its end.

        Raises:
            PluginError: no runtime claimed it before its deadline, or its runtime was lost and the
                agent's `on_lost` is `fail`.
        """
        del runner_name  # the queue names the full runner id
        del projection  # built when a runtime claims the run, for that runtime (`api/_runtime.py`)
        run_id = ctx.run_id
        dispatch = self._remote.stores.dispatch
        async with results:
            await dispatch.enqueue(
                QueuedRun(
                    run_id=run_id,
                    host_id=self._remote.host_id,
                    runner_id=self.runner_id,
                    selector=dict(self.placement.labels),
                    on_lost=self.placement.on_lost,
                    context=without_token(ctx).model_dump(mode="json"),
                    token_hash=hash_token(_token(ctx)),
                    deadline_at=ctx.runtime.deadline_at,
                    agent_id=self.agent_id,
                    workspace=self.workspace,
                )
            )
            self._remote.queued.notify()
            try:
                return await self._follow(run_id, ctx.runtime.deadline_at, results)
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(DROP_BOUND_S):
                    try:
                        await dispatch.drop(run_id)
                    except Exception:
                        logger.exception("run %s: could not delete its queue row", run_id)

    async def _follow(
        self, run_id: str, deadline_at: float, results: MemoryObjectSendStream[RawResult]
    ) -> RunAnswerStatus:
        remote = self._remote
        remote.following += 1
        try:
            return await self._follow_row(run_id, deadline_at, results)
        finally:
            remote.following -= 1

    async def _follow_row(
        self, run_id: str, deadline_at: float, results: MemoryObjectSendStream[RawResult]
    ) -> RunAnswerStatus:
        dispatch = self._remote.stores.dispatch
        fence = 0
        after = 0
        forgotten = 0
        """Results of this fence through this one are deleted from the queue (`drop` deletes the rest)."""
        base = 0
        """Runner sequences of this attempt are shifted by this (the highest forwarded before it)."""
        top = 0
        with self._remote._posted.watch(run_id) as signal:  # pyright: ignore[reportPrivateUsage]
            while True:
                ticket = signal.ticket()
                view = await dispatch.view(run_id, after)
                if view is None:
                    raise PluginError(
                        f"The queue row of run {run_id!r} disappeared while it ran remotely.",
                        details={"run_id": run_id},
                    )
                if view.fence != fence:  # claimed again (or requeued): a new attempt numbers from 1
                    fence, after, forgotten, base = view.fence, 0, 0, top
                    continue
                for item in view.results:
                    obj = item.result
                    sequence = obj.get("sequence")
                    if not item.dropped and isinstance(sequence, int) and not isinstance(sequence, bool):
                        shifted = sequence + base
                        obj = {**obj, "sequence": shifted}
                        top = max(top, shifted)
                    await results.send(RawResult(obj=obj, nbytes=item.nbytes, dropped=item.dropped))
                    after = item.seq
                if len(view.results) == VIEW_LIMIT:
                    continue  # there are more
                if after - forgotten >= FORGET_EVERY:
                    await dispatch.forget_through(run_id, fence, after)
                    forgotten = after
                if view.end_status is not None and after >= view.end_through:
                    return "failed" if view.end_status == "failed" else "completed"
                if await self._lapsed(run_id, view):
                    continue
                if view.state == "queued" and time.time() >= deadline_at - QUEUE_MARGIN_S:
                    message = await self._remote._no_runtime(self.placement, self.runner_id)  # pyright: ignore[reportPrivateUsage]
                    raise PluginError(message, details={"run_id": run_id, "selector": self.placement.labels})
                until_fail = deadline_at - QUEUE_MARGIN_S - time.time()
                poll_s = self._remote.poll_s()
                await Signal.wait(
                    ticket, max(0.0, min(poll_s, until_fail)) if view.state == "queued" else poll_s
                )

    async def _lapsed(self, run_id: str, view: DispatchView) -> bool:
        """Handle a claim whose lease lapsed (True: look again); False when it holds."""
        if view.state != "claimed" or view.lease_until > time.time():
            return False
        why = f"runtime {view.runtime_id} missed its heartbeats (fence {view.fence})"
        if self.placement.on_lost == "fail":
            await self._remote.stores.dispatch.lose(run_id, view.fence, why)
            raise PluginError(
                f"Run {run_id!r} was lost: {why}; the agent's [agents.runtime] on_lost is 'fail'.",
                details={"run_id": run_id, "runtime_id": view.runtime_id, "fence": view.fence},
            )
        if await self._remote.stores.dispatch.requeue(run_id, view.fence, why):
            logger.warning("run %s: %s; queued again for another runtime", run_id, why)
            self._remote.queued.notify()
        return True

    async def cancel(self, run_id: str, reason: str = "cancelled") -> bool:
        """Ask the run's runtime to cancel it: True when one holds it (it hears of it within a heartbeat),
        False when it is only queued (it will not be claimed now; nothing to let finish)."""
        try:
            return await self._remote.stores.dispatch.cancel(run_id, reason)
        except Exception:
            logger.exception("run %s: could not record its cancel for the runtime", run_id)
            return False
