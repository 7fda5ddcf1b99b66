"""The shared frame of external harness runners (DESIGN §6, PROTOCOL §9): Claude Code, Codex, others.

Owns what every harness adapter does the same way: the per-run working folder, the projection
(`_harness_files.py`), the runner config and the CLI's environment (`_harness_config.py`), the external
session kept in conversation state, serializing turns per session, driving the CLI
(`_harness_process.py`) through the native-stream frame (`_harness_stream.py`) and turning what the
stream showed into exactly one terminal result. Does not own any CLI's flags or events: subclasses
build the command line (`launch`) and map the native stream (`mapper`).

Invariants:
- Everything the run writes stays under one root: `<data_dir>/runs/<run_id>/` (or, when resuming, the
  session's earlier folder under the same `runs/`), or the agent's configured `working_directory`. Paths
  are normalized first; the files holding the run token are mode 0600 and removed when the CLI ends.
- The CLI gets an allow-listed environment (PATH, locale, TZ, TMPDIR, user names), the harness's
  defaults, the agent's explicit `environment`, the plugin variables named in `pass_env`, and finally the
  variables the runner controls (`HOME`, the harness's config dir, the token variable) — nothing else of
  the plugin's environment.
- Fail closed: a run completes only when the CLI's own output showed the `mcphost` server connected.
- One terminal result per run, decided in one place (`_finish`), with the diagnostics of the native
  stream and the external session facts in its metadata.
- Turns on one external session run one at a time in this plugin process; other sessions run in
  parallel. Waiting for the lock counts against the run's deadline.
- A warm turn (`warm = true`, `_warm_turn`) either emits nothing and hands the turn to a cold spawn, or
  is decided by the same `_finish` as a cold one.

Size: past 600 lines because a turn, cold or warm, is one life with one terminal decision (`_finish`)
under one session lock; the warm pool and its turn pump live in `_harness_warm.py`.
"""

from __future__ import annotations

import logging
import re
import time
from abc import abstractmethod
from collections.abc import AsyncGenerator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Self

import anyio
from pydantic import ValidationError

from mcphost.common.procgroup import StopTimings
from mcphost.protocol import (
    AgentRunContext,
    Capabilities,
    JSONObject,
    Permissions,
    RunCompleted,
    RunCompletedData,
    RunFailed,
    RunFailedData,
    RunProjection,
    Usage,
)
from mcphost_runners._harness_config import (
    REPO_ROOT,
    SERVER_NAME,
    TOKEN_ENV,
    HarnessConfig,
    describe_config_error,
    harness_config_schema,
    harness_environment,
    resolve_cli,
    run_token,
    trace_environment,
)
from mcphost_runners._harness_files import (
    CONTEXT_JSON,
    CONTEXT_MD,
    OutsideRootError,
    inside,
    make_private_dir,
    remove_quietly,
    write_private,
    write_projection,
)
from mcphost_runners._harness_process import CLINotFoundError, open_harness_process
from mcphost_runners._harness_stream import (
    Diagnostics,
    Failure,
    SessionCallback,
    StreamMapper,
    StreamState,
    pump_native_stream,
)
from mcphost_runners._harness_warm import (
    WARM_START_S,
    PoolLimits,
    WarmPool,
    WarmProcess,
    WarmProcessGoneError,
    pump_turn,
    start_warm,
    warm_fingerprint,
)
from mcphost_runners.sdk import AgentRunner, RunOutput

logger = logging.getLogger(__name__)

SESSION_KEY = "external.session_id"
WORKDIR_KEY = "external.working_directory"
DEFAULT_DATA_DIR = Path(".mcphost") / "harness"
"""Relative to the plugin's working directory (the host's, for bundled plugins)."""

DEADLINE_MARGIN_S = 1.5
"""Time kept before the run's deadline, beyond the bounds of stopping the CLI's group (`timings`), to report
why the run ended: the CLI is stopped `timings.terminate + timings.kill + DEADLINE_MARGIN_S` before it (never
more than half the time left, nor less than DEADLINE_MARGIN_S), so a CLI slow to die is still reported as
`runner.timeout` with its process group instead of being cut off by the host's deadline."""
EXIT_GRACE_S = 5.0
"""How long a CLI may take to exit after its stream ended."""
MAX_ARGV_TEXT = 100_000
"""Longer prompts go into a file the CLI is told to read (Linux caps one argument at 128 KiB)."""

