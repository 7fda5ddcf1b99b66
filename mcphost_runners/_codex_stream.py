"""Codex's native streams → results: `codex exec --json` (a cold turn) and `codex app-server` (a warm one).

Owns the mapping of Codex's events onto results and, for a warm process, the JSON-RPC conversation of
one turn with `codex app-server` (the protocol Codex's IDE extension speaks, pinned with the CLI; the
messages are those of `codex app-server generate-ts` for that version). Does not own the command lines
or the process (`codex.py`, `_harness_warm.py`), nor the terminal result (`harness.py`).

Cold (`CodexStreamMapper`): `thread.started` → the server is connected (it is required) and
`external.session_id`; `item.*` `agent_message` → the answer (and a `message.delta` when the surface
streams), `mcp_tool_call`, `command_execution`, `file_change`, `web_search` → `tool.call.*`;
`turn.completed` → `run.completed` with usage; `turn.failed` → `run.failed`.

Warm (`AppServerTurn`), written and read on the warm process's stdin/stdout, one JSON object a line:
    → initialize, initialized                                  (once, on a process started for this turn)
    → thread/start {cwd, sandbox, approvalPolicy: never}       (or thread/resume {threadId, ...} when the
                                                                conversation's thread is not the process's)
    → mcpServerStatus/list {threadId, serverName: mcphost}     (every turn: the fail-closed check)
    → turn/start {threadId, input: [text]}
    ← item/started, item/completed, thread/tokenUsage/updated, error, ... , turn/completed
Each item is translated to the `codex exec --json` item it becomes in Codex's own exec (camelCase types
and fields to snake_case; `declined` file changes to `failed`) and mapped by the cold mapper, so a warm
turn gives the same results as a cold one. Differences, each deliberate: the server's connection is
checked every turn (`runtimeStatus == "connected"` for `mcphost` on the thread, else the turn fails
closed before it starts); usage is the turn's own (the thread's token total at its end minus the total
before its first model request), not the thread's running total; requests from the server (approvals,
elicitations) are declined, as the cold run's `approval_policy = "never"` never asks; an interrupted turn
fails. Notifications `codex exec` ignores are ignored here too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

import anyio

from mcphost.protocol import AgentRunContext, JSONObject, JSONValue, Usage, is_error_code
from mcphost_runners._harness_config import SERVER_NAME
from mcphost_runners._harness_stream import (
    Diagnostics,
    Failure,
    SessionCallback,
    StreamMapper,
    as_dict,
    as_int,
    as_list,
    as_str,
    preview,
)
from mcphost_runners.sdk import RunOutput

_TOOL_ITEMS = {"mcp_tool_call", "command_execution", "file_change", "web_search"}
_QUIET_ITEMS = {"reasoning", "todo_list"}


class CodexStreamMapper(StreamMapper):
    """`codex exec --json` JSONL events → results."""

    known_events = frozenset(
        {
            "thread.started",
            "turn.started",
            "turn.completed",
            "turn.failed",
            "item.started",
            "item.updated",
            "item.completed",
            "error",
        }
    )

    def __init__(
        self, ctx: AgentRunContext, out: RunOutput, diagnostics: Diagnostics, on_session: SessionCallback
    ) -> None:
        super().__init__(ctx, out, diagnostics, on_session)
        self._started: dict[str, str] = {}
        """Open tool calls: item id → tool name."""
        self._ended: set[str] = set()
        self._last_error: str | None = None

    async def feed(self, event: JSONObject) -> None:
        match event.get("type"):
            case "thread.started":
                # The mcphost server is `required`: Codex starts no thread unless it initialized.
                self.state.mcp_connected = True
                thread_id = as_str(event.get("thread_id"))
                if thread_id:
                    await self.session_started(thread_id)
            case "turn.started":
                pass
            case "item.started" | "item.updated" | "item.completed":
                await self._item(str(event["type"]), as_dict(event.get("item")), event)
            case "turn.completed":
                self.state.finished = True
                self.state.usage = _usage(as_dict(event.get("usage")))
            case "turn.failed":
                self.state.finished = True
                message = as_str(as_dict(event.get("error")).get("message")) or self._last_error
                self.fail(_turn_failure(message or "Codex reported a failed turn"))
            case "error":
                self._last_error = as_str(event.get("message"))
                self.diagnostics.add("cli_error", self._last_error or "error", line=self.line)
            case _:
                self.unknown(event)

    async def _item(self, phase: str, item: JSONObject, event: JSONObject) -> None:
        kind, item_id = as_str(item.get("type")), as_str(item.get("id"))
        if kind == "agent_message":
            text = as_str(item.get("text"))
            if phase == "item.completed" and text:
                self.state.final_text = text
                if self.ctx.delivery.supports_streaming:
                    await self.out.delta(text)
        elif kind in _TOOL_ITEMS and item_id:
            await self._tool(phase, kind, item_id, item)
        elif kind == "error":
            self.diagnostics.add("cli_warning", as_str(item.get("message")) or "error item", line=self.line)
        elif kind not in _QUIET_ITEMS:
            self.unknown(item if kind else event, "item")

    async def _tool(self, phase: str, kind: str, item_id: str, item: JSONObject) -> None:
        if item_id in self._ended:
            return
        if item_id not in self._started:
            name, parameters = _tool_call(kind, item)
            self._started[item_id] = name
            await self.out.tool_started(item_id, name, parameters)
        if phase != "item.completed":
            return
        name = self._started.pop(item_id)
        self._ended.add(item_id)
        error = _tool_error(kind, item)
        if error is not None:
            await self.out.tool_completed(item_id, name, error_code=error[0], error_message=error[1])
        else:
            await self.out.tool_completed(item_id, name, result_preview=_tool_output(kind, item))


def _tool_call(kind: str, item: JSONObject) -> tuple[str, JSONObject]:
    if kind == "mcp_tool_call":
        server, tool = as_str(item.get("server")) or "?", as_str(item.get("tool")) or "?"
        return f"mcp__{server}__{tool}", as_dict(item.get("arguments"))
    if kind == "command_execution":
        return "shell", {"command": as_str(item.get("command")) or ""}
    if kind == "file_change":
        return "apply_patch", {"changes": as_list(item.get("changes"))}
    return "web_search", {"query": as_str(item.get("query")) or ""}


def _tool_error(kind: str, item: JSONObject) -> tuple[str, str] | None:
    status = as_str(item.get("status"))
    if kind == "mcp_tool_call":
        error, result = as_dict(item.get("error")), as_dict(item.get("result"))
        is_error = result.get("is_error") is True or result.get("isError") is True
        if not (error or is_error or status == "failed"):
            return None
        # A tool error answered by the server (`code: message`, PROTOCOL §5) is in the result's content;
        # a call that never got an answer has only Codex's own error message.
        text = preview(result.get("content")) or as_str(error.get("message")) or "the tool call failed"
        code, sep, rest = text.partition(": ")
        return (code, rest) if sep and is_error_code(code) else ("runtime_error", text)
    if kind == "command_execution":
        exit_code = item.get("exit_code")
        if status in ("failed", "declined") or (isinstance(exit_code, int) and exit_code != 0):
            code = "unauthorized" if status == "declined" else "runtime_error"
            return code, f"exit code {exit_code}: {preview(item.get('aggregated_output'), 500)}"
        return None
    if status == "failed":
        return "runtime_error", f"{kind} failed"
    return None


def _tool_output(kind: str, item: JSONObject) -> str:
    if kind == "mcp_tool_call":
        result = as_dict(item.get("result"))
        structured = result.get("structured_content")
        return preview(structured if structured is not None else result.get("content"))
    if kind == "command_execution":
        return preview(item.get("aggregated_output"))
    return preview(item.get("changes") if kind == "file_change" else item.get("query"))


def _turn_failure(message: str) -> Failure:
    lowered = message.lower()
    if "401" in message or "unauthorized" in lowered or "invalid api key" in lowered:
        return Failure("unauthorized", f"The model API refused the request: {message}")
    if "429" in message or "rate limit" in lowered:
        return Failure("rate_limited", f"The model API is rate limited: {message}", retryable=True)
    return Failure("runner.error", message, details={"error": message})


def _usage(usage: JSONObject) -> Usage:
    fresh = as_int(usage.get("input_tokens")) or 0
    output = as_int(usage.get("output_tokens")) or 0
    return Usage(
        input_tokens=fresh,
        output_tokens=output,
        total_tokens=fresh + output,
        extra={
            "cached_input_tokens": as_int(usage.get("cached_input_tokens")),
            "reasoning_output_tokens": as_int(usage.get("reasoning_output_tokens")),
        },
    )


# -- a warm turn: `codex app-server` ----------------------------------------------------------------------

CLIENT_INFO: JSONObject = {"name": "mcphost", "title": "mcphost harness runner", "version": "1"}
QUIET_NOTIFICATIONS = [
    "item/agentMessage/delta",
    "item/reasoning/summaryTextDelta",
    "item/reasoning/summaryPartAdded",
    "item/reasoning/textDelta",
    "item/commandExecution/outputDelta",
    "item/fileChange/outputDelta",
    "item/plan/delta",
    "thread/status/changed",
    "account/rateLimits/updated",
    "remoteControl/status/changed",
]
"""Streamed pieces a cold run does not deliver either: the server is asked not to send them."""
_WARNINGS = frozenset({"configWarning", "deprecationNotice", "warning", "model/rerouted"})
"""Notifications `codex exec --json` prints as `error` items (→ `cli_warning` diagnostics)."""
_DECLINED: dict[str, JSONObject] = {
    "item/commandExecution/requestApproval": {"decision": "decline"},
    "item/fileChange/requestApproval": {"decision": "decline"},
    "item/permissions/requestApproval": {"permissions": {}, "scope": "turn"},
    "mcpServer/elicitation/request": {"action": "decline", "content": None, "_meta": None},
}
"""Answers to the server's requests that a cold run (`approval_policy = "never"`, nobody to ask) never
gets to: each is declined. Any other request gets a JSON-RPC error."""
_RESUME_MISSING = ("no rollout found", "not found", "no such thread")


class WarmChannel(Protocol):
    """The warm process as a turn sees it (`_harness_warm.WarmProcess`): the thread it holds, its stdin."""

    session_id: str | None

    async def send(self, line: bytes) -> None: ...


@dataclass(frozen=True)
class ThreadSettings:
    """What `thread/start` / `thread/resume` carry: the same choices as `codex exec`'s flags."""

    cwd: str
    sandbox: str

    def params(self) -> JSONObject:
        return {"cwd": self.cwd, "sandbox": self.sandbox, "approvalPolicy": "never"}


