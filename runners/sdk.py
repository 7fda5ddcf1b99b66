"""The runner SDK: write a runner as a small class, serve it as a stdio plugin (PROTOCOL §8).

```python
class Echo(AgentRunner):
    name = "default"
    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        await out.message(ctx.input.text or "")
        await out.completed()

serve(Echo(), author="acme", plugin="echo", version="1.0.0")
```

Owns the plugin side of the wire: reading host requests from stdin, answering `initialize` with the
manifests, running each `runner/run` in its own task, sending results as `runner/result` notifications,
cancelling on `runner/cancel`, and exiting on `shutdown` or stdin EOF. A runner reaches the host's facts
through `out.api`, the run's `RunAPI` (an MCP client of `ctx.context.mcp`, `_runapi.py`): `serve()` opens
one per run, connects it on first use and closes it when the run ends. Imports only `mcphost.protocol`,
the `mcp` SDK, anyio, httpx2, pydantic and the standard library.

`run()` pushes results through `RunOutput` rather than yielding them: a runner may then use task groups
and cancel scopes freely (none straddles a `yield`, STYLE 19) and emit from several tasks at once.

Invariants:
- stdout is the protocol channel. `serve()` moves it to a private descriptor and points fd 1 at stderr (and
  fd 0 at /dev/null), so a stray `print()` or a child process can neither corrupt nor steal the protocol.
  Logging goes to stderr.
- Lines to the host are written whole, one at a time (one lock), from a worker thread so a slow host never
  blocks the event loop.
- Within a run, `sequence` starts at 1 and increases by one per result, in the order results are written;
  nothing follows `run.completed`/`run.failed`. A run whose `run()` returns without a terminal result gets
  `run.completed`; a cancelled run gets `run.failed {code: cancelled}`; a `RunAPIError` the runner let
  through gets `run.failed` with that error's code; any other exception gets
  `run.failed {code: runner.error, message: str(exc)}` and its traceback on stderr.
- The answer to `runner/run` (`{status}`) is written after the run's last result.
- Lines over `MAX_LINE_BYTES` from the host are logged and skipped; unknown request methods get -32601.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from importlib import metadata
from typing import ClassVar, Literal

import anyio
import anyio.abc
import anyio.to_thread
from pydantic import ValidationError

from mcphost.common.excgroups import sole_leaf
from mcphost.common.lines import LineReader, TooLong
from mcphost.protocol import (
    MAX_INLINE_ARTIFACT_BYTES,
    MAX_LINE_BYTES,
    METHOD_CANCEL,
    METHOD_INITIALIZE,
    METHOD_RESULT,
    METHOD_RUN,
    METHOD_SHUTDOWN,
    PROTOCOL_VERSION,
    ActionRequested,
    ActionRequestedData,
    AgentRunContext,
    AgentRunnerManifest,
    AgentRunResult,
    ArtifactCreated,
    ArtifactCreatedData,
    ArtifactRef,
    CancelParams,
    Capabilities,
    ConfigField,
    ContentElement,
    ContextSupport,
    JSONObject,
    JSONValue,
    Message,
    MessageChunk,
    MessageCompleted,
    MessageCompletedData,
    MessageDelta,
    MessageDeltaData,
    Permissions,
    RunCompleted,
    RunCompletedData,
    RunFailed,
    RunFailedData,
    RunParams,
    StateScope,
    StateUpdated,
    StateUpdatedData,
    ToolCallCompleted,
    ToolCallCompletedData,
    ToolCallStarted,
    ToolCallStartedData,
    Usage,
    is_json_object,
    runner_id_of,
)
from mcphost.protocol.facts import (
    ArtifactChunk,
    ArtifactMetadata,
    Deleted,
    EventPage,
    EventRecord,
    HistoryPage,
    HistorySearch,
    KnowledgeBase,
    KnowledgeChunk,
    SearchHit,
    StateList,
    StateListItem,
    StateValue,
    StateWritten,
    StorageList,
    StorageListItem,
    StorageValue,
    StorageWritten,
    TranscriptItem,
)
from mcphost.protocol.results import FinishReason
from mcphost.protocol.stdio import RunAnswerStatus
from runners._runapi import RunAPI, RunAPIError, RunTool, ToolResult

logger = logging.getLogger("runners.sdk")


_SHUTDOWN_GRACE = 5.0
"""How long `shutdown` and stdin EOF wait for cancelled runs to report before the plugin exits."""


class AgentRunner:
    """Base class of a runner: class attributes make the manifest, `run()` does the work."""

    name: ClassVar[str] = "default"
    """The last part of the runner id `plugin:<author>/<plugin>/<name>`."""
    label: ClassVar[dict[str, str]] = {}
    description: ClassVar[dict[str, str] | None] = None
    capabilities: ClassVar[Capabilities] = Capabilities()
    permissions: ClassVar[Permissions] = Permissions()
    """The most this runner may ever be granted (PROTOCOL §2)."""
    config_schema: ClassVar[list[ConfigField]] = []
    context_support: ClassVar[ContextSupport] = ContextSupport()
    metadata: ClassVar[JSONObject] = {}

    def manifest(self, *, author: str, plugin: str) -> AgentRunnerManifest:
        """This runner's manifest inside plugin `author/plugin`."""
        return AgentRunnerManifest(
            id=runner_id_of(author, plugin, self.name),
            name=self.name,
            label=self.label or {"en": self.name},
            description=self.description,
            protocol_version=PROTOCOL_VERSION,
            capabilities=self.capabilities,
            permissions=self.permissions,
            context=self.context_support,
            config_schema=self.config_schema,
            metadata=self.metadata,
        )

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        """Handle one run: emit results through `out`. Returning without a terminal result completes it."""
        raise NotImplementedError(f"{type(self).__name__} must implement run()")