HARNESS_PERMISSIONS = Permissions(
    history=["page", "search"],
    events=["get", "page"],
    artifacts=["metadata", "read", "create"],
    state=["read", "write"],
    storage=["plugin", "workspace", "binding"],
    knowledge=["list", "retrieve"],
    tools=["call"],
    models=["invoke", "stream"],
)
"""A harness reaches everything through MCP (and the host's models through the run's model endpoints);
the agent's policy and the event cut this down (§6)."""
HARNESS_CAPABILITIES = Capabilities(
    streaming=True,
    tool_calling=True,
    knowledge_retrieval=True,
    interrupt=True,
    stateful_session=True,
    parks=True,
)

_RUN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")


# -- the external session and the working folder -------------------------------------------------------


@dataclass(frozen=True)
class ExternalSession:
    """The harness session a conversation continues, as kept in its conversation state."""

    session_id: str | None = None
    working_directory: str | None = None

    @classmethod
    def from_state(cls, ctx: AgentRunContext) -> Self:
        state = ctx.state.conversation
        session_id, folder = state.get(SESSION_KEY), state.get(WORKDIR_KEY)
        return cls(
            session_id if isinstance(session_id, str) and session_id else None,
            folder if isinstance(folder, str) and folder else None,
        )


@dataclass(frozen=True)
class Workspace:
    """Where one run works. Everything it writes stays under `root`."""

    root: Path
    cwd: Path
    """Where the CLI runs."""
    projection: str
    """The folder of `agent-context.json` and `CONTEXT.md`, relative to `root`."""
    data_dir: Path
    resumable: bool
    """The folder can continue `ExternalSession.session_id` (it is that session's folder)."""
    env: Mapping[str, str] = field(default_factory=dict[str, str])
    """The run's projected secrets (`RunProjection.env`), set in the CLI's environment under the
    variables mcphost controls (`harness_environment`)."""

    def relative(self, name: str) -> str:
        return name if self.projection == "." else f"{self.projection}/{name}"


def prepare_workspace(
    ctx: AgentRunContext,
    config: HarnessConfig,
    session: ExternalSession,
    projection: RunProjection | None = None,
) -> Workspace:
    """Create (or reuse) the run's working folder: the projected workspace (the agent's `workspace`),
    else `config.working_directory`, else a folder of its own. Raises `ValueError` for an unusable one."""
    if not _RUN_ID.match(ctx.run_id):
        raise ValueError(f"run id {ctx.run_id!r} cannot name a folder")
    projection = projection or RunProjection()
    data_dir = make_private_dir(Path(config.data_dir).expanduser() if config.data_dir else DEFAULT_DATA_DIR)
    if projection.workspace is not None:
        cwd = Path(projection.workspace)
        if not cwd.is_absolute() or not cwd.is_dir():
            raise ValueError(
                f"workspace {projection.workspace_name!r} maps to {projection.workspace!r}, which is not an "
                "existing folder on this machine; create it or fix the workspace's mapping"
            )
        cwd = cwd.resolve()
        return Workspace(
            cwd, cwd, f".mcphost/runs/{ctx.run_id}", data_dir, resumable=True, env=projection.env
        )
    if config.working_directory:
        cwd = Path(config.working_directory).expanduser().resolve()
        if not cwd.is_dir():
            raise ValueError(f"config.working_directory {str(cwd)!r} is not an existing folder")
        return Workspace(
            cwd, cwd, f".mcphost/runs/{ctx.run_id}", data_dir, resumable=True, env=projection.env
        )
    runs = make_private_dir(data_dir / "runs")
    if session.working_directory:
        earlier = Path(session.working_directory)
        if earlier.is_absolute() and earlier.is_dir():
            resolved = earlier.resolve()
            if resolved.parent == runs:  # only a folder this runner made, never an arbitrary path
                return Workspace(resolved, resolved, ".", data_dir, resumable=True, env=projection.env)
    folder = make_private_dir(inside(runs, ctx.run_id))
    return Workspace(folder, folder, ".", data_dir, resumable=False, env=projection.env)


