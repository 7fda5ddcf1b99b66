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
  current fence's results after the last one it forwarded, and the transaction that journals a batch
  deletes the rows it came from (`RawResult.source`). The runner's own `sequence` numbers continue
  across attempts (attempt N+1's are shifted past attempt N's; the shift is kept with the requeue), so a
  requeued run's results are not taken for duplicates.
- A remote run outlives the host executing it: a host that adopts it (`RemoteRuns.adopt`, from
  `hosts.recover_abandoned`) follows its queue row instead of queueing it again, from the first row not
  journaled, with the shift of its current attempt. A claim's lease is stretched to `ADOPT_GRACE_S`, so
  the runtime, retrying with back-off while no host answered, reaches the adopter and keeps its claim,
  its fenced MCP token (keyed by the grant's token hash, which adoption keeps) and the results it kept.
- A lease that lapsed is handled by the run's executor, conditionally on the fence it saw: `requeue`
  (the default `on_lost`) puts it back in the queue with a new fence, `fail` fails the run
  (`runner.crashed`, naming the runtime). Never two runtimes at once: the old fence is refused.
- A run still queued a second before its deadline fails with a message naming its selector.
- Whatever way `run` ends, the queue row and its results are deleted (shielded, bounded): a runtime's
  later posts are refused `not_held` — except when the host stops and releases the run
  (`RemoteRuns.release`): the row stays, the runtime keeps running it, and the next host adopts it.
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
from mcphost.runtimes.wire import RECONNECT_MAX_S
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
DROP_BOUND_S = 5.0
DEFAULT_LEASE_S = 15.0
ADOPT_GRACE_S = 3 * RECONNECT_MAX_S
"""A claimed run adopted from a host that died keeps its lease at least this long: a runtime retries at
least every `RECONNECT_MAX_S`, and its first heartbeat to the adopter renews the lease."""


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
        self._following: set[str] = set()
        """Runs an executor of this process follows (queued or claimed)."""
        self._released: set[str] = set()
        """Runs left to the next host (`release`): their executor keeps their queue row when cut off."""
        self._adopted: dict[str, int] = {}
        """Runs adopted from a host that died, to follow rather than queue: the highest runner
        sequence their journal holds."""

    def release(self, run_id: str) -> bool:
        """This host stops: `run_id`'s executor is about to be cut off; leave its queue row (its runtime
        keeps running it) for the next host to adopt. False when no executor here follows it."""
        if run_id not in self._following:
            return False
        self._released.add(run_id)
        return True

    def adopt(self, run_id: str, journaled: int) -> None:
        """The next `run` of `run_id` follows its queue row (adopted from a host that died) instead of
        queueing it; `journaled` is the highest runner sequence its journal holds."""
        self._adopted[run_id] = journaled

    def poll_s(self) -> float:
        """How long an executor waits for a wake-up before it looks at its row again."""
        return min(POLL_MAX_S, POLL_S * max(1.0, len(self._following) / POLL_BUDGET))

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
        journaled = self._remote._adopted.pop(run_id, None)  # pyright: ignore[reportPrivateUsage]
        async with results:
            fence = base = 0
            if journaled is None:
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
            else:
                adopted = await dispatch.adopt(run_id, self._remote.host_id, grace_s=ADOPT_GRACE_S)
                if adopted is None:
                    raise PluginError(
                        f"Run {run_id!r} was adopted from a host that stopped, but its queue row is gone.",
                        details={"run_id": run_id},
                    )
                fence, base = adopted.fence, adopted.shift
                logger.info("run %s: adopted at fence %d; following its runtime", run_id, fence)
            self._remote.queued.notify()
            following = self._remote._following  # pyright: ignore[reportPrivateUsage]
            released = self._remote._released  # pyright: ignore[reportPrivateUsage]
            following.add(run_id)
            try:
                return await self._follow(
                    run_id,
                    ctx.runtime.deadline_at,
                    results,
                    fence=fence,
                    base=base,
                    top=max(base, journaled or 0),
                )
            finally:
                following.discard(run_id)
                if run_id in released:
                    released.discard(run_id)
                    logger.info("run %s: left running on its runtime for the next host", run_id)
                else:
                    with anyio.CancelScope(shield=True), anyio.move_on_after(DROP_BOUND_S):
                        try:
                            await dispatch.drop(run_id)
                        except Exception:
                            logger.exception("run %s: could not delete its queue row", run_id)

    async def _follow(
        self,
        run_id: str,
        deadline_at: float,
        results: MemoryObjectSendStream[RawResult],
        *,
        fence: int,
        base: int,
        top: int,
    ) -> RunAnswerStatus:
        """Forward the results of the run's current attempt (`fence`) from its first row not journaled.
        `base`: the runner sequences of this attempt are shifted by it; `top`: the highest forwarded
        (or journaled) before, the shift of the next attempt."""
        dispatch = self._remote.stores.dispatch
        after = 0
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
                    fence, after, base = view.fence, 0, top
                    continue
                for item in view.results:
                    obj = item.result
                    sequence = obj.get("sequence")
                    if not item.dropped and isinstance(sequence, int) and not isinstance(sequence, bool):
                        shifted = sequence + base
                        obj = {**obj, "sequence": shifted}
                        top = max(top, shifted)
                    raw = RawResult(
                        obj=obj, nbytes=item.nbytes, dropped=item.dropped, source=(fence, item.seq)
                    )
                    await results.send(raw)
                    after = item.seq
                if len(view.results) == VIEW_LIMIT:
                    continue  # there are more
                if view.end_status is not None:  # every result before it is forwarded or journaled
                    return "failed" if view.end_status == "failed" else "completed"
                if await self._lapsed(run_id, view, top):
                    continue
                if view.state == "queued" and time.time() >= deadline_at - QUEUE_MARGIN_S:
                    message = await self._remote._no_runtime(self.placement, self.runner_id)  # pyright: ignore[reportPrivateUsage]
                    raise PluginError(message, details={"run_id": run_id, "selector": self.placement.labels})
                until_fail = deadline_at - QUEUE_MARGIN_S - time.time()
                poll_s = self._remote.poll_s()
                await Signal.wait(
                    ticket, max(0.0, min(poll_s, until_fail)) if view.state == "queued" else poll_s
                )

    async def _lapsed(self, run_id: str, view: DispatchView, top: int) -> bool:
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
        if await self._remote.stores.dispatch.requeue(run_id, view.fence, why, shift=top):
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
