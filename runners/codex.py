"""`plugin:mcphost/codex-agent/default`: Codex (`codex exec --json`) as a runner (`python -m runners.codex`).

Owns Codex's command line, its config and the mapping of its JSONL events onto results. The shared
frame (working folder, projection, process group, session lock, terminal result) is `runners.harness`.

Launch (argv, no secret in it):
    codex exec --json --skip-git-repo-check --sandbox <config.sandbox=read-only>
          -c approval_policy="never"
          -c mcp_servers.mcphost.url="<run endpoint>"                  (http)
          -c mcp_servers.mcphost.bearer_token_env_var="MCPHOST_RUN_TOKEN"
        | -c mcp_servers.mcphost.command=... args=[...] env_vars=["MCPHOST_RUN_TOKEN"]   (bridge)
          -c mcp_servers.mcphost.required=true
          -c mcp_servers.mcphost.default_tools_approval_mode="approve"
          [-c mcp_servers.<extra>={...}] [-c model_provider="mcphost" -c model_providers.mcphost={...}]
          [-c developer_instructions=<config.prompt + where CONTEXT.md is>] [-m M] [-c <config_overrides>]
          [resume <external.session_id>] -- <input text>
in the run's folder, with `HOME` and `CODEX_HOME` private to the runner (`<data_dir>/codex-home`, whose
`config.toml` (0600) turns analytics, update checks and plugin sync off) and the run token only in the
environment variable `MCPHOST_RUN_TOKEN`. The server is `required`, so Codex refuses to start a thread
without it; approval is granted to this server's tools only.

Model endpoint: `config.base_url` (or `OPENAI_BASE_URL` in the agent's environment) defines a Responses
provider whose key is read from the variable named by `config.api_key_env` (default `OPENAI_API_KEY`).

Stream mapping: `thread.started` → the server is connected (it is required) and `external.session_id`;
`item.*` `agent_message` → the answer (and a `message.delta` when the surface streams), `mcp_tool_call`,
`command_execution`, `file_change`, `web_search` → `tool.call.*`; `turn.completed` → `run.completed` with
usage; `turn.failed` → `run.failed`. A CLI that exits before `thread.started` naming our server on
stderr failed to reach it: `runner.mcp_unavailable`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from mcphost.protocol import (
    AgentRunContext,
    JSONObject,
    JSONValue,
    Usage,
    is_error_code,
    is_json_array,
    is_json_object,
)
from runners._harness_files import make_private_dir, write_private
from runners._harness_stream import (
    Diagnostics,
    Failure,
    SessionCallback,
    StreamMapper,
    StreamState,
    as_dict,
    as_int,
    as_list,
    as_str,
    preview,
)
from runners.harness import (
    MAX_ARGV_TEXT,
    SERVER_NAME,
    TOKEN_ENV,
    Exit,
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
from runners.sdk import RunOutput, serve

Sandbox = Literal["read-only", "workspace-write", "danger-full-access"]
INPUT_FILE = "INPUT.md"
PROVIDER = "mcphost"
CODEX_CONFIG = """\
# Written by mcphost's Codex runner: keep Codex off the network except for the model and MCP servers.
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false
"""
_MCP_STDERR_MARKERS = ("MCP server", "mcp_servers", "handshaking with MCP")


class CodexConfig(HarnessConfig):
    reserved_env: ClassVar[frozenset[str]] = HarnessConfig.reserved_env | {"CODEX_HOME"}

    base_url: str | None = Field(default=None, title="Responses API base URL")
    """A Responses API base URL (`.../v1`); default: `OPENAI_BASE_URL` from `environment`, else Codex's own."""
    api_key_env: str = Field(default="OPENAI_API_KEY", title="Variable holding the API key")
    """The variable holding the model API key (set it through `environment` or `pass_env`)."""
    sandbox: Sandbox = Field(default="read-only", title="Command sandbox")
    """Codex's sandbox for commands the model runs."""
    config_overrides: dict[str, JSONValue] = Field(
        default_factory=dict[str, JSONValue], title="More Codex settings (-c key=value)"
    )
    """More `-c key=value` settings (values as JSON, rendered as TOML); not for `mcp_servers.mcphost`."""

    @field_validator("config_overrides")
    @classmethod
    def _not_our_server(cls, value: dict[str, JSONValue]) -> dict[str, JSONValue]:
        for key in value:
            if key == "mcp_servers" or key.startswith(f"mcp_servers.{SERVER_NAME}"):
                raise ValueError(f"{key!r} would change the run's own server, which the runner sets")
        return value


