"""`RunOutput`: builds and sends the results of one run (re-exported by `mcphost_runners.sdk`).

Owns the numbering and stamping of results (`sequence` from 1, `run_id`, `timestamp`), the rule that
nothing follows a terminal result, and one builder method per result type. Does not own how a result
travels (`send`: a `runner/result` line in `_plugin_server`, a list in tests).

Invariants:
- Within a run, `sequence` starts at 1 and increases by one per result, in the order results are sent
  (one lock); nothing follows `run.completed`/`run.failed` (a `RuntimeError` says what was tried).
- A result holding NaN or ±Infinity (not JSON numbers) or a lone surrogate (not UTF-8) is not sent:
  `result_line` raises `ValueError` naming the field, so `emit` does, and the run goes on. A JSON-mode
  dump would have sent NaN as null without a word. The line's own encoding finds them: a clean result
  costs no extra walk.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Literal

import anyio
import anyio.lowlevel
import pydantic_core

from mcphost.protocol import (
    MAX_INLINE_ARTIFACT_BYTES,
    MAX_JSON_DEPTH,
    METHOD_RESULT,
    ActionRequested,
    ActionRequestedData,
    AgentRunResult,
    ArtifactCreated,
    ArtifactCreatedData,
    ArtifactRef,
    ContentElement,
    JSONObject,
    JSONValue,
    Message,
    MessageChunk,
    MessageCompleted,
    MessageCompletedData,
    MessageDelta,
    MessageDeltaData,
    RunCompleted,
    RunCompletedData,
    RunFailed,
    RunFailedData,
    StateScope,
    StateUpdated,
    StateUpdatedData,
    ToolCallCompleted,
    ToolCallCompletedData,
    ToolCallStarted,
    ToolCallStartedData,
    Usage,
    json_depth,
    unstorable,
)
from mcphost.protocol.projection import RunProjection
from mcphost.protocol.results import FinishReason
from mcphost.protocol.stdio import RunAnswerStatus
from mcphost_runners._runapi import RunAPI


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
        projection: RunProjection | None = None,
    ) -> None:
        self.run_id = run_id
        self.api = api if api is not None else RunAPI(None)
        """The run's facts and tools over its MCP server (connected on first use)."""
        self.projection = projection if projection is not None else RunProjection()
        """The agent's secrets (environment variables), workspace and skill files (`runner/run`'s
        `projection`): put them around the run, never in a result or a log line."""
        self.sequence = 0
        """The sequence of the last result sent."""
        self.status: RunAnswerStatus | None = None
        """`completed` or `failed` once a terminal result was sent."""
        self._send = send
        # Taken without a checkpoint when free: results sent back to back are queued in one loop turn and
        # reach the host in one write (`_plugin_server._PluginServer._write`).
        self._lock = anyio.Lock(fast_acquire=True)

    @property
    def ended(self) -> bool:
        return self.status is not None

    async def emit(self, result: AgentRunResult) -> AgentRunResult:
        """Send a result built elsewhere; `run_id`, `sequence` and `timestamp` are set here. Raises the
        cancellation of a cancelled run (it does not otherwise yield to the loop), and whatever `send`
        raises, the result then not counted as sent (`serve()`'s: `ValueError` for a result the host
        could not store, see the module's invariants)."""
        await anyio.lowlevel.checkpoint_if_cancelled()
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
        """Ask for a platform action (`action.requested`). The host checks it (your manifest's
        `permissions.platform_api`, the agent's `actions.allow`, a `target` in the event's scope; refused,
        the run fails `unauthorized`), records it and never executes it; with
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


def result_line(result: AgentRunResult) -> bytes:
    """`result`'s `runner/result` notification as one line (compact JSON, UTF-8, `\\n`-terminated).

    Raises:
        ValueError: `result` holds NaN or ±Infinity (which JSON has no number for) or a lone surrogate
            (which UTF-8 cannot encode); the message names the field. Found by the line's encoding
            (`allow_nan=False`, UTF-8), so a clean result costs no walk. What the host refuses for
            its stores alone (NUL, integers past 64 bits, nesting past `MAX_JSON_DEPTH`) it names
            itself, failing the run: sent as it is, nothing about it changes on the way.
    """
    # The Python dump keeps NaN as a float for `allow_nan` to refuse (a JSON-mode dump makes it null);
    # result models hold only JSON types, so both dumps are otherwise the same.
    params = {"run_id": result.run_id, "result": result.model_dump()}
    message = {"jsonrpc": "2.0", "method": METHOD_RESULT, "params": params}
    # pydantic-core's encoder writes what `json.dumps` below writes (but for the spelling of some
    # floats, `1e-7` for `1e-07`), five times faster. It has no mode that refuses NaN, so it writes it
    # as `NaN`: a line that may hold one is encoded again below, which refuses it by name or, for a
    # string that merely spells one, writes the same line.
    try:
        line: bytes | None = pydantic_core.to_json(message, inf_nan_mode="constants")
    except pydantic_core.PydanticSerializationError:  # a lone surrogate: named below
        line = None
    if line is not None and b"NaN" not in line and b"Infinity" not in line:
        return line + b"\n"
    try:
        return (
            json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False) + "\n"
        ).encode()
    except ValueError as exc:  # NaN or ±Infinity; UnicodeEncodeError (a ValueError): a lone surrogate
        dumped = params["result"]
        # json_depth stops past the limit: a value that deep (or cyclic) is not walked.
        if json_depth(dumped) <= MAX_JSON_DEPTH and (problem := unstorable(dumped)) is not None:
            raise ValueError(f"{result.type} result: {problem.message()}; it was not sent") from None
        raise ValueError(f"{result.type} result: not JSON ({exc}); it was not sent") from None
