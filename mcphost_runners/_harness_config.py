"""What a harness runner accepts and what its CLI is given: the shared runner config, the CLI's
environment, where the CLI is found, and the run token.

Owns `HarnessConfig` (the `[agents.config]` keys every harness takes; adapters subclass it) and its
manifest form, the environment allow-list, CLI resolution and token extraction. Does not own running
anything (`harness.py`). Invariant: a harness CLI's environment is built only by `harness_environment`,
and the names the runner controls (`HOME`, the token variable, a harness's config dir) can be neither set
through `environment` nor passed through with `pass_env`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar, Literal, Self

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from mcphost.common.fielddocs import DocumentedModel
from mcphost.common.validation import problems
from mcphost.protocol import (
    AgentRunContext,
    ConfigField,
    JSONObject,
    MCPAccess,
    ModelEndpoints,
    config_schema_of,
)

TOKEN_ENV = "MCPHOST_RUN_TOKEN"
HOST_MODEL_PREFIX = "host:"
"""`model = "host:<id>"` names a host model (`[models.<id>]`): the run's model endpoint, not a provider."""
SERVER_NAME = "mcphost"
"""The name the per-run MCP server has inside every harness (tools become `mcp__mcphost__<tool>`)."""
REPO_ROOT = Path(__file__).resolve().parent.parent

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_ENV_ALLOWED = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL"})
_ENV_ALLOWED_PREFIXES = ("LC_", "OTEL_")
"""`OTEL_*`: a CLI that exports telemetry (Claude Code does when enabled) follows the plugin's settings."""
_RESERVED_ENV = frozenset({"HOME", TOKEN_ENV})


# -- config ------------------------------------------------------------------------------------------


class HarnessConfig(DocumentedModel):
    """The runner config every harness accepts (`[agents.config]`); adapters add their own fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    reserved_env: ClassVar[frozenset[str]] = _RESERVED_ENV

    prompt: str | None = None
    """The agent's static prompt (mcphost puts `prompt` here); appended to the harness's system prompt."""
    cli_path: str | None = Field(default=None, title="Path of the CLI executable")
    """The CLI executable. Default: found on PATH, then in `<repo>/node_modules/.bin/`."""
    data_dir: str | None = Field(default=None, title="Folder for run folders and the CLI's home")
    """Run folders and the harness's private home live here. Default `.mcphost/harness`."""
    working_directory: str | None = Field(default=None, title="Run the CLI in this folder")
    """Run the CLI in this existing folder (a project) instead of a fresh folder per run."""
    environment: dict[str, str] = Field(
        default_factory=dict[str, str], title="Extra environment variables (no secrets)"
    )
    """Extra variables for the CLI (model endpoint, flags). Not for secrets: use `pass_env`."""
    pass_env: list[str] = Field(default_factory=list[str], title="Plugin variables passed through by name")
    """Names of the plugin's own variables handed to the CLI (e.g. an API key set in `[[plugins]] env`)."""
    mcp_transport: Literal["http", "bridge"] = Field(
        default="http", title="How the CLI reaches the run's MCP server"
    )
    """How the CLI reaches the run's MCP server: Streamable HTTP with the bearer token, or the stdio bridge."""
    model: str | None = Field(default=None, title="Model")
    """The CLI's model; `host:<id>` names the host's `[models.<id>]`, called through the run's endpoint
    with the run token (no provider key reaches the CLI)."""
    model_source: Literal["own", "host"] = Field(default="own", title="Where the model is")
    """`host`: `model` names a host model (`[models.<id>]`, the `host:` prefix optional); `own`: the
    CLI's own provider, unless `model` is written `host:<id>`."""
    extra_mcp_servers: dict[str, JSONObject] = Field(
        default_factory=dict[str, JSONObject], title="More MCP servers, by name"
    )
    """More MCP servers for the CLI, in the harness's own config shape, keyed by name."""
    resume: bool = Field(default=True, title="Resume the conversation's session")
    """Resume the conversation's external session (from conversation state) instead of starting anew."""
    warm: bool = Field(default=False, title="Keep a warm CLI process per conversation")
    """Keep one CLI process per conversation alive between its turns (the host's `[host] warm_*` limits),
    talking to the host's stable session endpoint; turns after the first skip the CLI's start-up. A CLI
    without a long-lived mode runs cold, with a log line saying so."""
    save_session: bool = Field(default=True, title="Save the session in conversation state")
    """Save `external.session_id` and `external.working_directory` in conversation state (needs the
    agent's state policy to allow writing `conversation`, the default)."""

    @model_validator(mode="after")
    def _host_source_names_a_model(self) -> Self:
        if self.model_source == "host" and not (self.model or "").removeprefix(HOST_MODEL_PREFIX):
            raise ValueError(
                "model_source = 'host' needs model = '<id>' naming one of the host's [models.<id>]"
            )
        return self

    @field_validator("environment")
    @classmethod
    def _environment_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            cls._check_env_name(name, "environment")
        return value

    @field_validator("pass_env")
    @classmethod
    def _pass_env_names(cls, value: list[str]) -> list[str]:
        for name in value:
            cls._check_env_name(name, "pass_env")
        return value

    @field_validator("extra_mcp_servers")
    @classmethod
    def _not_ours(cls, value: dict[str, JSONObject]) -> dict[str, JSONObject]:
        if SERVER_NAME in value:
            raise ValueError(f"{SERVER_NAME!r} is the run's own server; give the extra server another name")
        return value

    @classmethod
    def _check_env_name(cls, name: str, where: str) -> None:
        if not _ENV_NAME.match(name):
            raise ValueError(f"{name!r} is not a valid environment variable name")
        if name in cls.reserved_env:
            raise ValueError(f"{name!r} is set by the runner and cannot be given in {where}")


