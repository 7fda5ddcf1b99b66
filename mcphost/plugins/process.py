"""Plugin processes: spawn, JSON-RPC 2.0 over stdio, run multiplexing, restart and shutdown (PROTOCOL §8).

Owns the life of every configured plugin process and the wire between the host and it. It does not judge
results (the orchestrator validates them with `classify_result` and enforces the 1 MiB cap through
`RawResult.nbytes`), look runners up by id (`registry.py`) or pick the runner of an event (`bindings.py`).

Shape: `PluginSupervisor` is the owner you enter with `async with`; it starts one `PluginProcess.serve()`
loop per configured plugin with `await tg.start(...)`. `serve()` spawns the process, sends `initialize`,
registers the manifests it accepts (keeping the rejected ones with a reason), then serves runs until the
process exits or breaks, fails the runs that were in flight, backs off and spawns it again. One process
serves many concurrent runs: `run()` registers a route for its `run_id`, sends `runner/run` and waits for the
answer to that JSON-RPC id while the stdout pump routes every `runner/result` of the run into the caller's
stream, in the order the plugin wrote them.

The wire (bounded line reader, JSON-RPC connection, per-run routing) lives in `_wire.py` and the
process-group helpers in `mcphost.common.procgroup`.

Invariants:
- A plugin runs in its own process group with an allow-listed environment plus its configured `env`; the
  host's other variables (`MCPHOST_API_KEY`, cloud credentials …) never reach it.
- Stopping a process happens in one place (`PluginProcess._stop`), inside `CancelScope(shield=True)`, with
  every wait bounded: `shutdown` request → close stdin → wait → `procgroup.stop_group` (SIGTERM the group and
  the descendants that left it → wait → SIGKILL). The group is signalled even when the leader exited by
  itself, so no grandchild outlives its plugin, and the stop runs whether the loop ends by a crash, a
  supervisor exit or a cancelled host.
- The pumps never raise and never buffer more than `MAX_LINE_BYTES` (+ one read chunk) of a line. A line
  that is not JSON, not JSON-RPC, a response to an unknown id, a result for an unknown run, or an error
  response is a logged diagnostic (and counted in `PluginProcess.diagnostics`), never an exception in the pump.
- A line over `MAX_LINE_BYTES` is dropped unread. When the first 64 KiB name the `run_id` of an active run,
  that run receives `RawResult(obj={"run_id": ...}, nbytes=<line size>, dropped=True)`: its size is over
  every cap, so the orchestrator fails that run with `payload_too_large`; other runs are untouched. Without a
  recognisable active run id the line is only a diagnostic (it cannot be attributed safely).
- `run()` always ends: with the plugin's status, or with `PluginError` (`runner.crashed`) naming the plugin
  and what happened when the process carrying the run exits, stops reading, answers with an error, or
  leaves a liveness probe unanswered for `probe_timeout` (then it is stopped and restarted like a crash).
- A crash fails only the runs in flight on the process that died. `run()` called while the plugin is
  `starting` or `restarting` waits for the next process, for as long as the caller lets it (its deadline
  and cancel scope); while the plugin is `failed` (never initialized, or crash-looping:
  `PluginTimings.crash_loop_limit` ends within `crash_loop_window`) or `stopped` it raises at once with the
  reason, so one poison event cannot stall every conversation behind a plugin that keeps dying.
- Every result of a run reaches its stream before `run()` returns; `run()` closes the stream when it ends.
  The pump waits while a caller's stream is full (backpressure to the plugin), so callers must keep
  draining or close their receiving end — a closed end detaches the run, it never blocks the pump.
- Writes to stdin are serialized by one `anyio.Lock`; a line is written whole.
- The plugin's stderr is logged line by line to `mcphost.plugins` with `extra={"plugin": name}`, and
  handed to the listeners `watch_output` registered (a runtime keeps it as its runs' output).

Size: past 600 lines because one plugin process's life — spawn, `initialize`, serving runs, liveness
probes, restart with back-off and bounded shutdown — is one state machine; the wire (`_wire.py`) and the
process-group handling (`mcphost.common.procgroup`) are already out of it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Collection, Generator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectSendStream
from pydantic import ValidationError

from mcphost import __version__
from mcphost.common.procgroup import (
    StopTimings,
    describe_exit,
    release_process,
    spawn,
    stop_group,
    strays_of,
    wait_exit,
)
from mcphost.common.validation import describe
from mcphost.errors import PluginError, RunnerNotFoundError
from mcphost.plugins._startup import import_failure
from mcphost.plugins._wire import (
    BrokenConnectionError,
    Connection,
    PluginAnsweredError,
    RawResult,
    RunRoute,
)
from mcphost.protocol import (
    METHOD_CANCEL,
    METHOD_INITIALIZE,
    METHOD_RUN,
    METHOD_SHUTDOWN,
    PROTOCOL_VERSION,
    AgentRunContext,
    AgentRunnerManifest,
    CancelParams,
    HostInfo,
    InitializeParams,
    InitializeResult,
    JSONObject,
    PluginInfo,
    RunParams,
    RunProjection,
    RunResponse,
    parse_runner_id,
)
from mcphost.protocol.stdio import RunAnswerStatus

logger = logging.getLogger("mcphost.plugins")

PluginState = Literal["idle", "starting", "running", "restarting", "failed", "stopped"]
"""`idle`: not started, because no runner the host needs so far can be its (`PluginSupervisor`); it is
started on the first use of one of its runners. `restarting`: a process that served runs ended (or a start after it failed) and a new one is due after
a backoff; new runs wait for it. `failed`: no process is coming soon, so new runs fail at once with
`last_error`: the plugin never got through `initialize`, or it crash-looped (`crash_loop_limit` ends
within `crash_loop_window`); it is still retried (backoff, or `crash_loop_retry` after a crash loop).
`stopped` only once the supervisor has shut the plugin down."""


_ENV_SYSTEM = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TEMP",
    "TMP",
)
_ENV_RUNTIME = ("PYTHONPATH", "VIRTUAL_ENV", "SYSTEMROOT", "SYSTEMDRIVE", "COMSPEC", "PATHEXT")
_ENV_ALLOWED = frozenset((*_ENV_SYSTEM, *_ENV_RUNTIME))
"""Host variables a plugin inherits (plus `LC_*`); everything else, secrets included, stays behind."""
_ENV_ALLOWED_PREFIXES = ("LC_", "OTEL_")
"""`OTEL_*` (but `*_HEADERS`, which may carry a collector's credentials: set those in `[[plugins]] env`) so
that runners and their harness CLIs export telemetry as the host does."""

_CANCEL_ON_ABANDON_TIMEOUT = 0.5
BROKEN_BEFORE_INITIALIZE = "broken before initialize"
"""The failure recorded when a process broke before answering `initialize`."""
_STDERR_SETTLE_TIMEOUT = 0.5


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """One configured plugin (`[[plugins]]` in mcphost.toml)."""

    name: str
    """Used in logs, status and error messages."""
    command: list[str]
    env: dict[str, str] = field(default_factory=dict[str, str])
    """Added to the allow-listed host environment; the only way to hand a plugin a secret."""
    cwd: Path | None = None
    serves: str | None = None
    """The prefix of every runner id the plugin can serve, when known before it starts (the bundled
    plugins: `plugin:mcphost/<name>/`); None: any, so it is always started."""

    def may_serve(self, runner_id: str) -> bool:
        return self.serves is None or runner_id.startswith(self.serves)

    def __post_init__(self) -> None:
        if not self.command:
            raise ValueError(f"Plugin {self.name!r} needs a non-empty command.")


LIVENESS_PROBE = "ping"
"""The request that asks a running plugin whether it still answers (PROTOCOL §8: a plugin that "stops
answering" fails its runs and is restarted). Not a protocol method a plugin must implement: JSON-RPC 2.0
obliges a peer to answer every request, so a plugin that is still reading answers it — with a result, or
with -32601 "method not found" — and either counts as alive. Only silence counts as stopped."""


@dataclass(frozen=True, slots=True)
class PluginTimings:
    """Bounds of every wait of the plugin lifecycle, in seconds."""

    initialize: float = 10.0
    shutdown: float = 2.0
    """For the answer to the `shutdown` request."""
    exit: float = 2.0
    """For the process to exit once its stdin is closed."""
    terminate: float = 2.0
    """For the group to disappear after SIGTERM, before SIGKILL."""
    kill: float = 2.0
    """For the group to disappear after SIGKILL, and again for the leader to be reaped."""
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    healthy_after: float = 60.0
    """A process that ran this long resets the backoff when it ends."""
    probe_interval: float = 10.0
    """How often a running plugin is asked whether it still answers (`LIVENESS_PROBE`)."""
    probe_timeout: float = 30.0
    """How long a probe may go unanswered before the plugin counts as having stopped answering."""
    crash_loop_limit: int = 5
    """This many ends (crashes or failed restarts) within `crash_loop_window` mark the plugin `failed`.
    Only a plugin that initialized once is counted: one that never did has no runs to protect."""
    crash_loop_window: float = 60.0
    """The sliding window of `crash_loop_limit`, in seconds; equal to `healthy_after` by default, so a
    process that ran long enough to count as healthy also clears the count."""
    crash_loop_retry: float = 300.0
    """How long a crash-looping plugin stays `failed` before one more start is tried. A start that gets
    through `initialize` makes it `running` again with a fresh count; one that fails keeps it `failed`."""


@dataclass(frozen=True, slots=True)
class RejectedManifest:
    """A manifest a plugin offered that the host refused, kept so operators can see why."""

    plugin: str
    index: int
    runner_id: str | None
    raw: JSONObject
    reason: str


def plugin_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a plugin: an allow-list of the host's variables plus the plugin's own `env`."""
    env: dict[str, str] = {}
    for key, value in os.environ.items():
        allowed = key in _ENV_ALLOWED or (
            key.startswith(_ENV_ALLOWED_PREFIXES) and not key.endswith("_HEADERS")
        )
        if allowed and not value.startswith("()"):  # exported shell functions are code, not settings
            env[key] = value
    env.update(extra)
    return env


def review_manifests(
    plugin: str, result: InitializeResult
) -> tuple[list[AgentRunnerManifest], list[RejectedManifest]]:
    """Validate each manifest of an `initialize` answer on its own; one bad manifest loses only itself."""
    accepted: list[AgentRunnerManifest] = []
    rejected: list[RejectedManifest] = []
    seen: set[str] = set()
    for index, raw in enumerate(result.runners):
        raw_id = raw.get("id")
        runner_id = raw_id if isinstance(raw_id, str) else None
        reason = _manifest_problem(raw, result.plugin, seen)
        if reason is None:
            manifest = AgentRunnerManifest.model_validate(raw)
            seen.add(manifest.id)
            accepted.append(manifest)
        else:
            label = repr(runner_id) if runner_id is not None else "without an id"
            rejected.append(
                RejectedManifest(plugin, index, runner_id, raw, f"manifest {index} ({label}): {reason}")
            )
    return accepted, rejected


def _manifest_problem(raw: JSONObject, info: PluginInfo, seen: set[str]) -> str | None:
    version = raw.get("protocol_version", PROTOCOL_VERSION)
    # The version is checked first: a manifest of another major version may carry fields v1 does not know.
    if not isinstance(version, str) or version.split(".")[0] != PROTOCOL_VERSION:
        return f"protocol_version {version!r} is not supported; this host speaks {PROTOCOL_VERSION!r}"
    try:
        manifest = AgentRunnerManifest.model_validate(raw)
    except ValidationError as exc:
        return describe(exc, root="(manifest)")
    author, plugin, _runner = parse_runner_id(manifest.id)
    if (author, plugin) != (info.author, info.name):
        return (
            f"runner id {manifest.id!r} does not belong to plugin '{info.author}/{info.name}'; "
            f"expected 'plugin:{info.author}/{info.name}/<runner>'"
        )
    if manifest.id in seen:
        return f"runner id {manifest.id!r} is declared twice"
    return None


class PluginProcess:
    """One configured plugin: a supervised process that serves the runs of its runners."""

    def __init__(
        self,
        spec: PluginSpec,
        *,
        host_version: str = __version__,
        timings: PluginTimings | None = None,
        prestarted: Prestarted | None = None,
    ) -> None:
        self.spec = spec
        self._prestarted = prestarted
        self.state: PluginState = "starting"
        self.restarts = 0
        """How many times the process was spawned again after the first start."""
        self.last_error: str | None = None
        """Why the latest process ended or failed to start; kept after a successful restart."""
        self.diagnostics = 0
        """Protocol diagnostics logged so far (bad lines, unknown runs, error responses …)."""
        self.info: PluginInfo | None = None
        self._host_version = host_version
        self._timings = timings or PluginTimings()
        self._manifests: dict[str, AgentRunnerManifest] = {}
        self._rejected: tuple[RejectedManifest, ...] = ()
        self._conn: Connection | None = None
        self._output_listeners: list[Callable[[str], None]] = []
        self._changed: anyio.Event | None = None
        """Set (and replaced) whenever a process becomes ready or the plugin stops being worth waiting
        for; created lazily because a plugin may be built outside an event loop."""

    def __repr__(self) -> str:
        return f"<PluginProcess {self.name!r} {self.state} pid={self.pid}>"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def command(self) -> tuple[str, ...]:
        return tuple(self.spec.command)

    @property
    def pid(self) -> int | None:
        """The pid (and process group id) of the live process, None while there is none."""
        return self._conn.pid if self._conn is not None else None

    @property
    def manifests(self) -> tuple[AgentRunnerManifest, ...]:
        """Accepted manifests of the latest successful `initialize` (kept while the plugin restarts)."""
        return tuple(self._manifests.values())

    @property
    def rejected(self) -> tuple[RejectedManifest, ...]:
        return self._rejected

    @contextmanager
    def watch_output(self, listener: Callable[[str], None]) -> Generator[None]:
        """Call `listener` with each line the plugin writes to stderr (and each stdout line that is not
        the protocol's, as `[stdout] …`) while the block runs. Lines belong to the process, not to a
        run: with several runs in flight on it, every listener hears all of them."""
        self._output_listeners.append(listener)
        try:
            yield
        finally:
            self._output_listeners.remove(listener)

    def _on_output(self, line: str) -> None:
        for listener in tuple(self._output_listeners):
            listener(line)

    # -- runs ------------------------------------------------------------------------------------------

    async def run(
        self,
        runner_name: str,
        ctx: AgentRunContext,
        results: MemoryObjectSendStream[RawResult],
        *,
        projection: RunProjection | None = None,
    ) -> RunAnswerStatus:
        """Run `runner_name` on `ctx`, pushing each of its results into `results` (closed on return).

        Raises:
            RunnerNotFoundError: the plugin has no accepted runner of that name.
            PluginError: the plugin is not running, died or stopped reading while the run was in flight,
                or answered `runner/run` with an error or an invalid result.
        """
        run_id = ctx.run_id
        async with results:
            if runner_name not in self._manifests:
                known = ", ".join(sorted(self._manifests)) or "none"
                raise RunnerNotFoundError(
                    f"Plugin {self.name!r} has no accepted runner {runner_name!r}; its runners: {known}."
                )
            conn = self._conn or await self._wait_ready(run_id)
            if run_id in conn.runs:
                raise ValueError(f"Run {run_id!r} is already active on plugin {self.name!r}.")
            route = RunRoute(results)
            conn.runs[run_id] = route
            try:
                answer = await conn.request(
                    METHOD_RUN,
                    RunParams(runner=runner_name, context=ctx, projection=projection).model_dump(
                        mode="json", exclude_none=True
                    ),
                )
            except BrokenConnectionError as exc:
                # The pipe broke; the owner is bringing the process down and will say how it ended.
                with anyio.move_on_after(
                    self._timings.exit + self._timings.terminate + self._timings.kill + 1
                ):
                    await conn.finished.wait()
                raise PluginError(
                    f"Plugin {self.name!r} {conn.final_reason or exc.reason} while run {run_id!r} was in flight"
                    f"{conn.stderr_note}.",
                    details={"plugin": self.name, "run_id": run_id, "pid": conn.pid},
                ) from None
            except PluginAnsweredError as exc:
                raise PluginError(
                    f"Plugin {self.name!r} answered 'runner/run' for run {run_id!r} with JSON-RPC error {exc}.",
                    details={"plugin": self.name, "run_id": run_id, "error": exc.error},
                ) from None
            except anyio.get_cancelled_exc_class():
                # The caller gave up (deadline, host stopping): tell the plugin, best effort and bounded.
                conn.abandoned_runs.append(run_id)
                with (
                    anyio.CancelScope(shield=True),
                    anyio.move_on_after(_CANCEL_ON_ABANDON_TIMEOUT),
                    suppress(BrokenConnectionError),
                ):
                    await conn.notify(
                        METHOD_CANCEL, CancelParams(run_id=run_id, reason="abandoned").model_dump()
                    )
                raise
            finally:
                conn.runs.pop(run_id, None)
                route.detach()
            try:
                return RunResponse.model_validate(answer).status
            except ValidationError as exc:
                raise PluginError(
                    f"Plugin {self.name!r} answered 'runner/run' for run {run_id!r} with an invalid result: "
                    f"{describe(exc, root='(result)')}.",
                    details={"plugin": self.name, "run_id": run_id},
                ) from None

    async def _wait_ready(self, run_id: str) -> Connection:
        """The next live process, waited for while the plugin is `starting` or `restarting`.

        The wait has no bound of its own: the caller's deadline or cancellation ends it (the orchestrator
        runs it inside the run's deadline and cancel scope). A plugin that is `failed` or `stopped` raises
        at once, so runs do not queue behind a plugin that is not coming back soon; so does an `idle` one
        (the registry's `ready()` starts it before a run is admitted).
        """
        while True:
            conn = self._conn
            if conn is not None:
                return conn
            if self.state in ("idle", "failed", "stopped"):
                why = f": {self.last_error}" if self.last_error else ""
                raise PluginError(
                    f"Plugin {self.name!r} is not running ({self.state}{why}); run {run_id!r} was not started.",
                    details={"plugin": self.name, "run_id": run_id, "state": self.state},
                )
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    def _count_diagnostic(self) -> None:
        self.diagnostics += 1

    def _set_state(self, state: PluginState) -> None:
        self.state = state
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    async def cancel(self, run_id: str, reason: str = "cancelled") -> bool:
        """Send `runner/cancel`; False when the run is not active here (the notice could not matter)."""
        conn = self._conn
        if conn is None or run_id not in conn.runs:
            return False
        try:
            await conn.notify(METHOD_CANCEL, CancelParams(run_id=run_id, reason=reason).model_dump())
        except BrokenConnectionError:
            return False
        return True

    # -- supervision -----------------------------------------------------------------------------------

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep the plugin running until cancelled: spawn, initialize, serve, and restart with backoff.

        `task_status.started()` comes after the first attempt, successful or not: a plugin that cannot
        start is recorded as `failed` with its reason and retried; it never fails the caller.
        """
        timings = self._timings
        delay = timings.backoff_initial
        announced = False
        ends: list[float] = []
        """When recent processes ended or failed to start, for the crash-loop count."""

        def announce() -> None:
            nonlocal announced
            if not announced:
                announced = True
                task_status.started()

        try:
            while True:
                ready_at, reason = await self._run_once(announce)
                announce()
                now = anyio.current_time()
                if ready_at is not None and now - ready_at >= timings.healthy_after:
                    delay = timings.backoff_initial
                    ends.clear()
                ends[:] = [t for t in ends if now - t < timings.crash_loop_window]
                if self._manifests:  # one that never initialized has no runs to protect: backoff only
                    ends.append(now)
                if len(ends) >= timings.crash_loop_limit:
                    self.last_error = (
                        f"crash loop: ended {len(ends)} times within {timings.crash_loop_window:g} s "
                        f"(last: {reason}); runs of its runners fail until a start succeeds, tried again "
                        f"every {timings.crash_loop_retry:g} s or when the host restarts"
                    )
                    self._set_state("failed")
                    logger.error(
                        "Plugin %r %s; marked failed, next start in %g s.",
                        self.name,
                        self.last_error,
                        timings.crash_loop_retry,
                        extra={"plugin": self.name},
                    )
                    ends.clear()
                    delay = timings.backoff_initial
                    await anyio.sleep(timings.crash_loop_retry)
                else:
                    self.last_error = reason
                    if ready_at is None and (self.state == "failed" or not self._manifests):
                        # Never initialized, or still crash-looping: nothing worth waiting for.
                        self._set_state("failed")
                    else:
                        self._set_state("restarting")  # it served runs: new ones wait for it
                    logger.warning(
                        "Plugin %r %s; starting it again in %.1f s.",
                        self.name,
                        reason,
                        delay,
                        extra={"plugin": self.name},
                    )
                    await anyio.sleep(delay)
                    delay = min(delay * 2, timings.backoff_max)
                self.restarts += 1
        finally:
            self._set_state("stopped")

    async def _run_once(self, announce: Callable[[], None]) -> tuple[float | None, str]:
        """One process from spawn to stop: (when it became ready or None, why it ended)."""
        try:
            # Spawned already when the command line started it ahead of the host's imports (first start
            # only). `spawn` is shielded: a cancellation inside it would leave a child nobody stops or reaps.
            taken = self._prestarted.take(self.spec) if self._prestarted is not None else None
            process = (
                taken
                if taken is not None
                else await spawn(self.spec.command, env=plugin_environment(self.spec.env), cwd=self.spec.cwd)
            )
        except (OSError, ValueError) as exc:
            return None, f"cannot start command {self.spec.command!r}: {exc}"
        # No await between the spawn and the try: a cancellation in the gap would leak the process.
        conn = Connection(self.name, process, on_diagnostic=self._count_diagnostic, on_output=self._on_output)
        ready_at: float | None = None
        failure: str | None = None
        reason = "was shut down"
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(conn.pump_stdin)
                tg.start_soon(conn.pump_stdout)
                tg.start_soon(conn.pump_stderr)
                try:
                    failure = await self._initialize(conn)
                    if failure is None:
                        ready_at = anyio.current_time()
                        self._conn = conn
                        self._set_state("running")
                        logger.info(
                            "Plugin %r is running (pid %d) with runners: %s",
                            self.name,
                            conn.pid,
                            ", ".join(m.id for m in self._manifests.values()) or "none",
                            extra={"plugin": self.name},
                        )
                        announce()
                        tg.start_soon(self._probe, conn)
                        await conn.closed.wait()
                finally:
                    with anyio.CancelScope(shield=True):
                        broken = conn.broken
                        host_stopped = failure is None and broken is None  # only a cancellation gets here
                        if self._conn is conn:
                            self._conn = None  # no new run may start on a process that is going away
                            self.state = "stopped" if host_stopped else "restarting"  # runs wait
                        exited = await self._stop(conn, graceful=host_stopped)
                        conn.final_reason = describe_end(failure, broken, exited)
                        if not host_stopped and conn.stderr_tail:
                            # One that never answered `initialize` most often could not import its code.
                            tail, program = conn.stderr_tail, self.spec.command[0]
                            diagnosis = import_failure(tail, program) if ready_at is None else None
                            conn.stderr_note = f"; {diagnosis or f'last stderr line: {tail[-1]!r}'}"
                        reason = conn.final_reason + conn.stderr_note
                        if ready_at is not None and not host_stopped:
                            self.last_error = reason  # before the in-flight runs hear of it
                        conn.fail_pending(conn.final_reason)
                        conn.finished.set()
                    conn.stdin_scope.cancel()
                    conn.stdout_scope.cancel()
                    conn.stderr_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await release_process(process)
        return ready_at, reason

    async def _probe(self, conn: Connection) -> None:
        """Ask the plugin every `probe_interval` whether it still answers; silence breaks the connection.

        A plugin that is alive but stuck (a deadlock, a blocked event loop) would otherwise hold its
        runs until their deadlines and take new ones it will never serve. The first probe goes out right
        after `initialize`, while the plugin is known to answer: one that leaves it unanswered does not
        answer requests it does not know (against JSON-RPC), so its liveness cannot be checked; it is
        logged once and left alone rather than restarted while healthy.
        """
        timings = self._timings
        answered = False
        while True:
            try:
                with anyio.fail_after(timings.probe_timeout):
                    await conn.request(LIVENESS_PROBE, {}, quiet=True)
            except PluginAnsweredError:
                pass  # an error answer is an answer
            except BrokenConnectionError:
                return
            except TimeoutError:
                if not answered:
                    logger.warning(
                        "Plugin %r does not answer JSON-RPC requests it does not know (%r); its liveness "
                        "cannot be checked, so a hung process will only be noticed through run deadlines.",
                        self.name,
                        LIVENESS_PROBE,
                        extra={"plugin": self.name},
                    )
                    return
                logger.warning(
                    "Plugin %r did not answer a liveness probe within %g s; restarting it.",
                    self.name,
                    timings.probe_timeout,
                    extra={"plugin": self.name},
                )
                conn.fail_pending(
                    f"stopped answering (no answer to a probe within {timings.probe_timeout:g} s)"
                )
                return
            answered = True
            with anyio.move_on_after(timings.probe_interval):
                await conn.closed.wait()
                return

    async def _initialize(self, conn: Connection) -> str | None:
        """Send `initialize` and register the manifests; the reason the start failed, or None."""
        params = InitializeParams(host=HostInfo(name="mcphost", version=self._host_version)).model_dump(
            mode="json"
        )
        try:
            with anyio.fail_after(self._timings.initialize):
                answer = await conn.request(METHOD_INITIALIZE, params)
        except TimeoutError:
            return f"did not answer 'initialize' within {self._timings.initialize:g} s"
        except BrokenConnectionError:
            return BROKEN_BEFORE_INITIALIZE
        except PluginAnsweredError as exc:
            return f"answered 'initialize' with JSON-RPC error {exc}"
        try:
            result = InitializeResult.model_validate(answer)
        except ValidationError as exc:
            return f"answered 'initialize' with an invalid result: {describe(exc, root='(result)')}"
        accepted, rejected = review_manifests(self.name, result)
        for item in rejected:
            logger.warning(
                "Plugin %r: %s; not registered.", self.name, item.reason, extra={"plugin": self.name}
            )
        self.info = result.plugin
        self._manifests = {parse_runner_id(m.id)[2]: m for m in accepted}
        self._rejected = tuple(rejected)
        return None

    async def _stop(self, conn: Connection, *, graceful: bool) -> str | None:
        """Bring the process and its whole group down. The caller shields this; every wait is bounded.

        Returns how the process ended when it exited by itself (after `shutdown` or a closed stdin), or
        None when it had to be signalled.
        """
        process, timings = conn.process, self._timings
        strays = strays_of(conn.pid)  # found only while the leader lives
        if graceful and conn.stdout_pumping and process.returncode is None:
            with (
                anyio.move_on_after(timings.shutdown),
                suppress(BrokenConnectionError, PluginAnsweredError),
            ):
                await conn.request(METHOD_SHUTDOWN, {})
        await conn.close_stdin()
        exited = describe_exit(process.returncode) if await wait_exit(process, timings.exit) else None
        # Signal the group even when the leader is gone: grandchildren must not outlive their plugin.
        stop = StopTimings(terminate=timings.terminate, kill=timings.kill)
        await stop_group(process, stop, label=f"Plugin {self.name!r}", strays=strays)
        # Let the last stderr lines of a dying plugin reach the log (and the failure reason).
        with anyio.move_on_after(_STDERR_SETTLE_TIMEOUT):
            await conn.stderr_done.wait()
        return exited


def describe_end(failure: str | None, broken: str | None, exited: str | None) -> str:
    """Why a process ended, from what the host saw: a failed start, a broken pipe, or its own stop."""
    if failure == BROKEN_BEFORE_INITIALIZE:
        return f"{exited or 'closed its stdout'} before answering 'initialize'"
    if failure is not None:
        return failure
    if broken == "closed its stdout":
        return exited or broken
    if broken is not None:
        return f"{broken} and {exited}" if exited else broken
    return "was shut down"


class PluginSupervisor:
    """The owner of every configured plugin (STYLE 15): enter it to start them, leave it to stop them.

    Entering starts concurrently the plugins that may serve one of `runner_ids` (None: every plugin; a
    plugin whose `serves` prefix is unknown is always started) and returns once each has either answered
    `initialize` or failed its first start (recorded on the plugin, retried in the background). The others
    stay `idle` until `start()` asks for one of their runners. With `wait=False` entering returns as soon
    as those first starts are under way, so the caller's own start-up overlaps the plugins' (`mcphost run`
    migrates its database meanwhile), and `ready()` waits for them. Leaving, or a cancelled host, cancels
    every supervision loop; each loop stops its process shielded and bounded.
    """

    def __init__(
        self,
        specs: Sequence[PluginSpec],
        *,
        host_version: str = __version__,
        timings: PluginTimings | None = None,
        runner_ids: Collection[str] | None = None,
        wait: bool = True,
        prestarted: Prestarted | None = None,
    ) -> None:
        names = [spec.name for spec in specs]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"Plugin names must be unique; repeated: {', '.join(repeated)}.")
        self.plugins: tuple[PluginProcess, ...] = tuple(
            PluginProcess(spec, host_version=host_version, timings=timings, prestarted=prestarted)
            for spec in specs
        )
        for plugin in self.plugins:
            if runner_ids is not None and not any(plugin.spec.may_serve(rid) for rid in runner_ids):
                plugin.state = "idle"
        self._tg: anyio.abc.TaskGroup | None = None
        self._starting: anyio.Lock | None = None
        self._wait = wait
        self._first_starts: anyio.Event | None = None

    def get(self, name: str) -> PluginProcess:
        for plugin in self.plugins:
            if plugin.name == name:
                return plugin
        raise LookupError(
            f"No plugin named {name!r}; configured: {', '.join(p.name for p in self.plugins) or 'none'}."
        )

    async def start(self, runner_id: str | None = None) -> None:
        """Start, concurrently, the idle plugins that may serve `runner_id` (None: every idle plugin);
        returns once each has answered `initialize` or failed its first start, like entering."""
        tg = self._tg
        if tg is None:
            raise RuntimeError("PluginSupervisor is not entered.")
        if not any(p.state == "idle" for p in self.plugins):
            return
        self._starting = self._starting or anyio.Lock()
        async with self._starting:  # a plugin is started once, whoever asks first
            idle = [
                p
                for p in self.plugins
                if p.state == "idle" and (runner_id is None or p.spec.may_serve(runner_id))
            ]
            await _start_all(tg, idle)

    async def __aenter__(self) -> Self:
        if self._tg is not None:
            raise RuntimeError("PluginSupervisor is already entered.")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        first = [p for p in self.plugins if p.state != "idle"]
        done = self._first_starts = anyio.Event()
        try:
            if self._wait:
                await _start_all(tg, first)
                done.set()
            else:

                async def first_starts() -> None:
                    await _start_all(tg, first)
                    done.set()

                tg.start_soon(first_starts)
        except BaseException:
            tg.cancel_scope.cancel()
            exc_type, exc, tb = sys.exc_info()
            await tg.__aexit__(exc_type, exc, tb)
            raise
        self._tg = tg
        return self

    async def ready(self) -> None:
        """Wait until each plugin started on entering has answered `initialize` or failed its first start
        (at once after entering with `wait=True`)."""
        if self._first_starts is None:
            raise RuntimeError("PluginSupervisor is not entered.")
        await self._first_starts.wait()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        tg, self._tg = self._tg, None
        assert tg is not None, "PluginSupervisor was not entered"
        tg.cancel_scope.cancel()
        # The body's own exception (or cancellation) is not the task group's: it propagates unwrapped.
        await tg.__aexit__(None, None, None)
        return None


class Prestarted:
    """Plugin processes spawned before their supervisor exists, for it to take over.

    The command line (`mcphost run`, `mcphost serve`) spawns the plugins a host will start first before
    it imports the server stack, so each plugin's own start (an interpreter and its imports) runs on the
    other core while the host imports; the supervisor's first start of a plugin with the same spec takes
    its process instead of spawning one (`take`) and talks to it from `initialize` on, as to any other.
    A spawn that fails here is left to the supervisor's own attempt, which reports it. `aclose` stops
    every process nobody took (the host failed to open first), closing its stdin and then its group,
    bounded like `PluginProcess._stop`.
    """

    def __init__(self, timings: PluginTimings | None = None) -> None:
        self._timings = timings or PluginTimings()
        self._started: dict[str, tuple[PluginSpec, anyio.abc.Process]] = {}

    async def spawn(self, specs: Sequence[PluginSpec]) -> None:
        for spec in specs:
            try:
                process = await spawn(spec.command, env=plugin_environment(spec.env), cwd=spec.cwd)
            except (OSError, ValueError):
                continue  # the supervisor tries again and words the failure
            self._started[spec.name] = (spec, process)

    @property
    def pids(self) -> dict[str, int]:
        """The processes not taken yet, by plugin name."""
        return {name: process.pid for name, (_, process) in self._started.items()}

    def take(self, spec: PluginSpec) -> anyio.abc.Process | None:
        """The process spawned for exactly `spec`, once; None when there is none."""
        started = self._started.get(spec.name)
        if started is None or started[0] != spec:
            return None
        del self._started[spec.name]
        return started[1]

    async def aclose(self) -> None:
        started, self._started = list(self._started.values()), {}
        timings = self._timings
        with anyio.CancelScope(shield=True):
            for spec, process in started:
                if process.stdin is not None:
                    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                        await process.stdin.aclose()
                await wait_exit(process, timings.exit)
                stop = StopTimings(terminate=timings.terminate, kill=timings.kill)
                await stop_group(process, stop, label=f"Plugin {spec.name!r}")
                await release_process(process)


async def _start_all(tg: anyio.abc.TaskGroup, plugins: Sequence[PluginProcess]) -> None:
    """Start each plugin's supervision loop in `tg`, concurrently; back once every first start is over."""
    async with anyio.create_task_group() as starting:
        for plugin in plugins:
            plugin.state = "starting"
            starting.start_soon(tg.start, plugin.serve)


__all__ = [
    "PluginProcess",
    "PluginSpec",
    "PluginState",
    "PluginSupervisor",
    "PluginTimings",
    "Prestarted",
    "RawResult",
    "RejectedManifest",
    "RunAnswerStatus",
    "plugin_environment",
    "review_manifests",
]
