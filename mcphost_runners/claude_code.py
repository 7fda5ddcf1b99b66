"""`plugin:mcphost/claude-code/default`: Claude Code (`claude -p`) as a runner (`python -m mcphost_runners.claude_code`).

Owns Claude Code's command line, its MCP config and the mapping of its `stream-json` output onto
results. The shared frame (working folder, projection, process group, session lock, terminal result)
is `mcphost_runners.harness`.

Launch (argv, no secret in it):
    claude -p --output-format stream-json --verbose [--include-partial-messages]
           --mcp-config <folder>/.mcphost-mcp.json --strict-mcp-config
           --allowedTools mcp__mcphost,<config.allowed_tools> [--disallowedTools ...]
           --permission-mode <config.permission_mode=dontAsk> --max-turns <config.max_turns=8>
           [--model M] --append-system-prompt <config.prompt + where CONTEXT.md is>
           [--resume <external.session_id>] -- <input text>
in the run's folder, with `HOME` and `CLAUDE_CONFIG_DIR` private to the runner (`<data_dir>/claude-home`;
`--resume` needs the same folder and config dir), telemetry, auto-update and non-essential traffic off,
`ENABLE_TOOL_SEARCH=false` so the model sees the mcphost tools directly, and
`MCP_CONNECTION_NONBLOCKING=0` so the first turn waits until the mcphost server has listed its tools.

The MCP config file (mode 0600, removed when the CLI ends) holds the run's server as Streamable HTTP with
the bearer header, or as the stdio bridge with the token in its environment, plus `extra_mcp_servers`.

On a host model (`model = "host:<id>"`) the CLI gets `ANTHROPIC_BASE_URL` = the run's Anthropic endpoint
(`context.models.anthropic`) and the run token as `ANTHROPIC_API_KEY`, and no provider key variable
(`PROVIDER_KEY_ENV`); a warm process gets the session's endpoint (`context.mcp.session.models`) and the
session token instead, which serve whichever run of the session is current.

Stream mapping: `system/init` → fail closed unless `mcphost` is `connected`, else `external.session_id`
and `external.working_directory` into conversation state; `stream_event` text deltas → `message.delta`
(when the surface streams); `assistant` tool_use → `tool.call.started` (and, for `AskUserQuestion`, `interaction.requested`); `user` tool_result →
`tool.call.completed`; `result` → the final message and `run.completed` with usage and cost, or
`run.failed` (`error_during_execution`, `error_max_turns`, API errors by status, permission denials).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from mcphost.protocol import (
    AgentRunContext,
    InteractionRequested,
    InteractionRequestedData,
    JSONObject,
    Usage,
    is_error_code,
)
from mcphost_runners._harness_config import host_model, host_model_access, without_provider_keys
from mcphost_runners._harness_files import make_private_dir, write_private
from mcphost_runners._harness_stream import (
    Diagnostics,
    Failure,
    SessionCallback,
    StreamMapper,
    as_dict,
    as_float,
    as_int,
    as_list,
    as_str,
    preview,
)
from mcphost_runners.harness import (
    MAX_ARGV_TEXT,
    SERVER_NAME,
    ExternalSession,
    HarnessConfig,
    HarnessRunner,
    Launch,
    Workspace,
    context_hint,
    harness_config_schema,
    harness_environment,
    prompt_of,
    run_token,
    trace_environment,
)
from mcphost_runners.sdk import RunOutput, serve

PermissionMode = Literal["dontAsk", "default", "acceptEdits", "plan", "auto", "bypassPermissions"]
ASK_USER_TOOL = "AskUserQuestion"
"""Claude Code's ask-the-user tool: its use becomes `interaction.requested` (the host parks the run)."""
MCP_CONFIG_FILE = ".mcphost-mcp.json"
WARM_MCP_CONFIG_FILE = ".mcphost-warm-mcp.json"
INPUT_FILE = "INPUT.md"

