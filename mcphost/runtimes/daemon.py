"""`mcphost runtime`: the worker that registers with a host, heartbeats, claims runs and executes them
with the host's own plugin code (`plugins/process.py`), posting their results back in order.

Owns the runtime side of the runtime protocol (docs/protocol.md §12): registration with its capabilities,
the heartbeat loop (leases, cancels, lost runs), the claim loop (long polls while a slot is free), one
task per claimed run, and the per-run outbox that survives the host being unreachable. Does not own the
plugins' lives (`PluginSupervisor`) or anything of the host's database: it speaks HTTP only.

Invariants:
- A run's results are numbered 1.. per claim and posted in that order, each batch retried (back-off with
  jitter, capped at `MAX_BACKOFF_S`) until the host stores it; the end is posted only after every result
  (in the request of the last batch when the runner answered before it was sent, else on its own).
  While the host is unreachable they wait in memory and are delivered once, in order, when it answers.
- A run the host says this runtime no longer holds (a 409 `not_held` / `stale_fence` / `lease_expired`,
  or `lost` in a heartbeat answer) is cancelled here and its unsent results are dropped: the host gave it
  to another runtime, so nothing of this attempt may reach it.
- A claimed run's runner starts only after a heartbeat naming the claim was not answered `lost`: a
  claim's answer held up by a network outage past its lease never starts a runner here.
- A heartbeat is abandoned after a quarter of the lease and retried at most `max(heartbeat_s, lease/4)`
  later, so a link back within the lease renews the leases before they lapse.
- A cancel in a heartbeat or results answer is sent to the runner once (`runner/cancel`).
- A run's output (its plugin's stderr while the run is active, bounded by `RunOutput`) is posted once,
  after its last result and before its end; a refusal of it other than losing the run is logged and
  does not hold the end back.
- A 401 (the runtime was removed) stops the daemon with that message; a 403 (disabled) keeps it
  heartbeating slowly until an operator enables it again.
"""

from __future__ import annotations

import logging
import math
import platform
import random
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import httpx2
from pydantic import BaseModel, Field, ValidationError

from mcphost import __version__
from mcphost.common.periodic import Periodic
from mcphost.errors import HostError, UnauthorizedError
from mcphost.plugins.process import PluginProcess, PluginSpec, PluginSupervisor, RawResult
from mcphost.plugins.registry import RunnerRegistry
from mcphost.protocol import AgentRunContext
from mcphost.runtimes.output import RunOutput
from mcphost.runtimes.wire import (
    MAX_BATCH_RESULTS,
    RECONNECT_MAX_S,
    Capabilities,
    ClaimAnswer,
    ClaimedRun,
    EndAnswer,
    Harness,
    HeartbeatAnswer,
    OutputAnswer,
    RegisterAnswer,
    ResultsAnswer,
)

logger = logging.getLogger(__name__)

MAX_BACKOFF_S = RECONNECT_MAX_S
"""The longest wait between two attempts to reach the host (the protocol's bound)."""
CLAIM_WAIT_S = 10.0
COALESCE_TURNS = 3
"""Event-loop turns a batch waits for results already read from the runner (no timer: no added delay
when nothing else is ready)."""
END_WAIT_S = 0.05
"""A batch ending in the runner's terminal result waits this long at most for its `runner/run` answer,
which follows it at once, so the end goes in the same request."""
TERMINAL_TYPES = frozenset({"run.completed", "run.failed"})
BATCH_BYTES = 4 * 1024 * 1024
"""A results batch stops growing past this many bytes of results (the host takes 8 MiB)."""
HARNESSES = ("claude", "codex")