class CodexRunner(HarnessRunner):
    """Runs one turn of a Codex thread per event, resuming the conversation's thread."""

    name = "default"
    label = {"en": "Codex"}
    description = {"en": "OpenAI Codex (codex exec) with the run's mcphost MCP server injected."}
    harness = "codex"
    cli_name = "codex"
    config_model = CodexConfig
    skills_folder = ".agents/skills"
    config_schema = harness_config_schema(CodexConfig)
    metadata = {"harness": "codex", "cli": "@openai/codex"}

    def launch(
        self,
        ctx: AgentRunContext,
        config: HarnessConfig,
        workspace: Workspace,
        cli: Path,
        session: ExternalSession,
    ) -> Launch:
        assert isinstance(config, CodexConfig)
        mcp = ctx.context.mcp
        assert mcp is not None
        home = make_private_dir(workspace.data_dir / "codex-home")
        codex_home = make_private_dir(home / ".codex")
        write_private(codex_home, "config.toml", CODEX_CONFIG)
        argv = [str(cli), "exec", "--json", "--skip-git-repo-check", "--sandbox", config.sandbox]
        settings: list[tuple[str, JSONValue]] = [("approval_policy", "never")]
        server = f"mcp_servers.{SERVER_NAME}"
        if config.mcp_transport == "bridge":
            command: list[JSONValue] = [*mcp.bridge.command]
            settings += [
                (f"{server}.command", command[0]),
                (f"{server}.args", command[1:]),
                (f"{server}.env_vars", [TOKEN_ENV]),
            ]
        else:
            settings += [(f"{server}.url", mcp.url), (f"{server}.bearer_token_env_var", TOKEN_ENV)]
        settings += [
            (f"{server}.required", True),
            (f"{server}.default_tools_approval_mode", "approve"),
            (f"{server}.startup_timeout_sec", 30),
        ]
        settings += [(f"mcp_servers.{name}", entry) for name, entry in config.extra_mcp_servers.items()]
        base_url = config.base_url or config.environment.get("OPENAI_BASE_URL")
        if base_url:
            provider: JSONObject = {
                "name": "mcphost-configured",
                "base_url": base_url,
                "wire_api": "responses",
                "env_key": config.api_key_env,
            }
            settings += [("model_provider", PROVIDER), (f"model_providers.{PROVIDER}", provider)]
        instructions = "\n\n".join(part for part in (config.prompt, context_hint(workspace)) if part)
        settings.append(("developer_instructions", instructions[:MAX_ARGV_TEXT]))
        settings += list(config.config_overrides.items())
        for key, value in settings:
            argv += ["-c", f"{key}={toml_value(value)}"]
        if config.model:
            argv += ["-m", config.model]
        if session.session_id:
            argv += ["resume", session.session_id]
        prompt = prompt_of(ctx)
        if len(prompt.encode()) > MAX_ARGV_TEXT:
            write_private(workspace.root, workspace.relative(INPUT_FILE), prompt)
            prompt = (
                "The message is too long for the command line; read it from "
                f"{workspace.relative(INPUT_FILE)} first."
            )
        argv += ["--", prompt]
        token = run_token(mcp) or ""
        env = harness_environment(
            config,
            defaults={"NO_COLOR": "1"},
            controlled={
                "HOME": str(home),
                "CODEX_HOME": str(codex_home),
                TOKEN_ENV: token,
                **trace_environment(ctx),
            },
        )
        return Launch(argv, env)

    def mapper(
        self, ctx: AgentRunContext, out: RunOutput, diagnostics: Diagnostics, on_session: SessionCallback
    ) -> StreamMapper:
        return CodexStreamMapper(ctx, out, diagnostics, on_session)

    def classify_exit(self, state: StreamState, ended: Exit) -> Failure | None:
        stderr = ended.stderr
        if (
            state.session_id is None
            and SERVER_NAME in stderr
            and any(m in stderr for m in _MCP_STDERR_MARKERS)
        ):
            line = next((ln for ln in reversed(stderr.splitlines()) if SERVER_NAME in ln), "")
            return Failure(
                "runner.mcp_unavailable",
                f"Codex could not start the required {SERVER_NAME!r} MCP server: {line[-500:]}",
                retryable=True,
                details={"stderr_tail": stderr[-4000:]},
            )
        if "no rollout found" in stderr:
            state.resume_missing = True
        return None


def toml_value(value: JSONValue) -> str:
    """A JSON value as a TOML value for `-c key=value` (strings quoted, tables inline)."""
    if value is None:
        raise ValueError("TOML has no null; leave the key out instead")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"TOML cannot hold {value!r} here")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: the same escapes as JSON
    if is_json_array(value):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if not is_json_object(value):
        raise ValueError(f"TOML cannot hold {value!r} here")
    items = ", ".join(f"{json.dumps(key)} = {toml_value(item)}" for key, item in value.items())
    return "{" + items + "}"


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


def main() -> None:
    serve(
        CodexRunner(),
        author="mcphost",
        plugin="codex-agent",
    )


if __name__ == "__main__":
    main()
