"""`plugin:mcphost/codex-agent/default`: Codex (`codex exec --json`) as a runner (`python -m mcphost_runners.codex`).

Owns Codex's command lines (cold and warm) and its config. The mapping of its events onto results and
the JSON-RPC turn of a warm process are `_codex_stream.py`; the shared frame (working folder, projection,
process group, session lock, warm pool, terminal result) is `mcphost_runners.harness`.

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

Warm launch (`warm = true`): `codex app-server --listen stdio://` with the same `-c` settings (the model
as `-c model=`, the sandbox as `-c sandbox_mode=` and again on the thread, as exec's `--sandbox` does),
its `mcphost` server the session endpoint (`context.mcp.session`) with the session token in
`MCPHOST_RUN_TOKEN`, in the same folder and homes as a cold turn, so a cold turn resumes the thread a
warm process wrote and the other way round. Codex's own long-lived integration mode (its IDE
extension's); its `mcp-server` mode is gone from the pinned CLI. Each turn is `AppServerTurn`.

Model endpoint: `config.base_url` (or `OPENAI_BASE_URL` in the agent's environment) defines a Responses
provider whose key is read from the variable named by `config.api_key_env` (default `OPENAI_API_KEY`).
On a host model (`model = "host:<id>"`) the provider is the run's OpenAI endpoint
(`context.models.openai`, Responses at `…/responses`) with `env_key = "MCPHOST_MODEL_TOKEN"`, which
holds the run token, the model is `-m <id>`, and every provider key variable (`PROVIDER_KEY_ENV`) is
left out of the CLI's environment. A warm process's provider is the session's OpenAI endpoint
(`context.mcp.session.models.openai`) with the session token, serving whichever run is current.

A CLI that exits before `thread.started` naming our server on stderr failed to reach it:
`runner.mcp_unavailable`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from mcphost.protocol import AgentRunContext, JSONObject, JSONValue, is_json_array, is_json_object
from mcphost_runners._codex_stream import AppServerTurn, CodexStreamMapper, ThreadSettings
from mcphost_runners._harness_config import host_model, host_model_access, without_provider_keys
from mcphost_runners._harness_files import make_private_dir, write_private
from mcphost_runners._harness_stream import Diagnostics, Failure, SessionCallback, StreamMapper, StreamState
from mcphost_runners._harness_warm import WarmProcess
from mcphost_runners.harness import (
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
from mcphost_runners.sdk import RunOutput, serve

Sandbox = Literal["read-only", "workspace-write", "danger-full-access"]
INPUT_FILE = "INPUT.md"
PROVIDER = "mcphost"
MODEL_TOKEN_ENV = "MCPHOST_MODEL_TOKEN"
"""On a host model: the variable holding the run token Codex sends to the run's model endpoint."""
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
    reserved_env: ClassVar[frozenset[str]] = HarnessConfig.reserved_env | {"CODEX_HOME", MODEL_TOKEN_ENV}

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
    warm_capable = True
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
        argv = [str(cli), "exec", "--json", "--skip-git-repo-check", "--sandbox", config.sandbox]
        server = f"mcp_servers.{SERVER_NAME}"
        endpoint: list[tuple[str, JSONValue]]
        if config.mcp_transport == "bridge":
            command: list[JSONValue] = [*mcp.bridge.command]
            endpoint = [
                (f"{server}.command", command[0]),
                (f"{server}.args", command[1:]),
                (f"{server}.env_vars", [TOKEN_ENV]),
            ]
        else:
            endpoint = [(f"{server}.url", mcp.url), (f"{server}.bearer_token_env_var", TOKEN_ENV)]
        for key, value in self._settings(ctx, config, workspace, endpoint, warm=False):
            argv += ["-c", f"{key}={toml_value(value)}"]
        model = host_model(config) or config.model
        if model:
            argv += ["-m", model]
        if session.session_id:
            argv += ["resume", session.session_id]
        argv += ["--", self._prompt(ctx, workspace)]
        return Launch(argv, self._environment(ctx, config, workspace, run_token(mcp) or "", warm=False))

    def launch_warm(
        self,
        ctx: AgentRunContext,
        config: HarnessConfig,
        workspace: Workspace,
        cli: Path,
        session: ExternalSession,
    ) -> Launch:
        """`codex app-server` on stdio, its `mcphost` server the warm session endpoint (module docstring);
        the thread is opened by the first turn (`AppServerTurn`)."""
        assert isinstance(config, CodexConfig)
        mcp = ctx.context.mcp
        assert mcp is not None
        assert mcp.session is not None
        server = f"mcp_servers.{SERVER_NAME}"
        endpoint: list[tuple[str, JSONValue]] = [
            (f"{server}.url", mcp.session.url),
            (f"{server}.bearer_token_env_var", TOKEN_ENV),
        ]
        settings = self._settings(ctx, config, workspace, endpoint, warm=True)
        settings.insert(1, ("sandbox_mode", config.sandbox))
        model = host_model(config) or config.model
        if model:
            settings.append(("model", model))
        argv = [str(cli), "app-server", "--listen", "stdio://"]
        for key, value in settings:
            argv += ["-c", f"{key}={toml_value(value)}"]
        token = mcp.session.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        return Launch(argv, self._environment(ctx, config, workspace, token, warm=True))

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
        assert isinstance(config, CodexConfig)
        turn = AppServerTurn(
            ctx,
            out,
            diagnostics,
            on_session,
            process=process,
            settings=ThreadSettings(cwd=str(workspace.cwd), sandbox=config.sandbox),
            prompt=self._prompt(ctx, workspace),
            resume=session.session_id,
            fresh=fresh,
        )
        return turn.opening(), turn

    def _settings(
        self,
        ctx: AgentRunContext,
        config: CodexConfig,
        workspace: Workspace,
        endpoint: list[tuple[str, JSONValue]],
        *,
        warm: bool,
    ) -> list[tuple[str, JSONValue]]:
        """The `-c` settings of both launches, with `endpoint` (how to reach the `mcphost` server)."""
        server = f"mcp_servers.{SERVER_NAME}"
        settings: list[tuple[str, JSONValue]] = [("approval_policy", "never"), *endpoint]
        settings += [
            (f"{server}.required", True),
            (f"{server}.default_tools_approval_mode", "approve"),
            (f"{server}.startup_timeout_sec", 30),
        ]
        settings += [(f"mcp_servers.{name}", entry) for name, entry in config.extra_mcp_servers.items()]
        provider = self._provider(ctx, config, warm=warm)
        if provider is not None:
            settings += [("model_provider", PROVIDER), (f"model_providers.{PROVIDER}", provider)]
        instructions = "\n\n".join(part for part in (config.prompt, context_hint(workspace)) if part)
        settings.append(("developer_instructions", instructions[:MAX_ARGV_TEXT]))
        settings += list(config.config_overrides.items())
        return settings

    def _provider(self, ctx: AgentRunContext, config: CodexConfig, *, warm: bool) -> JSONObject | None:
        """The `mcphost` model provider: on a host model the run's OpenAI endpoint (Responses; `warm`:
        the session's) with the run token (the session token) from `MODEL_TOKEN_ENV`; else
        `config.base_url` with the key from `config.api_key_env`; else none (Codex's own)."""
        if host_model(config) is not None:
            endpoints, _ = host_model_access(ctx, warm=warm)
            return {
                "name": "mcphost-host-model",
                "base_url": endpoints.openai,
                "wire_api": "responses",
                "env_key": MODEL_TOKEN_ENV,
            }
        base_url = config.base_url or config.environment.get("OPENAI_BASE_URL")
        if not base_url:
            return None
        return {
            "name": "mcphost-configured",
            "base_url": base_url,
            "wire_api": "responses",
            "env_key": config.api_key_env,
        }

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
        self, ctx: AgentRunContext, config: CodexConfig, workspace: Workspace, token: str, *, warm: bool
    ) -> dict[str, str]:
        home = make_private_dir(workspace.data_dir / "codex-home")
        codex_home = make_private_dir(home / ".codex")
        write_private(codex_home, "config.toml", CODEX_CONFIG)
        env = harness_environment(
            config,
            projected=workspace.env,
            defaults={"NO_COLOR": "1"},
            controlled={
                "HOME": str(home),
                "CODEX_HOME": str(codex_home),
                TOKEN_ENV: token,
                **trace_environment(ctx),
            },
        )
        if host_model(config) is None:
            return env
        # On a host model Codex calls the run's endpoint with the run token; no provider key reaches its
        # environment, whatever the agent's `environment` or `pass_env` say.
        _, model_token = host_model_access(ctx, warm=warm)
        return {**without_provider_keys(env), MODEL_TOKEN_ENV: model_token}

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


def main() -> None:
    serve(
        CodexRunner(),
        author="mcphost",
        plugin="codex-agent",
    )


if __name__ == "__main__":
    main()