class RunOutput:
    """Builds and sends the results of one run: numbers `sequence` from 1, fills `run_id` and `timestamp`.

    `send` receives each finished result; `serve()` passes one that writes a `runner/result` line, tests
    may pass one that collects them. `api` is the run's `RunAPI` (`serve()` passes one on
    `ctx.context.mcp`; without it every call fails with `runner.mcp_unavailable`).
    """

    def __init__(
        self,
        run_id: str,
        send: Callable[[AgentRunResult], Awaitable[None]],
        *,
        api: RunAPI | None = None,
    ) -> None:
        self.run_id = run_id
        self.api = api if api is not None else RunAPI(None)
        """The run's facts and tools over its MCP server (connected on first use)."""
        self.sequence = 0
        """The sequence of the last result sent."""
        self.status: RunAnswerStatus | None = None
        """`completed` or `failed` once a terminal result was sent."""
        self._send = send
        self._lock = anyio.Lock()

    @property
    def ended(self) -> bool:
        return self.status is not None

    async def emit(self, result: AgentRunResult) -> AgentRunResult:
        """Send a result built elsewhere; `run_id`, `sequence` and `timestamp` are set here."""
        async with self._lock:  # a sequence number and its line's position never disagree
            if self.status is not None:
                raise RuntimeError(
                    f"Run {self.run_id!r} already ended with run.{self.status}; nothing may follow it "
                    f"(tried to send {result.type})."
                )
            stamped = result.model_copy(
                update={"run_id": self.run_id, "sequence": self.sequence + 1, "timestamp": time.time()}
            )
            await self._send(stamped)
            self.sequence += 1
            if stamped.type == "run.completed":
                self.status = "completed"
            elif stamped.type == "run.failed":
                self.status = "failed"
            return stamped

    async def delta(self, text: str) -> None:
        """A streamed piece of the assistant's reply (`message.delta`)."""
        await self.emit(
            MessageDelta(run_id=self.run_id, data=MessageDeltaData(chunk=MessageChunk(content=text)))
        )

    async def message(
        self,
        text: str | None = None,
        *,
        contents: list[ContentElement] | None = None,
        artifacts: list[ArtifactRef] | None = None,
        role: Literal["assistant", "system"] = "assistant",
    ) -> None:
        """A complete message (`message.completed`): a transcript row the host delivers."""
        message = Message(role=role, content=text, contents=contents, artifacts=artifacts or [])
        await self.emit(MessageCompleted(run_id=self.run_id, data=MessageCompletedData(message=message)))

    async def tool_started(
        self, tool_call_id: str, tool_name: str, parameters: JSONObject | None = None
    ) -> None:
        data = ToolCallStartedData(
            tool_call_id=tool_call_id, tool_name=tool_name, parameters=parameters or {}
        )
        await self.emit(ToolCallStarted(run_id=self.run_id, data=data))

    async def tool_completed(
        self,
        tool_call_id: str,
        tool_name: str,
        *,
        result_preview: str | None = None,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> None:
        data = ToolCallCompletedData(
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            result_preview=result_preview,
            error_code=error_code,
            error_message=error_message,
        )
        await self.emit(ToolCallCompleted(run_id=self.run_id, data=data))

    async def state(self, scope: StateScope, key: str, value: JSONValue) -> None:
        """Write `value` under `key` in a state scope the run was granted (`state.updated`)."""
        await self.emit(
            StateUpdated(run_id=self.run_id, data=StateUpdatedData(scope=scope, key=key, value=value))
        )

    async def artifact(
        self,
        *,
        name: str,
        mime_type: str = "application/octet-stream",
        content: bytes | None = None,
        artifact_id: str | None = None,
    ) -> ArtifactRef:
        """Announce an artifact (`artifact.created`). With `content` (≤ 1 MiB) it travels inline and its
        size and SHA-256 are filled in; without, `artifact_id` names one created through MCP."""
        if content is None and artifact_id is None:
            raise ValueError("artifact() needs `content` or the `artifact_id` of an existing artifact")
        encoded: str | None = None
        size = sha256 = None
        if content is not None:
            if len(content) > MAX_INLINE_ARTIFACT_BYTES:
                raise ValueError(
                    f"inline artifact {name!r} has {len(content)} bytes; the limit is {MAX_INLINE_ARTIFACT_BYTES}. "
                    "Create it through the run's MCP server (artifacts_create) instead."
                )
            encoded = base64.b64encode(content).decode("ascii")
            size, sha256 = len(content), hashlib.sha256(content).hexdigest()
        ref = ArtifactRef(
            artifact_id=artifact_id or f"art_{uuid.uuid4().hex}",
            name=name,
            mime_type=mime_type,
            size=size,
            sha256=sha256,
        )
        await self.emit(
            ArtifactCreated(
                run_id=self.run_id, data=ArtifactCreatedData(artifact=ref, content_base64=encoded)
            )
        )
        return ref

    async def action(
        self,
        action: str,
        *,
        target: JSONValue = None,
        payload: JSONObject | None = None,
        idempotency_key: str | None = None,
        approval_hint: str | None = None,
    ) -> None:
        """Ask for a platform action (`action.requested`). The host records it and never executes it; with
        an `idempotency_key` it waits for a person's approval and, approved, is announced once per key to
        the host's webhook receivers (`action.approved`), which execute it."""
        data = ActionRequestedData(
            action=action,
            target=target,
            payload=payload or {},
            idempotency_key=idempotency_key,
            approval_hint=approval_hint,
        )
        await self.emit(ActionRequested(run_id=self.run_id, data=data))

    async def completed(
        self, message: str | None = None, usage: Usage | None = None, finish_reason: FinishReason = "stop"
    ) -> None:
        """End the run successfully (`run.completed`); `message` counts as the final message when no
        `message.completed` came before."""
        data = RunCompletedData(
            finish_reason=finish_reason,
            message=Message(content=message) if message is not None else None,
            usage=usage or Usage(),
        )
        await self.emit(RunCompleted(run_id=self.run_id, data=data))

    async def failed(
        self, code: str, message: str, retryable: bool = False, details: JSONObject | None = None
    ) -> None:
        """End the run with an error (`run.failed`); `code` is a PROTOCOL §5 code or `runner.*`."""
        data = RunFailedData(code=code, message=message[:8000], retryable=retryable, details=details or {})
        await self.emit(RunFailed(run_id=self.run_id, data=data))


def installed_version(distribution: str = "mcphost") -> str:
    """The installed version of `distribution`, or `0.0.0` when it is not installed (a bare checkout)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "0.0.0"


def serve(*runners: AgentRunner, author: str, plugin: str, version: str | None = None) -> None:
    """Serve `runners` as plugin `author/plugin` over stdio until `shutdown` or stdin EOF.

    `version` defaults to the installed mcphost distribution's (right for the bundled runners); a plugin
    shipped on its own passes its own, e.g. `installed_version("my-plugin")`.
    """
    server = _PluginServer(runners, author=author, plugin=plugin, version=version or installed_version())
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
        )
        for chatty in ("httpx2", "httpcore", "mcp"):  # a line per MCP request would drown the host's log
            logging.getLogger(chatty).setLevel(logging.WARNING)
    proto_in, proto_out = _claim_stdio()
    anyio.run(server.serve, proto_in, proto_out, backend="asyncio")


def _claim_stdio() -> tuple[int, int]:
    """Keep the protocol pipes on private descriptors; fd 0 becomes /dev/null and fd 1 stderr."""
    sys.stdout.flush()
    proto_in, proto_out = os.dup(0), os.dup(1)  # dup'ed descriptors are not inherited by children
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return proto_in, proto_out


class _ActiveRun:
    __slots__ = ("done", "out", "reason", "scope")

    def __init__(self, out: RunOutput) -> None:
        self.out = out
        self.scope = anyio.CancelScope()
        self.reason = "cancelled"
        self.done = anyio.Event()


class _PluginServer:
    """The plugin side of the stdio protocol for a set of runners."""

    def __init__(self, runners: tuple[AgentRunner, ...], *, author: str, plugin: str, version: str) -> None:
        names = [runner.name for runner in runners]
        if not runners or len(set(names)) != len(names):
            raise ValueError(f"serve() needs runners with unique names; got {names!r}")
        self._manifests = [runner.manifest(author=author, plugin=plugin) for runner in runners]
        self._runners = {runner.name: runner for runner in runners}
        self._info = {"author": author, "name": plugin, "version": version}
        self._runs: dict[str, _ActiveRun] = {}
        self._write_lock = anyio.Lock()
        self._out_fd = -1
        self._out_broken = False

    async def serve(self, in_fd: int, out_fd: int) -> None:
        self._out_fd = out_fd
        async with anyio.create_task_group() as tg:
            reader = LineReader.from_fd(in_fd, MAX_LINE_BYTES, keep=0)
            while True:
                try:
                    line = await reader.receive()
                except anyio.EndOfStream:
                    break
                if isinstance(line, TooLong):
                    logger.error(
                        "The host sent a line of %d bytes, over %d; skipped.", line.size, MAX_LINE_BYTES
                    )
                    continue
                if await self._dispatch(line, tg):
                    break
            await self._wind_down()
            tg.cancel_scope.cancel()

    async def _dispatch(self, line: bytes, tg: anyio.abc.TaskGroup) -> bool:
        """Handle one line from the host; True when the plugin should exit."""
        if not line.strip():
            return False
        try:
            message: object = json.loads(line)
        except ValueError:
            logger.error("The host sent a line that is not JSON: %r", line[:200])
            return False
        if not is_json_object(message):
            logger.error("The host sent a JSON value that is not an object: %r", line[:200])
            return False
        method, request_id = message.get("method"), message.get("id")
        params: object = message.get("params") or {}
        if method == METHOD_INITIALIZE and request_id is not None:
            runners = [m.model_dump(mode="json") for m in self._manifests]
            await self._answer(request_id, {"plugin": self._info, "runners": runners})
        elif method == METHOD_RUN and request_id is not None:
            await self._start_run(request_id, params, tg)
        elif method == METHOD_CANCEL:
            try:
                cancel = CancelParams.model_validate(params)
            except ValidationError as exc:
                logger.error("Invalid runner/cancel params: %s", exc)
                return False
            active = self._runs.get(cancel.run_id)
            if active is not None:
                active.reason = cancel.reason
                active.scope.cancel()
        elif method == METHOD_SHUTDOWN and request_id is not None:
            await self._wind_down()
            await self._answer(request_id, {})
            return True
        elif request_id is not None and isinstance(method, str):
            await self._write(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "error": {"code": -32601, "message": f"Method not found: {method}"},
                }
            )
        else:
            logger.warning("Ignored a message from the host: %r", line[:200])
        return False

    async def _start_run(self, request_id: JSONValue, params: JSONValue, tg: anyio.abc.TaskGroup) -> None:
        try:
            run = RunParams.model_validate(params)
        except ValidationError as exc:
            await self._error(request_id, -32602, f"Invalid runner/run params: {exc}")
            return
        runner = self._runners.get(run.runner)
        if runner is None:
            known = ", ".join(sorted(self._runners))
            await self._error(request_id, -32602, f"Unknown runner {run.runner!r}; this plugin has: {known}")
            return
        if run.context.run_id in self._runs:
            await self._error(request_id, -32602, f"Run {run.context.run_id!r} is already active")
            return
        api = RunAPI(run.context.context.mcp)
        active = _ActiveRun(RunOutput(run.context.run_id, self._send_result, api=api))
        self._runs[run.context.run_id] = active
        tg.start_soon(self._run, request_id, runner, run.context, active)

    async def _run(
        self, request_id: JSONValue, runner: AgentRunner, ctx: AgentRunContext, active: _ActiveRun
    ) -> None:
        out = active.out
        try:
            try:
                async with out.api:  # the run's MCP connection ends with the run
                    with active.scope:
                        await runner.run(ctx, out)
            except RunAPIError as exc:  # a facts call the runner did not handle: report its code
                logger.warning("Runner %r failed in run %r: %s", runner.name, ctx.run_id, exc)
                if not out.ended:
                    details: JSONObject = {**exc.details, "tool": exc.tool} if exc.tool else exc.details
                    await out.failed(exc.code, exc.message, exc.retryable, details)
            except Exception as exc:
                logger.exception("Runner %r failed in run %r", runner.name, ctx.run_id)
                if not out.ended:
                    await out.failed("runner.error", _describe(exc))
            else:
                if not out.ended and active.scope.cancel_called:
                    await out.failed("cancelled", f"Run cancelled: {active.reason}")
                elif not out.ended:
                    await out.completed()
            await self._answer(request_id, {"status": out.status or "failed"})
        finally:
            del self._runs[ctx.run_id]
            active.done.set()

    async def _wind_down(self) -> None:
        """Cancel every run and give them a bounded moment to report it."""
        runs = list(self._runs.values())
        for active in runs:
            active.reason = "the plugin is shutting down"
            active.scope.cancel()
        with anyio.move_on_after(_SHUTDOWN_GRACE):
            for active in runs:
                await active.done.wait()

    async def _send_result(self, result: AgentRunResult) -> None:
        params = {"run_id": result.run_id, "result": result.model_dump(mode="json")}
        await self._write({"jsonrpc": "2.0", "method": METHOD_RESULT, "params": params})

    async def _answer(self, request_id: JSONValue, result: JSONObject) -> None:
        await self._write({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def _error(self, request_id: JSONValue, code: int, message: str) -> None:
        await self._write({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})

    async def _write(self, message: JSONObject) -> None:
        data = (json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        async with self._write_lock:
            if self._out_broken:
                return
            try:
                # Not abandoned on cancel: a line is either written whole or not started.
                await anyio.to_thread.run_sync(_write_all, self._out_fd, data)
            except OSError as exc:
                self._out_broken = True
                logger.error("The host stopped reading stdout (%s); dropping further output.", exc)


def _describe(exc: BaseException) -> str:
    # A task group inside a runner wraps a single failure; report the failure, not the wrapper.
    exc = sole_leaf(exc)
    return str(exc) or type(exc).__name__


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


__all__ = [
    "AgentRunContext",
    "AgentRunner",
    "ArtifactChunk",
    "ArtifactMetadata",
    "ArtifactRef",
    "Capabilities",
    "ConfigField",
    "ContextSupport",
    "Deleted",
    "EventPage",
    "EventRecord",
    "HistoryPage",
    "HistorySearch",
    "KnowledgeBase",
    "KnowledgeChunk",
    "Permissions",
    "RunAPI",
    "RunAPIError",
    "RunOutput",
    "RunTool",
    "SearchHit",
    "StateList",
    "StateListItem",
    "StateValue",
    "StateWritten",
    "StorageList",
    "StorageListItem",
    "StorageValue",
    "StorageWritten",
    "ToolResult",
    "TranscriptItem",
    "Usage",
    "installed_version",
    "serve",
]