def app_server_line(message: JSONObject) -> bytes:
    """One JSON-RPC message as app-server reads it (one line; the `jsonrpc` member is left out)."""
    return (json.dumps(message, ensure_ascii=False) + "\n").encode()


class AppServerTurn(CodexStreamMapper):
    """One turn on a warm `codex app-server` process: the requests it writes, the server's requests it
    answers, and the turn's notifications mapped as `codex exec --json` maps them (module docstring)."""

    def __init__(
        self,
        ctx: AgentRunContext,
        out: RunOutput,
        diagnostics: Diagnostics,
        on_session: SessionCallback,
        *,
        process: WarmChannel,
        settings: ThreadSettings,
        prompt: str,
        resume: str | None,
        fresh: bool,
    ) -> None:
        super().__init__(ctx, out, diagnostics, on_session)
        self._process = process
        self._settings = settings
        self._prompt = prompt
        self._resume = resume
        """The thread to continue when the process holds none or another one."""
        self._fresh = fresh
        """The process was started for this turn: it needs the handshake first."""
        prefix = ctx.run_id
        self._ids = {
            "initialize": f"{prefix}/initialize",
            "thread": f"{prefix}/thread",
            "mcp": f"{prefix}/mcp",
            "turn": f"{prefix}/turn",
        }
        self._turn_id: str | None = None
        self._usage_before: JSONObject | None = None
        self._usage_after: JSONObject | None = None

    def opening(self) -> bytes:
        """What starts the turn: the handshake on a new process, a thread switch, or the MCP check."""
        if self._fresh:
            capabilities: JSONObject = {
                "experimentalApi": False,
                "requestAttestation": False,
                "optOutNotificationMethods": list(QUIET_NOTIFICATIONS),
            }
            return self._request(
                "initialize", "initialize", {"clientInfo": CLIENT_INFO, "capabilities": capabilities}
            )
        if self._process.session_id is None or (
            self._resume is not None and self._resume != self._process.session_id
        ):
            return self._thread_request(self._resume)
        return self._mcp_check()

    def _request(self, key: str, method: str, params: JSONObject) -> bytes:
        return app_server_line({"id": self._ids[key], "method": method, "params": params})

    def _thread_request(self, resume: str | None) -> bytes:
        params = self._settings.params()
        if resume is None:
            return self._request("thread", "thread/start", params)
        return self._request("thread", "thread/resume", {"threadId": resume, **params})

    def _mcp_check(self) -> bytes:
        params: JSONObject = {
            "threadId": self._process.session_id,
            "serverName": SERVER_NAME,
            "detail": "toolsAndAuthOnly",
        }
        return self._request("mcp", "mcpServerStatus/list", params)

    def _turn_start(self) -> bytes:
        text: JSONObject = {"type": "text", "text": self._prompt, "text_elements": []}
        return self._request("turn", "turn/start", {"threadId": self._process.session_id, "input": [text]})

    async def _send(self, line: bytes) -> None:
        try:
            await self._process.send(line)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self.fail(
                Failure(
                    "runner.crashed", f"codex app-server stopped reading its input: {exc!r}", retryable=True
                ),
                stop=True,
            )

    async def feed(self, event: JSONObject) -> None:
        method, request_id = as_str(event.get("method")), event.get("id")
        if method is not None and request_id is not None:
            await self._answer(method, request_id)
        elif method is not None:
            await self._notification(method, as_dict(event.get("params")), event)
        elif isinstance(request_id, str) and request_id in self._ids.values():
            await self._response(request_id, event)
        else:
            self.unknown(event, "JSON-RPC message")

    # -- responses to our requests

    async def _response(self, request_id: str, event: JSONObject) -> None:
        error = as_dict(event.get("error"))
        message = as_str(error.get("message")) or json.dumps(error)[:500]
        result = as_dict(event.get("result"))
        if request_id == self._ids["initialize"]:
            if error:
                self.fail(
                    Failure("runner.error", f"codex app-server refused initialize: {message}"), stop=True
                )
                return
            await self._send(app_server_line({"method": "initialized"}))
            await self._send(self._thread_request(self._resume))
        elif request_id == self._ids["thread"]:
            await self._thread_response(error, message, result)
        elif request_id == self._ids["mcp"]:
            await self._mcp_response(error, message, result)
        elif error:
            self.fail(_turn_failure(f"codex app-server refused turn/start: {message}"), stop=True)
        else:
            self._turn_id = as_str(as_dict(result.get("turn")).get("id"))

    async def _thread_response(self, error: JSONObject, message: str, result: JSONObject) -> None:
        if error and self._resume is not None and any(m in message.lower() for m in _RESUME_MISSING):
            # The CLI does not know the thread to resume (its home was wiped): one new thread instead.
            self.diagnostics.add(
                "session_not_resumed", f"codex does not know thread {self._resume!r}; starting a new thread"
            )
            self._resume = None
            await self._send(self._thread_request(None))
            return
        if error:
            if SERVER_NAME in message and "MCP" in message:
                failure = Failure(
                    "runner.mcp_unavailable",
                    f"Codex could not start the required {SERVER_NAME!r} MCP server: {message[-500:]}",
                    retryable=True,
                )
            else:
                failure = Failure("runner.error", f"codex app-server could not open the thread: {message}")
            self.fail(failure, stop=True)
            return
        thread_id = as_str(as_dict(result.get("thread")).get("id"))
        if not thread_id:
            self.fail(Failure("runner.error", "codex app-server opened a thread without an id"), stop=True)
            return
        self._process.session_id = thread_id
        await self._send(self._mcp_check())

    async def _mcp_response(self, error: JSONObject, message: str, result: JSONObject) -> None:
        servers = [as_dict(s) for s in as_list(result.get("data"))]
        status = next((s.get("runtimeStatus") for s in servers if s.get("name") == SERVER_NAME), None)
        if error or status != "connected":
            self.state.mcp_connected = False
            why = f"the status request failed: {message}" if error else f"its status is {status!r}"
            self.fail(
                Failure(
                    "runner.mcp_unavailable",
                    f"Codex's {SERVER_NAME!r} MCP server is not connected ({why}); the turn was not started.",
                    retryable=True,
                ),
                stop=True,
            )
            return
        self.state.mcp_connected = True
        if self._process.session_id is not None:  # it is: the check names the thread
            await self.session_started(self._process.session_id)
        await self._send(self._turn_start())

    # -- the server's requests

    async def _answer(self, method: str, request_id: JSONValue) -> None:
        declined = _DECLINED.get(method)
        self.diagnostics.add(
            "cli_request", f"codex asked {method!r}; declined (nobody to ask)", line=self.line
        )
        if declined is not None:
            await self._send(app_server_line({"id": request_id, "result": declined}))
        else:
            error: JSONObject = {"code": -32601, "message": f"mcphost does not answer {method!r}"}
            await self._send(app_server_line({"id": request_id, "error": error}))

    # -- notifications

    async def _notification(self, method: str, params: JSONObject, event: JSONObject) -> None:
        thread = as_str(params.get("threadId"))
        if thread is not None and self._process.session_id is not None and thread != self._process.session_id:
            return  # another thread's (none is started here, but the server may know others)
        turn = as_str(params.get("turnId"))
        if turn is not None and turn != self._turn_id:
            return  # not this turn's: an earlier one's, or a resumed thread's past
        match method:
            case "turn/started":
                self._turn_id = self._turn_id or as_str(as_dict(params.get("turn")).get("id"))
            case "item/started" | "item/completed":
                item = as_dict(params.get("item"))
                mapped = exec_item(item)
                if mapped is not None:
                    phase = "item.started" if method == "item/started" else "item.completed"
                    await self._item(phase, mapped, event)
            case "thread/tokenUsage/updated":
                usage = as_dict(params.get("tokenUsage"))
                if self._usage_before is None:
                    self._usage_before = _subtract(as_dict(usage.get("total")), as_dict(usage.get("last")))
                self._usage_after = as_dict(usage.get("total"))
            case "turn/completed":
                completed = as_dict(params.get("turn"))
                if self._turn_id in (None, as_str(completed.get("id"))):
                    await self._completed(completed)
            case "error":
                error = as_dict(params.get("error"))
                self._last_error = _error_text(error)
                self.diagnostics.add("cli_error", self._last_error or "error", line=self.line)
            case _ if method in _WARNINGS:
                text = as_str(params.get("summary")) or as_str(params.get("message")) or method
                details = as_str(params.get("details"))
                self.diagnostics.add(
                    "cli_warning", f"{text} ({details})" if details else text, line=self.line
                )
            case _:
                pass  # as `codex exec` does: the rest is for interactive clients

    async def _completed(self, turn: JSONObject) -> None:
        self.state.finished = True
        status = as_str(turn.get("status"))
        if status == "completed":
            texts = [
                as_str(i.get("text"))
                for i in map(as_dict, as_list(turn.get("items")))
                if i.get("type") == "agentMessage"
            ]
            if texts and texts[-1]:
                self.state.final_text = texts[-1]
            after = self._usage_after or {}
            self.state.usage = _usage(_snake(_subtract(after, self._usage_before or {})))
        elif status == "failed":
            message = _error_text(as_dict(turn.get("error"))) or self._last_error
            self.fail(_turn_failure(message or "Codex reported a failed turn"))
        else:
            self.fail(Failure("runner.error", f"Codex ended the turn as {status!r}", retryable=True))