class RefusedError(Exception):
    """The host answered with an error body (4xx): it will not change on a retry."""

    def __init__(self, status: int, code: str, reason: str | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.reason = reason
        self.message = message


def backoff(attempt: int) -> float:
    """Exponential back-off with full jitter: 0..min(MAX_BACKOFF_S, 0.2 * 2**attempt) seconds."""
    return random.uniform(0, min(MAX_BACKOFF_S, 0.2 * 2 ** min(attempt, 10)))


def harness_version(command: str) -> Harness:
    """The version `command --version` prints, or none when it is not installed or does not answer."""
    found = shutil.which(command) or shutil.which(command, path=str(Path("node_modules/.bin").resolve()))
    if found is None:
        return Harness(version=None)
    try:
        done = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return Harness(version=None)
    line = (done.stdout or done.stderr).strip().splitlines()
    return Harness(version=line[0][:200] if line else None)


def capabilities(plugins: Sequence[PluginProcess]) -> Capabilities:
    runners = sorted({m.id for p in plugins for m in p.manifests})
    return Capabilities(
        runners=runners,
        harnesses={name: harness_version(name) for name in HARNESSES},
        os=platform.platform()[:200],
        python=platform.python_version(),
        version=__version__,
    )


@dataclass(eq=False)
class _LocalRun:
    claim: ClaimedRun
    plugin: PluginProcess
    runner_name: str
    pending: list[RawResult] = field(default_factory=list[RawResult])
    sent: int = 0
    """Results the host stored (the next batch starts at sent + 1)."""
    produced: int = 0
    status: str | None = None
    """The runner's answer, once `runner/run` returned (`completed`/`failed`)."""
    cancelled: bool = False
    lost: bool = False
    output: RunOutput = field(default_factory=RunOutput)
    output_sent: bool = False
    changed: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    def wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()


class RuntimeDaemon:
    """One runtime: `serve()` runs until cancelled, or raises `UnauthorizedError` when removed."""

    def __init__(
        self,
        *,
        host: str,
        token: str,
        specs: Sequence[PluginSpec],
        slots: int = 1,
        labels: Mapping[str, str] | None = None,
        workdir: Path | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self._host = host.rstrip("/")
        self._token = token
        self._specs = [replace(s, cwd=s.cwd or workdir) for s in specs]
        self.slots = slots
        self.labels = dict(labels or {})
        self._transport = transport
        self._runs: dict[str, _LocalRun] = {}
        self._slot_freed = anyio.Event()
        self.heartbeat_s = 1.0
        self.lease_s = 15.0
        """The host's lease (from its answers): a heartbeat that takes a quarter of it is abandoned."""
        self.state = "online"
        self.registered: RegisterAnswer | None = None
        self._heartbeats: Periodic | None = None
        """The heartbeat loop while `serve` runs."""

    # -- HTTP ------------------------------------------------------------------------------------------

    async def _post(
        self,
        client: httpx2.AsyncClient,
        path: str,
        body: Mapping[str, Any],
        answer: type[Any],
        *,
        timeout: float | None = None,
    ) -> Any:
        response = await client.post(
            f"/v1/runtime/{path}",
            json=dict(body),
            timeout=httpx2.USE_CLIENT_DEFAULT if timeout is None else timeout,
        )
        if response.status_code >= 400:
            try:
                error = _ErrorAnswer.model_validate_json(response.content).error
            except ValidationError:
                error = _ErrorBody(message=response.text[:500])
            reason = error.details.get("reason")
            refused = RefusedError(
                response.status_code,
                error.code,
                reason if isinstance(reason, str) else None,
                error.message,
            )
            if response.status_code >= 500:
                raise httpx2.TransportError(f"host answered {response.status_code}: {refused.message}")
            raise refused
        try:
            parsed: BaseModel = answer.model_validate(response.json())
        except (ValueError, ValidationError) as exc:
            raise httpx2.TransportError(
                f"host answered something that is not a {answer.__name__}: {exc}"
            ) from exc
        return parsed

    async def _retrying(
        self, client: httpx2.AsyncClient, path: str, body: Mapping[str, Any], answer: type[Any]
    ) -> Any:
        """POST until the host answers (a refusal raises); transport failures are retried with back-off."""
        attempt = 0
        while True:
            try:
                return await self._post(client, path, body, answer)
            except httpx2.TransportError as exc:
                logger.warning("host %s unreachable (%s); retrying", self._host, exc)
                await anyio.sleep(backoff(attempt))
                attempt += 1

    # -- lifetime --------------------------------------------------------------------------------------

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with (
            PluginSupervisor(self._specs) as supervisor,
            httpx2.AsyncClient(
                base_url=self._host,
                headers={"Authorization": f"Bearer {self._token}"},
                timeout=httpx2.Timeout(10, read=CLAIM_WAIT_S + 10),
                transport=self._transport,
            ) as client,
        ):
            registry = RunnerRegistry(supervisor.plugins, supervisor.start)
            caps = await anyio.to_thread.run_sync(capabilities, supervisor.plugins)
            await self._register(client, caps)
            task_status.started()
            async with anyio.create_task_group() as tg:
                self._heartbeats = Periodic(
                    "the runtime heartbeat",
                    partial(self._heartbeat, client, caps),
                    interval_s=self.heartbeat_s,
                    retry_s=0.2,
                    max_backoff_s=min(MAX_BACKOFF_S, max(self.heartbeat_s, self.lease_s / 4)),
                    fatal=(UnauthorizedError,),
                )
                tg.start_soon(self._heartbeats.run)
                await self._claims(client, registry, tg)

    async def _register(self, client: httpx2.AsyncClient, caps: Capabilities) -> None:
        body = {"capabilities": caps.model_dump(mode="json"), "slots": self.slots, "labels": self.labels}
        answer: RegisterAnswer = await self._retrying(client, "register", body, RegisterAnswer)
        self.registered = answer
        self.heartbeat_s = answer.heartbeat_s
        self.lease_s = answer.lease_s
        self.state = answer.state
        logger.info("registered as runtime %s (%s), %d slot(s)", answer.name, answer.runtime_id, self.slots)

    async def _heartbeat(self, client: httpx2.AsyncClient, caps: Capabilities) -> float:
        """One heartbeat (`Periodic`, every `heartbeat_s`): the runs held, and what the host says of them.

        An unreachable host is retried with the loop's back-off, and told who we are again once it
        answers (it may have restarted); a refusal waits `MAX_BACKOFF_S`; a 401 ends the daemon.
        """
        held = [{"run_id": r.claim.run_id, "fence": r.claim.fence} for r in self._runs.values() if not r.lost]
        try:
            answer: HeartbeatAnswer = await self._post(
                client, "heartbeat", {"runs": held}, HeartbeatAnswer, timeout=self._beat_timeout()
            )
        except RefusedError as exc:
            if exc.status == 401:
                raise UnauthorizedError(exc.message) from None
            logger.warning("heartbeat refused: %s", exc.message)
            return MAX_BACKOFF_S
        if self._heartbeats is not None and self._heartbeats.failing:  # the host may have restarted
            await self._register(client, caps)
        self.state = answer.state
        self.heartbeat_s = answer.heartbeat_s
        self.lease_s = answer.lease_s
        for entry in answer.runs:
            run = self._runs.get(entry.run_id)
            if run is not None and entry.cancel is not None:
                await self._cancel(run, entry.cancel)
        for run_id in answer.lost:
            run = self._runs.get(run_id)
            if run is not None:
                await self._lose(run, "the host no longer gives it to this runtime")
        return self.heartbeat_s

    def _beat_timeout(self) -> float:
        """How long a heartbeat may take: a quarter of the lease (at least 1 s). One sent into a link that
        went down waits on TCP's retransmissions, which after an outage of a few seconds come back only
        after about twice as long: abandoned sooner, the next heartbeat goes out on a new connection as
        soon as the link is back, and the leases hold through any outage shorter than them."""
        return max(1.0, self.lease_s / 4)

    async def _claims(
        self, client: httpx2.AsyncClient, registry: RunnerRegistry[PluginProcess], tg: anyio.abc.TaskGroup
    ) -> None:
        failures = 0
        while True:
            if len(self._runs) >= self.slots or self.state != "online":
                freed = self._slot_freed
                with anyio.move_on_after(self.heartbeat_s):
                    await freed.wait()
                continue
            try:
                answer: ClaimAnswer = await self._post(client, "claim", {"wait_s": CLAIM_WAIT_S}, ClaimAnswer)
            except httpx2.TransportError as exc:
                failures += 1
                logger.warning("claim failed (%s); retrying", exc)
                await anyio.sleep(backoff(failures))
                continue
            except RefusedError as exc:
                if exc.status == 401:
                    raise UnauthorizedError(exc.message) from None
                logger.warning("claim refused: %s", exc.message)
                await anyio.sleep(MAX_BACKOFF_S)
                continue
            failures = 0
            self.state = answer.state
            if answer.run is None:
                continue
            try:
                found = registry.get(answer.run.runner_id)
            except HostError as exc:
                logger.error("claimed run %s of an unknown runner: %s", answer.run.run_id, exc.message)
                continue  # its lease lapses and another runtime gets it
            if not await self._confirmed(client, answer.run):
                continue
            run = _LocalRun(answer.run, found.plugin, answer.run.runner_id.rsplit("/", 1)[1])
            self._runs[run.claim.run_id] = run
            tg.start_soon(self._execute, client, run)

    async def _confirmed(self, client: httpx2.AsyncClient, claim: ClaimedRun) -> bool:
        """Whether the host still gives `claim` to this runtime: one heartbeat naming it, before its runner
        starts. A claim's answer can arrive after its lease lapsed (held up in a network outage and
        delivered when the link came back): that run went back to the queue, and nothing of it may start
        here. A host that does not answer says nothing either way: the run starts, and the next heartbeat
        or post settles it."""
        body = {"runs": [{"run_id": claim.run_id, "fence": claim.fence}]}
        try:
            answer: HeartbeatAnswer = await self._post(
                client, "heartbeat", body, HeartbeatAnswer, timeout=self._beat_timeout()
            )
        except httpx2.TransportError:
            return True
        except RefusedError as exc:
            if exc.status == 401:
                raise UnauthorizedError(exc.message) from None
            return True
        if claim.run_id in answer.lost:
            logger.warning(
                "run %s: its claim (fence %d) lapsed before it arrived; not started",
                claim.run_id,
                claim.fence,
            )
            return False
        return True

    # -- one run ---------------------------------------------------------------------------------------

    async def _execute(self, client: httpx2.AsyncClient, run: _LocalRun) -> None:
        run_id = run.claim.run_id
        logger.info("run %s: claimed (fence %d, attempt %d)", run_id, run.claim.fence, run.claim.attempt)
        try:
            ctx = AgentRunContext.model_validate(run.claim.context)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._call_runner, run, ctx)
                await self._post_all(client, run)
                tg.cancel_scope.cancel()
        except Exception:
            logger.exception("run %s failed on this runtime", run_id)
        finally:
            self._runs.pop(run_id, None)
            self._slot_freed.set()
            self._slot_freed = anyio.Event()

    async def _call_runner(self, run: _LocalRun, ctx: AgentRunContext) -> None:
        send, receive = anyio.create_memory_object_stream[RawResult](math.inf)

        async def collect() -> None:
            async with receive:
                async for item in receive:
                    if not run.lost:
                        run.pending.append(item)
                        run.produced += 1
                        run.wake()

        status = "failed"
        with run.scope, run.plugin.watch_output(run.output.add):
            async with anyio.create_task_group() as tg:
                tg.start_soon(collect)
                try:
                    status = await run.plugin.run(run.runner_name, ctx, send, projection=run.claim.projection)
                except HostError as exc:
                    logger.error("run %s: %s", run.claim.run_id, exc.message)
        run.status = status
        run.wake()

    async def _post_all(self, client: httpx2.AsyncClient, run: _LocalRun) -> None:
        """Post the run's results in order, then its end (with the last results when the runner has
        answered by the time they are sent); back when done or lost."""
        attempt = 0
        run_id = run.claim.run_id
        while not run.lost:
            changed = run.changed
            ending = False
            if run.pending and run.status is None:
                await _coalesce(run)
            if run.pending:
                batch = _batch(run.pending)
                body: dict[str, object] = {
                    "fence": run.claim.fence,
                    "first_seq": run.sent + 1,
                    "results": [
                        {"result": r.obj, "dropped": True, "nbytes": r.nbytes}
                        if r.dropped
                        else {"result": r.obj}
                        for r in batch
                    ],
                }
                # The runner has answered, this batch holds its last results and its output went before
                # them (or it wrote none): the end goes with them.
                ending = (
                    run.status is not None
                    and len(batch) == len(run.pending)
                    and (run.output_sent or run.output.empty)
                )
                if ending:
                    body["end"] = run.status
                path, answer_type = f"runs/{run_id}/results", ResultsAnswer
            elif run.status is not None and not run.output_sent:
                if await self._post_output(client, run):
                    attempt += 1
                    await anyio.sleep(backoff(attempt))
                continue
            elif run.status is not None:
                body = {"fence": run.claim.fence, "status": run.status, "last_seq": run.sent}
                path, answer_type = f"runs/{run_id}/end", None
            else:
                await changed.wait()
                continue
            try:
                if answer_type is None:
                    await self._post(client, path, body, EndAnswer)
                    logger.info("run %s: ended %s after %d result(s)", run_id, run.status, run.sent)
                    return
                answer: ResultsAnswer = await self._post(client, path, body, answer_type)
            except httpx2.TransportError as exc:
                attempt += 1
                logger.warning("run %s: results not delivered yet (%s); kept, retrying", run_id, exc)
                await anyio.sleep(backoff(attempt))
                continue
            except RefusedError as exc:
                if exc.status == 409 and exc.reason in ("not_held", "stale_fence", "lease_expired", "ended"):
                    await self._lose(run, exc.message)
                    return
                logger.error("run %s: the host refused its results: %s", run_id, exc.message)
                await self._lose(run, exc.message)
                return
            attempt = 0
            stored = answer.accepted_through - run.sent
            del run.pending[: max(stored, 0)]
            run.sent = answer.accepted_through
            if ending and not run.pending:
                logger.info("run %s: ended %s after %d result(s)", run_id, run.status, run.sent)
                return
            if answer.cancel is not None:
                await self._cancel(run, answer.cancel)

    async def _post_output(self, client: httpx2.AsyncClient, run: _LocalRun) -> bool:
        """Post the run's output (once; nothing when it wrote none). True: the host was unreachable,
        try again after a back-off."""
        run_id = run.claim.run_id
        if run.output.empty:
            run.output_sent = True
            return False
        try:
            answer: OutputAnswer = await self._post(
                client, f"runs/{run_id}/output", run.output.body(run.claim.fence), OutputAnswer
            )
        except httpx2.TransportError as exc:
            logger.warning("run %s: output not delivered yet (%s); kept, retrying", run_id, exc)
            return True
        except RefusedError as exc:
            if exc.status == 409:
                await self._lose(run, exc.message)
            else:
                logger.error("run %s: the host refused its output: %s", run_id, exc.message)
            run.output_sent = True
            return False
        logger.info("run %s: output kept as %s (%d bytes)", run_id, answer.artifact_id, answer.size)
        run.output_sent = True
        return False

    async def _cancel(self, run: _LocalRun, reason: str) -> None:
        if run.cancelled:
            return
        run.cancelled = True
        logger.info("run %s: cancel (%s)", run.claim.run_id, reason)
        await run.plugin.cancel(run.claim.run_id, reason)

    async def _lose(self, run: _LocalRun, why: str) -> None:
        """The host gave the run away: stop it here, drop what it did not deliver."""
        if run.lost:
            return
        logger.warning("run %s: no longer held (%s); stopping it", run.claim.run_id, why)
        run.lost = True
        run.pending.clear()
        await run.plugin.cancel(run.claim.run_id, "the runtime lost its claim")
        run.scope.cancel()
        run.wake()


class _ErrorBody(BaseModel):
    """The `error` object of a refusal the host answered (the API's error body)."""

    code: str = ""
    message: str = ""
    details: dict[str, object] = Field(default_factory=dict[str, object])


class _ErrorAnswer(BaseModel):
    error: _ErrorBody


async def _coalesce(run: _LocalRun) -> None:
    """Let results already on their way join the next batch, and the runner's answer too once its
    terminal result is among them: a run's results and end then take one request instead of several."""
    for _ in range(COALESCE_TURNS):  # lines read together pass through the reader and the collector
        await anyio.lowlevel.checkpoint()
    if not run.pending or run.pending[-1].obj.get("type") not in TERMINAL_TYPES:
        return
    with anyio.move_on_after(END_WAIT_S):
        while run.status is None and not run.lost:
            await run.changed.wait()


def _batch(pending: list[RawResult]) -> list[RawResult]:
    batch: list[RawResult] = []
    size = 0
    for item in pending[:MAX_BATCH_RESULTS]:
        if batch and size + item.nbytes > BATCH_BYTES:
            break
        batch.append(item)
        size += item.nbytes
    return batch


async def run_daemon(daemon: RuntimeDaemon) -> None:
    """Serve until interrupted; a removed runtime stops with the host's message."""
    started = time.monotonic()
    try:
        await daemon.serve()
    finally:
        logger.info("runtime stopped after %.0f s", time.monotonic() - started)