class SessionLocks:
    """One lock per external session (or conversation, before a session exists), in this process."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[anyio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncGenerator[None]:
        lock, users = self._locks.get(key, (anyio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


def session_key(harness: str, ctx: AgentRunContext, session: ExternalSession) -> str:
    if session.session_id:
        return f"{harness}:session:{session.session_id}"
    if ctx.conversation is not None:
        return f"{harness}:conversation:{ctx.conversation.conversation_id}/{ctx.conversation.thread_id or ''}"
    return f"{harness}:run:{ctx.run_id}"


def prompt_of(ctx: AgentRunContext) -> str:
    """The user turn handed to the CLI: the input text as sent, or a pointer to the event."""
    text = ctx.input.text or ""
    media = [(c.artifact_id, c.mime_type) for c in ctx.input.contents if c.type != "text"]
    media += [(a.artifact_id, a.mime_type) for a in ctx.input.attachments]
    if media:
        listed = ", ".join(f"{artifact_id} ({mime_type})" for artifact_id, mime_type in media)
        text += f"\n\n[Attachments, readable with the mcphost artifacts_read tool: {listed}]"
    if not text.strip():
        text = (
            f"An event of type {ctx.event.event_type!r} arrived (event id {ctx.event.event_id}). "
            f"Its details are in {CONTEXT_MD}."
        )
    return text


def context_hint(workspace: Workspace) -> str:
    """What the harness is told about the projection (appended to its instructions)."""
    return (
        "This run is hosted by mcphost. The event and the run's context are described in "
        f"{workspace.relative(CONTEXT_MD)} (machine-readable: {workspace.relative(CONTEXT_JSON)}). "
        f"The conversation's history, state, artifacts and knowledge are reached through the tools of "
        f"the `{SERVER_NAME}` MCP server."
    )


# -- the run ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """How to start the CLI for one attempt."""

    argv: list[str]
    env: dict[str, str]
    secret_files: list[Path] = field(default_factory=list[Path])
    """Files holding the run token: removed when the CLI ends."""


@dataclass(frozen=True)
class Exit:
    """How the CLI process ended."""

    returncode: int | None
    timed_out: bool
    stderr: str
    process_group: int


class HarnessRunner(AgentRunner):
    """A runner that drives an external harness CLI. Subclasses set the class attributes and implement
    `launch`, `mapper` and (optionally) `classify_exit`."""

    harness: ClassVar[str]
    """Short name used in messages and metadata, e.g. `claude-code`."""
    cli_name: ClassVar[str]
    """The executable's name on PATH and in node_modules/.bin."""
    config_model: ClassVar[type[HarnessConfig]] = HarnessConfig
    skills_folder: ClassVar[str] = ".claude/skills"
    permissions = HARNESS_PERMISSIONS
    capabilities = HARNESS_CAPABILITIES
    timings: ClassVar[StopTimings] = StopTimings()
    locks: ClassVar[SessionLocks] = SessionLocks()
    warm_capable: ClassVar[bool] = False
    """The CLI has a long-lived mode this adapter drives (`launch_warm`, `turn_message`)."""
    pool: ClassVar[WarmPool] = WarmPool()

    @abstractmethod
    def launch(
        self,
        ctx: AgentRunContext,
        config: HarnessConfig,
        workspace: Workspace,
        cli: Path,
        session: ExternalSession,
    ) -> Launch:
        """The command line and environment of one attempt (`session.session_id` set: resume it)."""

    @abstractmethod
    def mapper(
        self, ctx: AgentRunContext, out: RunOutput, diagnostics: Diagnostics, on_session: SessionCallback
    ) -> StreamMapper:
        """A fresh mapper of the CLI's native stream."""

    @classmethod
    def deadline_margin_s(cls, left_s: float) -> float:
        """How long before the run's deadline the CLI is stopped, with `left_s` seconds left: its group's
        stop bounds plus the report, at most half of what is left, at least `DEADLINE_MARGIN_S`."""
        full = cls.timings.terminate + cls.timings.kill + DEADLINE_MARGIN_S
        return max(DEADLINE_MARGIN_S, min(full, left_s / 2))

    def launch_warm(
        self,
        ctx: AgentRunContext,
        config: HarnessConfig,
        workspace: Workspace,
        cli: Path,
        session: ExternalSession,
    ) -> Launch:
        """The command line of a warm process (`warm_capable` adapters): the CLI's long-lived mode,
        its MCP server the session endpoint (`ctx.context.mcp.session`)."""
        raise NotImplementedError(f"{self.harness} has no warm mode")

    def turn_message(self, ctx: AgentRunContext, workspace: Workspace) -> bytes:
        """The line written to a warm process's stdin to start the run's turn."""
        raise NotImplementedError(f"{self.harness} has no warm mode")

    def warm_turn(
        self,
        ctx: AgentRunContext,
        config: HarnessConfig,
        out: RunOutput,
        diagnostics: Diagnostics,
        on_session: SessionCallback,
        workspace: Workspace,
        session: ExternalSession,
        process: WarmProcess,
        fresh: bool,
    ) -> tuple[bytes, StreamMapper]:
        """What is written to the warm process to start the run's turn, and the mapper of what comes
        back (`fresh`: the process was started for this turn). By default `turn_message` and the cold
        mapper, for a CLI whose long-lived mode speaks its cold stream (Claude Code); a JSON-RPC CLI
        returns its first request and a mapper that writes the rest (Codex)."""
        return self.turn_message(ctx, workspace), self.mapper(ctx, out, diagnostics, on_session)

    @asynccontextmanager
    async def lifespan(self) -> AsyncGenerator[None]:
        """The warm pool lives while the plugin serves; its processes stop with it."""
        async with self.pool.running():
            yield

    def classify_exit(self, state: StreamState, ended: Exit) -> Failure | None:
        """A precise failure for a CLI that ended without its terminal event, if the adapter knows one.
        May set `state.resume_missing` to have the turn retried as a new session."""
        return None

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        try:
            config = self.config_model.model_validate(ctx.config)
        except ValidationError as exc:
            await out.failed("invalid_argument", f"{self.harness}: {describe_config_error(exc)}")
            return
        session = ExternalSession.from_state(ctx) if config.resume else ExternalSession()
        left = ctx.runtime.deadline_at - time.time()
        budget = left - self.deadline_margin_s(left)
        with anyio.move_on_after(max(budget, 0)) as waiting:
            async with self.locks.hold(session_key(self.harness, ctx, session)):
                waiting.deadline = float("inf")  # the lock is ours; the run's own deadline applies now
                await self._run_locked(ctx, out, config, session)
        if waiting.cancelled_caught and not out.ended:
            await out.failed(
                "runner.timeout",
                f"{self.harness}: the run's deadline passed while an earlier turn of the same session ran.",
                retryable=True,
            )

    async def _run_locked(
        self, ctx: AgentRunContext, out: RunOutput, config: HarnessConfig, session: ExternalSession
    ) -> None:
        diagnostics = Diagnostics()
        try:
            workspace = prepare_workspace(ctx, config, session, out.projection)
            write_projection(
                ctx,
                workspace.root,
                workspace.projection,
                skills_folder=self.skills_folder,
                skills=out.projection.skills,
            )
        except (OutsideRootError, ValueError) as exc:
            await out.failed("invalid_argument", f"{self.harness}: {exc}")
            return
        except OSError as exc:
            await out.failed("runner.error", f"{self.harness}: cannot prepare the working folder: {exc}")
            return
        if session.session_id and not workspace.resumable:
            diagnostics.add(
                "session_not_resumed",
                f"the folder of session {session.session_id!r} is gone; starting a new session",
            )
            session = ExternalSession()
        search_path = harness_environment(config, defaults={}, controlled={}).get("PATH")
        cli = resolve_cli(self.cli_name, config.cli_path, search_path)
        if cli is None:
            await out.failed("runner.not_found", self._not_found(config))
            return
        if ctx.context.mcp is None or run_token(ctx.context.mcp) is None:
            await out.failed(
                "runner.mcp_unavailable", f"{self.harness}: the run has no MCP endpoint and token to inject."
            )
            return
        saver = _SessionSaver(ctx, out, config, session, workspace)
        if config.warm and await self._warm_turn(
            ctx, out, config, session, workspace, cli, diagnostics, saver
        ):
            return
        while True:
            mapper = self.mapper(ctx, out, diagnostics, saver)
            try:
                ended = await self._drive(
                    self.launch(ctx, config, workspace, cli, session),
                    workspace,
                    mapper,
                    diagnostics,
                    ctx.runtime.deadline_at,
                )
            except CLINotFoundError as exc:
                await out.failed("runner.not_found", f"{self._not_found(config)} ({exc})")
                return
            exit_failure = None if mapper.state.finished else self.classify_exit(mapper.state, ended)
            if not (mapper.state.resume_missing and session.session_id and not mapper.state.session_id):
                break
            # The CLI does not know the session to resume (its home was wiped): one new session instead.
            diagnostics.add(
                "session_not_resumed",
                f"{self.harness} does not know session {session.session_id!r}; starting a new session",
            )
            session = saver.session = ExternalSession()
        await self._finish(out, workspace, mapper.state, ended, exit_failure, diagnostics)

    async def _warm_turn(
        self,
        ctx: AgentRunContext,
        out: RunOutput,
        config: HarnessConfig,
        session: ExternalSession,
        workspace: Workspace,
        cli: Path,
        diagnostics: Diagnostics,
        saver: _SessionSaver,
    ) -> bool:
        """Run the turn on the session's warm process. False (nothing emitted) when it cannot: the
        caller spawns the CLI cold instead."""
        mcp = ctx.context.mcp
        assert mcp is not None
        why = None
        if not self.warm_capable:
            why = f"{self.harness} has no long-lived mode mcphost drives; every turn spawns the CLI"
        elif mcp.session is None:
            why = "the host offered no warm session endpoint (the run belongs to no conversation)"
        elif config.mcp_transport != "http":
            why = "a warm process reaches the host over HTTP; config.mcp_transport is 'bridge'"
        if why is not None or mcp.session is None:
            logger.info("%s run %s: warm = true, spawning cold: %s", self.harness, ctx.run_id, why)
            diagnostics.add("warm_unavailable", why or "no warm session")
            return False
        warm = mcp.session
        self.pool.limits = PoolLimits(warm.max_sessions, warm.idle_timeout_s, warm.max_rss_mb)
        key = warm.session_id
        fingerprint = warm_fingerprint(ctx, config, workspace.cwd, cli)

        async def start() -> WarmProcess:
            launch = self.launch_warm(ctx, config, workspace, cli, session)
            stderr = workspace.data_dir / f"warm-{key}.stderr"
            return await start_warm(
                key,
                fingerprint,
                launch.argv,
                cwd=workspace.cwd,
                env=launch.env,
                stderr_path=stderr,
                secrets=launch.secret_files,
            )

        try:
            process, fresh = await self.pool.acquire(key, fingerprint, start)
        except OSError as exc:
            diagnostics.add("warm_fallback", f"the warm process could not start ({exc}); spawning cold")
            return False
        except WarmProcessGoneError as exc:
            diagnostics.add(
                "warm_fallback", f"{exc}; this turn spawns the CLI cold, the next starts a new one"
            )
            return False
        message, mapper = self.warm_turn(
            ctx, config, out, diagnostics, saver, workspace, session, process, fresh
        )
        clean = started = False
        left = ctx.runtime.deadline_at - time.time()
        try:
            with anyio.move_on_after(max(left - self.deadline_margin_s(left), 0)) as deadline:
                started = await pump_turn(
                    process,
                    message,
                    mapper,
                    diagnostics,
                    start_s=None if fresh else WARM_START_S,
                )
            clean = started and mapper.state.finished and not mapper.state.stop
        finally:
            if clean:
                self.pool.release(process)
                process.forget_secrets()
            else:
                await self.pool.discard(key, "its turn did not end with its result")
        if not started and not deadline.cancelled_caught:
            diagnostics.add(
                "warm_fallback",
                f"the warm process {process.pid} did not start the turn (it crashed or hung); it was "
                "stopped and the turn spawns the CLI cold",
            )
            return False
        mapper.state.extra["warm"] = {"pid": process.pid, "reused": not fresh, "turns": process.turns}
        ended = Exit(process.returncode, deadline.cancelled_caught, process.stderr_tail(), process.pid)
        exit_failure = None if mapper.state.finished else self.classify_exit(mapper.state, ended)
        await self._finish(out, workspace, mapper.state, ended, exit_failure, diagnostics)
        return True

    async def _drive(
        self,
        launch: Launch,
        workspace: Workspace,
        mapper: StreamMapper,
        diagnostics: Diagnostics,
        deadline_at: float,
    ) -> Exit:
        left = deadline_at - time.time()
        budget = left - self.deadline_margin_s(left)
        try:
            if budget <= 0:
                return Exit(None, True, "", 0)
            async with open_harness_process(
                launch.argv, cwd=workspace.cwd, env=launch.env, timings=self.timings
            ) as process:
                with anyio.move_on_after(budget) as deadline:
                    await pump_native_stream(process.lines(), mapper, diagnostics)
                    if not mapper.state.stop:
                        with anyio.move_on_after(EXIT_GRACE_S):
                            await process.wait()
            # Leaving the context stopped the whole group; the return code is final now.
            return Exit(process.returncode, deadline.cancelled_caught, process.stderr_tail, process.pgid)
        finally:
            for path in launch.secret_files:
                remove_quietly(path)

    async def _finish(
        self,
        out: RunOutput,
        workspace: Workspace,
        state: StreamState,
        ended: Exit,
        exit_failure: Failure | None,
        diagnostics: Diagnostics,
    ) -> None:
        metadata: JSONObject = {
            "harness": self.harness,
            "external": {
                "session_id": state.session_id,
                "working_directory": str(workspace.cwd),
                "exit_code": ended.returncode,
                "process_group": ended.process_group,
                **state.extra,
            },
            **diagnostics.metadata(),
        }
        failure = state.failure
        if failure is None and ended.timed_out and not state.finished:
            failure = Failure(
                "runner.timeout",
                f"{self.harness} did not finish before the run's deadline and was stopped.",
                retryable=True,
                details={"stderr_tail": ended.stderr[-4000:]},
            )
        if failure is None and state.finished and state.mcp_connected is not True:
            failure = Failure(
                "runner.mcp_unavailable",
                f"{self.harness} never showed the {SERVER_NAME!r} MCP server as connected; "
                "the run is failed rather than answered without the host's tools.",
            )
        if failure is None and not state.finished:
            failure = exit_failure or self._exit_failure(ended)
        if failure is not None and failure.deliver_answer and state.final_text:
            await out.message(state.final_text)
        if failure is None and not state.final_text:
            failure = Failure(
                "runner.empty_output", f"{self.harness} finished without an answer.", details={}
            )
        if failure is not None:
            details = {**failure.details, "process_group": ended.process_group}
            await out.emit(
                RunFailed(
                    run_id=out.run_id,
                    metadata=metadata,
                    data=RunFailedData(
                        code=failure.code,
                        message=failure.message[:8000],
                        retryable=failure.retryable,
                        details=details,
                    ),
                )
            )
            return
        await out.message(state.final_text)
        await out.emit(
            RunCompleted(
                run_id=out.run_id,
                metadata=metadata,
                data=RunCompletedData(
                    finish_reason=state.finish_reason, message=None, usage=state.usage or Usage()
                ),
            )
        )

    def _exit_failure(self, ended: Exit) -> Failure:
        stderr = ended.stderr.strip()
        summary = stderr.splitlines()[-1][:500] if stderr else "no output on stderr"
        if ended.returncode == 0:
            return Failure(
                "runner.empty_output",
                f"{self.harness} exited without its final result event.",
                details={"stderr_tail": stderr[-4000:]},
            )
        return Failure(
            "runner.crashed",
            f"{self.harness} exited with status {ended.returncode}: {summary}",
            details={"exit_code": ended.returncode, "stderr_tail": stderr[-4000:]},
        )

    def _not_found(self, config: HarnessConfig) -> str:
        where = (
            f"config.cli_path {config.cli_path!r}"
            if config.cli_path
            else f"{self.cli_name!r} on PATH or in {str(REPO_ROOT / 'node_modules' / '.bin')!r}"
        )
        return (
            f"The {self.harness} CLI was not found ({where}). Install the pinned CLIs with `npm ci` in "
            "the mcphost checkout, or set config.cli_path."
        )