def exec_item(item: JSONObject) -> JSONObject | None:
    """An app-server `ThreadItem` as the `codex exec --json` item Codex's exec makes of it, or None for
    the items exec does not print (user messages, plans, ...)."""
    kind, item_id = as_str(item.get("type")), item.get("id")
    match kind:
        case "agentMessage":
            return {"type": "agent_message", "id": item_id, "text": item.get("text")}
        case "reasoning":
            return {"type": "reasoning", "id": item_id}
        case "commandExecution":
            return {
                "type": "command_execution",
                "id": item_id,
                "command": item.get("command"),
                "aggregated_output": item.get("aggregatedOutput") or "",
                "exit_code": item.get("exitCode"),
                "status": _snake_status(item.get("status")),
            }
        case "fileChange":
            status = _snake_status(item.get("status"))
            changes: list[JSONValue] = [
                {"path": c.get("path"), "kind": as_dict(c.get("kind")).get("type"), "diff": c.get("diff")}
                for c in map(as_dict, as_list(item.get("changes")))
            ]
            return {
                "type": "file_change",
                "id": item_id,
                "changes": changes,
                "status": "failed" if status == "declined" else status,
            }
        case "mcpToolCall":
            result = item.get("result")
            mapped: JSONObject = {
                "type": "mcp_tool_call",
                "id": item_id,
                "server": item.get("server"),
                "tool": item.get("tool"),
                "arguments": item.get("arguments"),
                "status": _snake_status(item.get("status")),
                "error": item.get("error"),
                "result": None,
            }
            if result is not None:
                body = as_dict(result)
                mapped["result"] = {
                    "content": body.get("content"),
                    "structured_content": body.get("structuredContent"),
                }
            return mapped
        case "webSearch":
            return {"type": "web_search", "id": item_id, "query": item.get("query")}
        case _:
            return None


def _snake_status(value: object) -> str | None:
    return {"inProgress": "in_progress"}.get(value, value) if isinstance(value, str) else None


_USAGE_FIELDS = {
    "inputTokens": "input_tokens",
    "cachedInputTokens": "cached_input_tokens",
    "outputTokens": "output_tokens",
    "reasoningOutputTokens": "reasoning_output_tokens",
}


def _subtract(total: JSONObject, part: JSONObject) -> JSONObject:
    out: JSONObject = {}
    for key in _USAGE_FIELDS:
        value = (as_int(total.get(key)) or 0) - (as_int(part.get(key)) or 0)
        out[key] = max(value, 0)
    return out


def _snake(usage: JSONObject) -> JSONObject:
    return {snake: usage.get(camel) for camel, snake in _USAGE_FIELDS.items()}


def _error_text(error: JSONObject) -> str | None:
    message = as_str(error.get("message"))
    details = as_str(error.get("additionalDetails"))
    return f"{message} ({details})" if message and details else message