def harness_config_schema(model: type[HarnessConfig]) -> list[ConfigField]:
    """The manifest's `config_schema` of a harness: its config model's fields, less `prompt` (mcphost
    fills that from the agent's own `prompt`)."""
    return config_schema_of(model, exclude=("prompt",))


def describe_config_error(exc: ValidationError) -> str:
    first = problems(exc, root="(config)")[0]
    message = first.what
    if first.type == "extra_forbidden":
        message = "unknown key for this runner; see its config_schema"
    return f"config.{first.where}: {message}"


# -- the CLI and its environment --------------------------------------------------------------------------


def harness_environment(
    config: HarnessConfig,
    *,
    defaults: Mapping[str, str],
    controlled: Mapping[str, str],
    source: Mapping[str, str] | None = None,
    projected: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The CLI's whole environment: allow-list, defaults, the agent's, pass-through, the run's projected
    secrets, then ours."""
    plugin_env = os.environ if source is None else source
    env = {
        name: value
        for name, value in plugin_env.items()
        if (name in _ENV_ALLOWED or name.startswith(_ENV_ALLOWED_PREFIXES)) and not value.startswith("()")
    }
    env.update(defaults)
    env.update(config.environment)
    env.update({name: plugin_env[name] for name in config.pass_env if name in plugin_env})
    env.update(projected or {})
    env.update(controlled)
    return env


def trace_environment(ctx: AgentRunContext) -> dict[str, str]:
    """`TRACEPARENT` (and `TRACESTATE`) for the CLI: the host's span around this run's runner, the
    environment variables OpenTelemetry-instrumented CLIs take their parent from. Empty when the host
    does not trace."""
    env: dict[str, str] = {}
    if ctx.runtime.traceparent:
        env["TRACEPARENT"] = ctx.runtime.traceparent
        if ctx.runtime.tracestate:
            env["TRACESTATE"] = ctx.runtime.tracestate
    return env


def resolve_cli(name: str, cli_path: str | None, search_path: str | None) -> Path | None:
    """The CLI to run: `cli_path` when given, else `name` on PATH, else `<repo>/node_modules/.bin/<name>`."""
    if cli_path:
        candidate = Path(cli_path).expanduser()
        if os.sep not in cli_path:
            found = shutil.which(cli_path, path=search_path)
            return Path(found) if found else None
        return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None
    found = shutil.which(name, path=search_path)
    if found:
        return Path(found)
    local = REPO_ROOT / "node_modules" / ".bin" / name
    return local if local.is_file() and os.access(local, os.X_OK) else None


PROVIDER_KEY_ENV: frozenset[str] = frozenset(
    {
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "OPENAI_API_KEY",
        "CODEX_API_KEY",
    }
)
"""Credential variables a harness CLI reads: on a host model none of them is handed through, but the
run token where the CLI needs a key."""


def host_model(config: HarnessConfig) -> str | None:
    """The host model id an agent's `model = "host:<id>"` (or `model_source = "host"`) names, or None
    (the CLI's own provider)."""
    if config.model is None:
        return None
    if config.model_source != "host" and not config.model.startswith(HOST_MODEL_PREFIX):
        return None
    return config.model.removeprefix(HOST_MODEL_PREFIX) or None


def host_model_access(ctx: AgentRunContext, *, warm: bool = False) -> tuple[ModelEndpoints, str]:
    """The model endpoints and the credential of a CLI on a host model: the run's endpoints and token,
    or with `warm` the warm session's (`mcp.session.models` and the session token), which serve
    whichever run of the session is current, so a warm process keeps calling the host after its first
    run ended.

    Raises:
        ValueError: the run is granted no host model (its agent's `resources.models` is empty).
    """
    endpoints, mcp = ctx.context.models, ctx.context.mcp
    token = run_token(mcp) if mcp is not None else None
    if warm and mcp is not None and mcp.session is not None:
        endpoints = mcp.session.models
        token = mcp.session.headers.get("Authorization", "").removeprefix("Bearer ").strip() or None
    if endpoints is None or token is None:
        raise ValueError(
            "model = 'host:<id>' needs the run to be granted that host model: add it to resources.models "
            "of the agent (and declare it in a [models.<id>] table)"
        )
    return endpoints, token


def without_provider_keys(env: dict[str, str]) -> dict[str, str]:
    """`env` less every provider credential (`PROVIDER_KEY_ENV`)."""
    return {name: value for name, value in env.items() if name not in PROVIDER_KEY_ENV}


def run_token(mcp: MCPAccess) -> str | None:
    """The run's bearer token (a secret: only for MCP client configs and the CLI's environment)."""
    token = mcp.bridge.env.get(TOKEN_ENV)
    if token:
        return token
    header = mcp.headers.get("Authorization", "")
    return header.removeprefix("Bearer ").strip() or None