class _SessionSaver:
    """Writes the external session into conversation state the first time the CLI names it."""

    def __init__(
        self,
        ctx: AgentRunContext,
        out: RunOutput,
        config: HarnessConfig,
        session: ExternalSession,
        workspace: Workspace,
    ) -> None:
        self._ctx, self._out, self._config, self._workspace = ctx, out, config, workspace
        self.session = session

    async def __call__(self, session_id: str) -> None:
        if self._ctx.conversation is None or not self._config.save_session:
            return
        folder = str(self._workspace.cwd)
        if session_id != self.session.session_id or folder != self.session.working_directory:
            await self._out.state("conversation", SESSION_KEY, session_id)
            await self._out.state("conversation", WORKDIR_KEY, folder)


__all__ = [
    "CONTEXT_JSON",
    "CONTEXT_MD",
    "DEADLINE_MARGIN_S",
    "MAX_ARGV_TEXT",
    "SERVER_NAME",
    "SESSION_KEY",
    "TOKEN_ENV",
    "WORKDIR_KEY",
    "Exit",
    "ExternalSession",
    "HarnessConfig",
    "HarnessRunner",
    "Launch",
    "SessionLocks",
    "Workspace",
    "context_hint",
    "harness_config_schema",
    "harness_environment",
    "prepare_workspace",
    "prompt_of",
    "resolve_cli",
    "run_token",
    "session_key",
    "trace_environment",
    "write_private",
    "write_projection",
]