CLAUDE_DEFAULT_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "ENABLE_TOOL_SEARCH": "false",
    # Claude Code connects MCP servers in the background and may send the first turn before a slow one
    # (a bridge still importing on a busy host) has listed its tools; "0" makes it wait for them.
    "MCP_CONNECTION_NONBLOCKING": "0",
    "NO_COLOR": "1",
}
"""Defaults the agent's `environment` may override."""


class ClaudeCodeConfig(HarnessConfig):
    reserved_env: ClassVar[frozenset[str]] = HarnessConfig.reserved_env | {"CLAUDE_CONFIG_DIR"}

    allowed_tools: list[str] = Field(default_factory=list[str], title="More allowed tools")
    """More tools Claude Code may use without asking (`Read`, `Bash(git status)`, ...); the mcphost
    tools are always allowed."""
    disallowed_tools: list[str] = Field(default_factory=list[str], title="Disallowed tools")
    permission_mode: PermissionMode = Field(default="dontAsk", title="Permission mode")
    """`dontAsk` denies every tool not allowed above (there is nobody to ask in `-p` mode)."""
    max_turns: int = Field(default=8, ge=1, le=500, title="Maximum agent turns")


class ClaudeCodeRunner(HarnessRunner):
    """Runs one turn of a Claude Code session per event, resuming the conversation's session."""

    name = "default"
    label = {"en": "Claude Code"}
    description = {"en": "Claude Code (claude -p) with the run's mcphost MCP server injected."}
    harness = "claude-code"
    cli_name = "claude"
    warm_capable = True
    config_model = ClaudeCodeConfig
    skills_folder = ".claude/skills"
    config_schema = harness_config_schema(ClaudeCodeConfig)
    metadata = {"harness": "claude-code", "cli": "@anthropic-ai/claude-code"}

    def launch(
        self,
        ctx: AgentRunContext,
        config: HarnessConfig,
        workspace: Workspace,
        cli: Path,
        session: ExternalSession,
    ) -> Launch:
        assert isinstance(config, ClaudeCodeConfig)
        mcp_config = write_private(
            workspace.root,
            workspace.relative(MCP_CONFIG_FILE),
            json.dumps(mcp_servers(ctx, config), indent=2),
        )
        argv = self._argv(ctx, config, workspace, cli, session, mcp_config)
        argv += ["--", self._prompt(ctx, workspace)]
        return Launch(argv, self._environment(ctx, config, workspace), secret_files=[mcp_config])

    def launch_warm(
        self,
        ctx: AgentRunContext,
        config: HarnessConfig,
        workspace: Workspace,
        cli: Path,
        session: ExternalSession,
    ) -> Launch:
        """`claude -p --input-format stream-json`: reads one user message per line from stdin and answers
        each with its events, ending in a `result`; its MCP server is the warm session endpoint."""
        assert isinstance(config, ClaudeCodeConfig)
        mcp_config = write_private(
            workspace.root,
            workspace.relative(WARM_MCP_CONFIG_FILE),
            json.dumps(mcp_servers(ctx, config, warm=True), indent=2),
        )
        argv = self._argv(ctx, config, workspace, cli, session, mcp_config)
        argv[2:2] = ["--input-format", "stream-json"]
        return Launch(argv, self._environment(ctx, config, workspace, warm=True), secret_files=[mcp_config])

    def turn_message(self, ctx: AgentRunContext, workspace: Workspace) -> bytes:
        message = {"type": "user", "message": {"role": "user", "content": self._prompt(ctx, workspace)}}
        return (json.dumps(message) + "\n").encode()

    def _argv(
        self,
        ctx: AgentRunContext,
        config: ClaudeCodeConfig,
        workspace: Workspace,
        cli: Path,
        session: ExternalSession,
        mcp_config: Path,
    ) -> list[str]:
        argv = [str(cli), "-p", "--output-format", "stream-json", "--verbose"]
        if ctx.delivery.supports_streaming:
            argv.append("--include-partial-messages")
        argv += ["--mcp-config", str(mcp_config), "--strict-mcp-config"]
        argv += ["--allowedTools", ",".join([f"mcp__{SERVER_NAME}", *config.allowed_tools])]
        if config.disallowed_tools:
            argv += ["--disallowedTools", ",".join(config.disallowed_tools)]
        argv += ["--permission-mode", config.permission_mode, "--max-turns", str(config.max_turns)]
        model = host_model(config) or config.model
        if model:
            argv += ["--model", model]
        system = "\n\n".join(part for part in (config.prompt, context_hint(workspace)) if part)
        argv += ["--append-system-prompt", system[:MAX_ARGV_TEXT]]
        if session.session_id:
            argv += ["--resume", session.session_id]
        return argv

    def _prompt(self, ctx: AgentRunContext, workspace: Workspace) -> str:
        prompt = prompt_of(ctx)
        if len(prompt.encode()) > MAX_ARGV_TEXT:
            write_private(workspace.root, workspace.relative(INPUT_FILE), prompt)
            prompt = (
                "The message is too long for the command line; read it from "
                f"{workspace.relative(INPUT_FILE)} first."
            )
        return prompt

    def _environment(
        self, ctx: AgentRunContext, config: ClaudeCodeConfig, workspace: Workspace, *, warm: bool = False
    ) -> dict[str, str]:
        home = make_private_dir(workspace.data_dir / "claude-home")
        env = harness_environment(
            config,
            projected=workspace.env,
            defaults=CLAUDE_DEFAULT_ENV,
            controlled={
                "HOME": str(home),
                "CLAUDE_CONFIG_DIR": str(home / ".claude"),
                **trace_environment(ctx),
            },
        )
        model_id = host_model(config)
        if model_id is None:
            return env
        # On a host model the CLI talks to the run's Anthropic endpoint with the run token (a warm one
        # to the session's, with the session token); no provider key reaches its environment, whatever
        # the agent's `environment` or `pass_env` say.
        endpoints, token = host_model_access(ctx, warm=warm)
        return {
            **without_provider_keys(env),
            "ANTHROPIC_BASE_URL": endpoints.anthropic,
            "ANTHROPIC_API_KEY": token,
            "ANTHROPIC_MODEL": model_id,
            "ANTHROPIC_SMALL_FAST_MODEL": model_id,
            # Claude Code reads 'sonnet', 'opus' and 'haiku' as aliases: each names the host model here.
            **{f"ANTHROPIC_DEFAULT_{alias}_MODEL": model_id for alias in ("SONNET", "OPUS", "HAIKU")},
        }

    def mapper(
        self, ctx: AgentRunContext, out: RunOutput, diagnostics: Diagnostics, on_session: SessionCallback
    ) -> StreamMapper:
        return ClaudeStreamMapper(ctx, out, diagnostics, on_session)


def mcp_servers(ctx: AgentRunContext, config: HarnessConfig, *, warm: bool = False) -> JSONObject:
    """The `--mcp-config` document: the run's server (HTTP with the bearer header, or the bridge), or
    with `warm` the session's stable endpoint and token."""
    mcp = ctx.context.mcp
    assert mcp is not None
    token = run_token(mcp) or ""
    server: JSONObject
    if warm:
        assert mcp.session is not None
        server = {"type": "http", "url": mcp.session.url, "headers": dict(mcp.session.headers)}
    elif config.mcp_transport == "bridge":
        command = list(mcp.bridge.command)
        server = {"type": "stdio", "command": command[0], "args": command[1:], "env": dict(mcp.bridge.env)}
    else:
        server = {"type": "http", "url": mcp.url, "headers": {"Authorization": f"Bearer {token}"}}
    return {"mcpServers": {SERVER_NAME: server, **config.extra_mcp_servers}}


_KNOWN_SYSTEM = frozenset(
    {
        "init",
        "status",
        "permission_denied",
        "compact_boundary",
        "api_retry",
        "informational",
        "hook_started",
        "hook_progress",
        "hook_response",
        "task_started",
        "task_progress",
        "task_notification",
    }
)


class ClaudeStreamMapper(StreamMapper):
    """`claude -p --output-format stream-json --verbose` events → results."""

    known_events = frozenset(
        {"system", "stream_event", "assistant", "user", "result", "rate_limit_event", "keep_alive"}
    )

    def __init__(
        self, ctx: AgentRunContext, out: RunOutput, diagnostics: Diagnostics, on_session: SessionCallback
    ) -> None:
        super().__init__(ctx, out, diagnostics, on_session)
        self._tools: dict[str, str] = {}
        """Started tool calls: tool_use id → tool name."""
        self._denied: dict[str, str] = {}
        """tool_use id → why Claude Code denied it."""

    async def feed(self, event: JSONObject) -> None:
        match event.get("type"):
            case "system":
                await self._system(event)
            case "stream_event":
                await self._partial(event)
            case "assistant":
                await self._assistant(event)
            case "user":
                await self._user(event)
            case "result":
                self._result(event)
            case "rate_limit_event" | "keep_alive":
                pass
            case _:
                self.unknown(event)

    async def _system(self, event: JSONObject) -> None:
        subtype = as_str(event.get("subtype"))
        if subtype == "init":
            await self._init(event)
        elif subtype == "permission_denied":
            tool_use_id = as_str(event.get("tool_use_id"))
            if tool_use_id:
                self._denied[tool_use_id] = as_str(event.get("message")) or "permission denied"
        elif subtype not in _KNOWN_SYSTEM:
            self.unknown(event, f"system event {subtype!r}")

    async def _init(self, event: JSONObject) -> None:
        servers = [as_dict(s) for s in as_list(event.get("mcp_servers"))]
        ours = next((s for s in servers if s.get("name") == SERVER_NAME), None)
        status = as_str(ours.get("status")) if ours is not None else None
        self.state.extra.update(
            {
                "cli_version": as_str(event.get("claude_code_version")),
                "model": as_str(event.get("model")),
                "permission_mode": as_str(event.get("permissionMode")),
                "mcp_tools": sorted(
                    str(t) for t in as_list(event.get("tools")) if str(t).startswith(f"mcp__{SERVER_NAME}__")
                ),
            }
        )
        if status != "connected":
            self.state.mcp_connected = False
            self.fail(
                Failure(
                    "runner.mcp_unavailable",
                    f"Claude Code reports the {SERVER_NAME!r} MCP server as "
                    f"{status or 'missing'!r} at start-up; the run is stopped instead of answering "
                    "without the host's tools.",
                    retryable=True,
                    details={"mcp_servers": [dict(s) for s in servers]},
                ),
                stop=True,
            )
            return
        self.state.mcp_connected = True
        session_id = as_str(event.get("session_id"))
        if session_id:
            await self.session_started(session_id)

    async def _partial(self, event: JSONObject) -> None:
        if event.get("parent_tool_use_id") is not None or not self.ctx.delivery.supports_streaming:
            return
        inner = as_dict(event.get("event"))
        delta = as_dict(inner.get("delta"))
        if inner.get("type") == "content_block_delta" and delta.get("type") == "text_delta":
            text = as_str(delta.get("text"))
            if text:
                await self.out.delta(text)

    async def _assistant(self, event: JSONObject) -> None:
        for block in as_list(as_dict(event.get("message")).get("content")):
            part = as_dict(block)
            if part.get("type") == "tool_use":
                tool_id, name = as_str(part.get("id")), as_str(part.get("name"))
                if tool_id and name and tool_id not in self._tools:
                    self._tools[tool_id] = name
                    await self.out.tool_started(tool_id, name, as_dict(part.get("input")))
                    if name == ASK_USER_TOOL:
                        await self._ask(tool_id, as_dict(part.get("input")))

    async def _ask(self, tool_id: str, arguments: JSONObject) -> None:
        """Claude Code asks the user: `interaction.requested`, on which the host parks the run."""
        listed = [as_dict(q) for q in as_list(arguments.get("questions"))]
        questions = [q for q in listed if q][:20] or [dict(arguments) or {"question": "(no question text)"}]
        data = InteractionRequestedData(questions=questions, tool_use_id=tool_id[:200])
        await self.out.emit(InteractionRequested(run_id=self.ctx.run_id, data=data))

    async def _user(self, event: JSONObject) -> None:
        for block in as_list(as_dict(event.get("message")).get("content")):
            part = as_dict(block)
            if part.get("type") != "tool_result":
                continue
            tool_id = as_str(part.get("tool_use_id"))
            if not tool_id or tool_id not in self._tools:
                continue
            name = self._tools.pop(tool_id)
            text = preview(part.get("content"))
            if part.get("is_error") is True:
                code, message = self._error_of(tool_id, text)
                await self.out.tool_completed(tool_id, name, error_code=code, error_message=message)
            else:
                await self.out.tool_completed(tool_id, name, result_preview=text)

    def _error_of(self, tool_id: str, text: str) -> tuple[str, str]:
        if tool_id in self._denied:
            return "unauthorized", self._denied[tool_id]
        # mcphost tool errors read `code: message` (PROTOCOL §5).
        code, sep, rest = text.partition(": ")
        if sep and is_error_code(code):
            return code, rest
        return "runtime_error", text

    def _result(self, event: JSONObject) -> None:
        self.state.finished = True
        self.state.usage = _usage(event)
        subtype = as_str(event.get("subtype")) or "unknown"
        self.state.extra.update({"num_turns": as_int(event.get("num_turns")), "result_subtype": subtype})
        session_id = as_str(event.get("session_id"))
        if session_id and self.state.session_id is None and self.state.mcp_connected:
            self.state.session_id = session_id
        text = as_str(event.get("result"))
        errors = [str(e) for e in as_list(event.get("errors"))]
        if subtype == "success" and event.get("is_error") is not True:
            self.state.final_text = text
            denials = [as_dict(d) for d in as_list(event.get("permission_denials"))]
            if denials:
                names = ", ".join(sorted({str(d.get("tool_name")) for d in denials}))
                self.fail(
                    Failure(
                        "unauthorized",
                        f"Claude Code denied {len(denials)} tool call(s) ({names}). Allow them with "
                        "config.allowed_tools if the agent should use them.",
                        details={"permission_denials": [dict(d) for d in denials]},
                        deliver_answer=True,
                    )
                )
            return
        if any("No conversation found" in e for e in errors):
            self.state.resume_missing = True
        status = as_int(event.get("api_error_status"))
        message = "; ".join(errors) or text or f"Claude Code ended with {subtype!r}"
        details: JSONObject = {"subtype": subtype, "errors": list(errors)}
        if status is not None:
            details["api_error_status"] = status
        if subtype == "error_max_turns":
            turns = as_int(event.get("num_turns"))
            message = (
                f"Claude Code used all its turns ({turns if turns is not None else '?'}, see "
                "config.max_turns) without a final answer."
            )
        if status in (401, 403):
            self.fail(
                Failure("unauthorized", f"The model API refused the request: {message}", details=details)
            )
        elif status == 429:
            self.fail(Failure("rate_limited", f"The model API is rate limited: {message}", True, details))
        else:
            retryable = status is not None and status >= 500
            self.fail(Failure("runner.error", message, retryable, details))


def _usage(event: JSONObject) -> Usage:
    usage = as_dict(event.get("usage"))
    fresh = as_int(usage.get("input_tokens")) or 0
    cache_write = as_int(usage.get("cache_creation_input_tokens")) or 0
    cache_read = as_int(usage.get("cache_read_input_tokens")) or 0
    output = as_int(usage.get("output_tokens")) or 0
    extra: JSONObject = {
        "cache_creation_input_tokens": cache_write,
        "cache_read_input_tokens": cache_read,
        "num_turns": as_int(event.get("num_turns")),
        "duration_ms": as_int(event.get("duration_ms")),
        "duration_api_ms": as_int(event.get("duration_api_ms")),
    }
    models = as_dict(event.get("modelUsage"))
    if models:
        extra["models"] = sorted(models)
    return Usage(
        input_tokens=fresh + cache_write + cache_read,
        output_tokens=output,
        total_tokens=fresh + cache_write + cache_read + output,
        cost_usd=as_float(event.get("total_cost_usd")),
        extra=extra,
    )


def main() -> None:
    serve(
        ClaudeCodeRunner(),
        author="mcphost",
        plugin="claude-code",
    )


if __name__ == "__main__":
    main()
