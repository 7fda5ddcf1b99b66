"""Settings: `mcphost.toml` loading and validation, `MCPHOST_*` environment overrides, the embedded default.

Owns the shape of the configuration and every message about a bad one. Does not own what the values
mean at run time (bindings, plugins, stores read them). Invariant: `load_settings` either returns a
complete, validated `Settings` or raises `ConfigError` naming the file, the key and what was expected —
nothing is started from a half-valid config.

Every key is optional. With no file at all the host runs on the embedded default: SQLite under
`./.mcphost/`, the bundled plugins, and one agent `default` bound to `message.received`.

Size: past 600 lines because it is the one schema of the file — every section's model with its field
docs (they are the `mcphost init` comments' source and the JSON Schema's descriptions) and the checks
across sections that need the whole `Settings` (agents against plugins, hooks against agents, API keys
against agents) — and a reader looks up a key in one place.
"""

from __future__ import annotations

import base64
import os
import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from mcphost.common.fielddocs import DocumentedModel
from mcphost.errors import ConfigError
from mcphost.llm import ModelConfig, check_models
from mcphost.models import EVENT_TYPE_PATTERN, ID_PATTERN, AgentConfig
from mcphost.protocol import is_json_array, is_json_object
from mcphost.timetable import ScheduleSpec

CONFIG_ENV = "MCPHOST_CONFIG"
DEFAULT_CONFIG_NAME = "mcphost.toml"
DEFAULT_DATA_DIR = ".mcphost"
DEFAULT_LISTEN = "127.0.0.1:8787"

BUNDLED_PLUGINS: dict[str, str] = {
    "echo": "mcphost_runners.echo",
    "memo": "mcphost_runners.memo",
    "claude-code": "mcphost_runners.claude_code",
    "codex-agent": "mcphost_runners.codex",
}
"""Bundled runners, each an ordinary plugin launched as `python -P -m <module>` (`host_module_command`). The
local agent is not bundled: it needs its API key in its own environment, so it is configured as a
`[[plugins]]` entry."""


def host_module_command(module: str) -> list[str]:
    """How the host starts a module of its own (a bundled plugin, the bridge): `<its python> -P -m <module>`.

    `-P` (Python 3.11) keeps the working directory off the module search path, so a folder where the
    process starts (the host's, or a harness CLI's workspace) that is named like one of mcphost's packages
    cannot shadow it; the modules come from where mcphost is installed, as in the console scripts."""
    return [sys.executable, "-P", "-m", module]


HOST_PYTHON_NAMES: frozenset[str] = frozenset({"python", "python3"})
"""A plugin command starting with one of these runs on `sys.executable` (see `Settings.all_plugins`)."""

DEFAULT_AGENT_RUNNER = "plugin:mcphost/memo/default"
SKILL_NAME_PATTERN = r"[a-z0-9][a-z0-9_-]{0,63}"
"""The embedded default agent's runner: memo answers from host facts it reads over the run's MCP server."""


_ORIGIN = re.compile(
    r"(?P<origin>https?://(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*|\[[0-9A-Fa-f:.]+\])(?::(?P<port>\d{1,5}))?)/?",
    re.IGNORECASE,
)
"""A browser origin: scheme, host name or address, optional port."""


ApiRole = Literal["admin", "operator", "sender", "reader"]
"""What an API key may do on `/v1` (README, "Serving over HTTP"): everything; decide, cancel, redeliver and
manage schedules besides reading; post events and read its own runs; read (GET) only."""
API_ROLES: tuple[ApiRole, ...] = get_args(ApiRole)
PublicEndpoint = Literal["metrics", "openapi", "docs"]
DEFAULT_PUBLIC: tuple[PublicEndpoint, ...] = ("openapi", "docs")
"""`[host] public` by default: the API description (no data) answers without a key, `/metrics` does not."""
LEGACY_KEY_NAME = "api_key"
"""The name of `[host] api_key` among the keys (an `admin` key): runs it creates record this name."""
KEY_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,199}$"


class _Section(DocumentedModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HostSettings(_Section):
    """The `[host]` table. Each key can be overridden by `MCPHOST_<KEY>` in the environment."""

    database_url: str | None = None
    """SQLAlchemy URL. Default: SQLite at `<data_dir>/mcphost.db`. PostgreSQL: `postgresql+asyncpg://...`."""
    data_dir: Path = Path(DEFAULT_DATA_DIR)
    """Blobs, run folders and the default SQLite database live here."""
    listen: str = DEFAULT_LISTEN
    """`HOST:PORT` the HTTP server binds."""
    public_url: str | None = None
    """Base URL runners use to reach the host (default `http://<listen>`)."""
    api_key: str | None = None
    """Bearer key required on `/v1`, with the `admin` role (named `api_key`; `[[api_keys]]` add keys with
    other roles). Without any key the server only listens on loopback."""
    public: list[PublicEndpoint] = Field(default_factory=lambda: list[PublicEndpoint](DEFAULT_PUBLIC))
    """Which of `metrics` (`/metrics`), `openapi` (`/openapi.json`) and `docs` (`/docs`) answer without an
    API key; the others need a key with the `reader` role. Default: the API description only; `/metrics`
    needs a key once the host has one."""
    cursor_secret: str | None = Field(default=None, min_length=16, max_length=1000)
    """Signs paging cursors (at least 16 characters). Default: a random secret generated into the database
    on first start and shared by every host on it. Changing it makes outstanding cursors a 400."""
    run_timeout_s: float = Field(default=300.0, gt=0, le=24 * 3600)
    """Default run deadline when an agent sets none."""
    max_concurrent_runs: int = Field(default=64, ge=1, le=10_000)
    database_pool_size: int = Field(default=16, ge=4, le=1000)
    """PostgreSQL connections this process keeps open, a fixed pool (a transaction that finds them all busy
    waits for one); two of them stay with a serving host (its `LISTEN` and its liveness lock), hence at
    least 4. Every replica keeps its own, so replicas x this must fit the server's `max_connections`.
    SQLite ignores it."""
    blob_backend: Literal["disk", "database"] = "disk"
    """Where artifact bytes live: `data_dir/blobs/` or the database (for PostgreSQL without shared disk)."""
    bundled_plugins: bool = True
    """Start the bundled runners (echo, ...) besides the `[[plugins]]` listed."""
    allowed_hosts: list[str] = Field(default_factory=list[str])
    """Extra Host header values accepted by the MCP endpoint (DNS-rebinding protection)."""
    allowed_origins: list[str] = Field(default_factory=list[str])
    """Extra browser Origin values (`https://app.example.com`) accepted by the MCP endpoint; loopback
    origins and those of `public_url` are always accepted."""
    cors_origins: list[str] = Field(default_factory=list[str], max_length=100)
    """Browser origins (`https://console.example.com`) that may call `/v1` from another origin: CORS
    answers (preflight included) for exactly these, and `/v1` accepts their `Origin`. Off when empty."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    uvloop: bool = True
    """`mcphost serve` runs on uvloop when it is installed (the `mcphost[speed]` extra); false keeps
    asyncio's own event loop."""
    approval_expiry_s: float = Field(default=24 * 3600.0, gt=0, le=30 * 24 * 3600)
    """How long an approval waits for a decision before it expires (an expired approval is a denial)."""
    warm_max_sessions: int = Field(default=8, ge=1, le=1000)
    """Warm harness sessions (`[agents.config] warm = true`): at most this many warm CLI processes per
    harness plugin; past it the least recently used idle one is stopped."""
    warm_idle_timeout_s: float = Field(default=600.0, gt=0, le=24 * 3600)
    """A warm harness process with no turn for this long is stopped (the next turn starts a new one)."""
    warm_max_rss_mb: int = Field(default=2048, ge=64, le=1_000_000)
    """The warm processes of one harness plugin together stay under this resident memory (MiB): past it
    the least recently used idle ones are stopped."""
    runtime_lease_s: float = Field(default=15.0, ge=0.5, le=3600)
    """A runtime's claim on a run lapses this long after its latest heartbeat; the run then goes back to
    the queue (or fails, as `[agents.runtime] on_lost` says). Runtimes heartbeat every
    min(0.5 s, lease / 4)."""

    @field_validator("listen")
    @classmethod
    def _listen_form(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"expected HOST:PORT such as {DEFAULT_LISTEN!r}, got {value!r}")
        return value

    @field_validator("cors_origins")
    @classmethod
    def _cors_origin_form(cls, values: list[str]) -> list[str]:
        out: list[str] = []
        for value in values:
            match = _ORIGIN.fullmatch(value.strip())
            if match is None or int(match["port"] or 0) > 65535:
                raise ValueError(
                    "expected an origin such as 'https://console.example.com' (scheme, host and port only; "
                    f"no '*', path or query), got {value[:100]!r}"
                )
            out.append(match["origin"].lower())  # browsers send the host in lower case
        return out

    @field_validator("public_url")
    @classmethod
    def _public_url_form(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        return value.rstrip("/") if value else value


class ApiKeyConfig(_Section):
    """One `[[api_keys]]` entry: a bearer key for `/v1` and the role it has."""

    name: str = Field(pattern=KEY_NAME_PATTERN)
    """Shown in errors and recorded on the runs the key creates (never the key itself)."""
    key_env: str | None = Field(default=None, pattern=ENV_NAME_PATTERN)
    """The environment variable holding the key, read when the server starts."""
    key_sha256: str | None = Field(default=None, pattern=r"^[0-9A-Fa-f]{64}$")
    """The hex SHA-256 of the key (`printf %s "$KEY" | sha256sum`), so the config holds no secret."""
    role: ApiRole
    agents: list[str] = Field(default_factory=list[str], max_length=1000)
    """`sender` only: the agents its events may bind to (another agent's event is a 403); empty: any."""

    @field_validator("key_sha256")
    @classmethod
    def _lower_hex(cls, value: str | None) -> str | None:
        return None if value is None else value.lower()

    @model_validator(mode="after")
    def _one_source(self) -> ApiKeyConfig:
        if (self.key_env is None) == (self.key_sha256 is None):
            raise ValueError(
                "set exactly one of 'key_env' (the environment variable holding the key) or 'key_sha256' "
                "(the key's hex SHA-256)"
            )
        if self.agents and self.role != "sender":
            raise ValueError(f"'agents' limits a 'sender' key; a {self.role!r} key reaches every agent")
        return self


class PluginConfig(_Section):
    """One `[[plugins]]` entry: a long-lived plugin process."""

    command: list[str] = Field(min_length=1)
    name: str | None = None
    env: dict[str, str] = Field(default_factory=dict[str, str])
    cwd: Path | None = None

    @property
    def display_name(self) -> str:
        return self.name or Path(self.command[0]).name


class ToolServerConfig(_Section):
    """One `[tools.<server>]` upstream MCP server: a stdio `command` or a Streamable HTTP `url`."""

    command: list[str] | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict[str, str])
    env: dict[str, str] = Field(default_factory=dict[str, str])
    timeout_s: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> ToolServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("set exactly one of 'command' (stdio) or 'url' (Streamable HTTP)")
        return self


class KnowledgeBaseConfig(_Section):
    """One `[knowledge.<kb_id>]` knowledge base."""

    name: str
    description: str = ""
    paths: list[str] = Field(default_factory=list[str])


class SkillConfig(_Section):
    """One `[skills.<name>]` skill: what an agent granted it is told, and what a harness writes into
    its skill file (`.claude/skills/<name>/SKILL.md`, PROTOCOL §9). Agents are granted skills by name in
    `resources.skills`."""

    display_name: str = Field(default="", max_length=200)
    """A title for people; the skill's name when empty."""
    description: str = Field(default="", max_length=4000)
    """When and how to use the skill: the runner reads it in its context and `instructions` prompt.
    Required without `path`; with one, the `description:` of its `SKILL.md` front matter when empty."""
    path: Path | None = None
    """A skill folder (relative to the config file's folder): `SKILL.md` and the files it refers to.
    Projected into the harness's skills folder and served as `skill://<name>/<file>` MCP resources."""

    @model_validator(mode="after")
    def _described(self) -> SkillConfig:
        if not self.description and self.path is None:
            raise ValueError("set 'description', or 'path' to a skill folder whose SKILL.md describes it")
        return self


class SecretConfig(_Section):
    """One `[secrets.<name>]` secret: read from the host's environment (`env`) or a file (`file`) when a
    run of an agent that names it (`[[agents]] secrets`) starts, and set in that run's environment only."""

    env: str | None = Field(default=None, pattern=ENV_NAME_PATTERN)
    """The host's environment variable holding the value."""
    file: Path | None = None
    """A file holding the value (relative to the config file's folder); one trailing newline is dropped."""
    variable: str | None = Field(default=None, pattern=ENV_NAME_PATTERN)
    """The variable's name in the run's environment; default the secret's name upper-cased
    (`gh_token` → `GH_TOKEN`)."""

    @model_validator(mode="after")
    def _one_source(self) -> SecretConfig:
        if (self.env is None) == (self.file is None):
            raise ValueError("set exactly one of 'env' (a host environment variable) or 'file' (a path)")
        return self

    def variable_of(self, name: str) -> str:
        return self.variable or name.upper()


class RuntimeConfig(_Section):
    """One `[runtimes.<name>]` table: what this host projects into the runs the runtime registered as
    `<name>` (`mcphost runtimes add NAME`) claims."""

    workspaces: dict[str, str] = Field(default_factory=dict[str, str], max_length=1000)
    """Workspace name → absolute folder on the runtime's machine: a run of an agent with
    `workspace = "<name>"` works there. A runtime without the agent's workspace does not claim its runs."""

    @field_validator("workspaces")
    @classmethod
    def _absolute(cls, value: dict[str, str]) -> dict[str, str]:
        _check_names(value, "workspace name", "agents name it in `workspace`")
        for name, folder in value.items():
            if not folder.startswith("/") or "\x00" in folder or len(folder) > 1000:
                raise ValueError(
                    f"workspace {name!r}: {folder[:100]!r} must be an absolute path on the runtime's machine"
                )
        return value


FIELD_PATH_PATTERN = r"\$(\.[A-Za-z0-9_-]+|\[[0-9]{1,6}\])*"
"""A field path into a JSON payload: `$`, then `.name` and `[index]` steps (`$.repository.full_name`)."""
DEFAULT_HOOK_EVENT_TYPE = "webhook.received"
WebhookEvent = Literal[
    "message.completed",
    "run.completed",
    "run.failed",
    "action.requested",
    "approval.requested",
    "action.approved",
]
WEBHOOK_EVENTS: tuple[WebhookEvent, ...] = get_args(WebhookEvent)
"""What a `[[webhooks]]` entry can be sent: results (`message.completed`, `action.requested`), run ends,
approvals asked for (`approval.requested`) and approved actions to execute (`action.approved`)."""
DELIVERY_LEASE_S = 60.0
"""How long a host holds a claimed delivery before another may send it (`stores/deliveries.py`)."""
DELIVERY_SETTLE_S = 10.0
"""What a send leaves of its lease to record its outcome: a webhook's `timeout_s` is at most the lease
less this."""


def _whsec(value: str) -> str:
    """A Standard Webhooks secret: `whsec_` and the base64 of at least 16 bytes."""
    try:
        decoded = base64.b64decode(value.removeprefix("whsec_"), validate=True)
    except ValueError:
        decoded = b""
    if not value.startswith("whsec_") or len(decoded) < 16:
        raise ValueError(
            "a Standard Webhooks secret is 'whsec_' followed by the base64 of at least 16 random "
            "bytes (such as 'whsec_' + base64 of `openssl rand 32`)"
        )
    return value


class HookConfig(_Section):
    """One `[hooks.<source>]` table: a signed inbound webhook at `POST /v1/hooks/<source>`.

    `conversation_id`, `actor_id` and `text` are each a literal, or a field path into the JSON payload
    (`$.repository.full_name`; see `FIELD_PATH_PATTERN`) whose value must be a string or a number.
    """

    verify: Literal["standard-webhooks", "github", "bearer"]
    """How a request proves it comes from the sender: a Standard Webhooks signature (`webhook-id`,
    `webhook-timestamp`, `webhook-signature`), GitHub's `X-Hub-Signature-256`, or
    `Authorization: Bearer <secret>`."""
    secret: str = Field(min_length=16, max_length=1000)
    """The shared secret; for `standard-webhooks` in its `whsec_<base64>` form."""
    tolerance_s: float = Field(default=300.0, gt=0, le=24 * 3600)
    """How far a Standard Webhooks `webhook-timestamp` may be from now, either way."""
    agent: str | None = Field(default=None, pattern=ID_PATTERN)
    """The agent to run; it must be bound to `event_type`. Default: whichever agent the bindings pick."""
    event_type: str | None = Field(default=None, pattern=EVENT_TYPE_PATTERN, max_length=100)
    """The event type of every delivery. Unset: `github.<X-GitHub-Event>` for `verify = "github"`
    (`github.push`, `github.pull_request`, …), `webhook.received` for the others."""
    events: list[str] | None = Field(default=None, min_length=1, max_length=100)
    """Which of the sender's events become runs, by the sender's name for them: `X-GitHub-Event` for
    `github` (`push`, `pull_request`), the payload's `type` for the others. Others are answered 200 and
    ignored (logged, counted in `mcphost_hook_events_ignored_total`). Unset: every event. A GitHub `ping`
    is always answered 200 without a run."""
    replay_window_s: float | None = Field(default=None, gt=0, le=7 * 24 * 3600)
    """Refuse (409 `replayed_body`) a delivery whose exact signed body was admitted in the last this
    many seconds under another delivery id; kept in the database, so it holds across replicas. Meant
    for `github`, which signs neither its delivery id nor a time. Unset: no window."""
    conversation_id: str | None = Field(default=None, max_length=400)
    actor_id: str | None = Field(default=None, max_length=400)
    text: str | None = Field(default=None, max_length=400)
    max_bytes: int = Field(default=1024 * 1024, ge=1, le=25 * 1024 * 1024)
    """The largest payload accepted (413 past it); it is stored whole as the event's raw artifact."""

    @field_validator("secret")
    @classmethod
    def _secret_form(cls, value: str, info: ValidationInfo) -> str:
        return _whsec(value) if info.data.get("verify") == "standard-webhooks" else value

    @field_validator("events")
    @classmethod
    def _event_names(cls, value: list[str] | None) -> list[str] | None:
        for name in value or []:
            if not 1 <= len(name) <= 200 or not name.isprintable():
                raise ValueError(f"event name {name[:50]!r} must be 1-200 printable characters")
        return value

    @field_validator("conversation_id", "actor_id", "text")
    @classmethod
    def _field_path_form(cls, value: str | None) -> str | None:
        if value is not None and value.startswith("$") and not re.fullmatch(FIELD_PATH_PATTERN, value):
            raise ValueError(
                f"{value!r} starts with '$' but is not a field path: write '$' then '.name' or '[index]' "
                "steps, such as '$.repository.full_name' or '$.commits[0].id'"
            )
        return value


class WebhookConfig(_Section):
    """One `[[webhooks]]` entry: where announced facts are delivered, signed per Standard Webhooks."""

    url: str = Field(max_length=2000)
    """The receiver (`http://` or `https://`); only this URL is ever called."""
    secret: str = Field(max_length=1000)
    """The signing secret in its `whsec_<base64>` form (the receiver verifies with the same)."""
    events: list[WebhookEvent] = Field(default_factory=lambda: list(WEBHOOK_EVENTS), min_length=1)
    """Which facts to deliver. Default: all of them."""
    agents: list[str] = Field(default_factory=list[str])
    """Only runs of these agents; empty: every agent's."""
    max_age_s: float = Field(default=24 * 3600.0, gt=0, le=30 * 24 * 3600)
    """How long a delivery is retried (with exponential back-off) before it is dead."""
    timeout_s: float = Field(default=15.0, gt=0)
    """The whole of one send: connecting, the request and the receiver's complete answer. A send still
    going then is cut and counts as a failed attempt. At most the lease less `DELIVERY_SETTLE_S`."""

    @field_validator("url")
    @classmethod
    def _url_form(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"expected an http:// or https:// URL, got {value[:100]!r}")
        return value

    @field_validator("secret")
    @classmethod
    def _secret_form(cls, value: str) -> str:
        return _whsec(value)

    @field_validator("timeout_s")
    @classmethod
    def _within_the_lease(cls, value: float) -> float:
        most = DELIVERY_LEASE_S - DELIVERY_SETTLE_S
        if value > most:
            raise ValueError(
                f"timeout_s {value:g} is longer than {most:g} s: a send and the recording of its outcome must "
                f"end within the {DELIVERY_LEASE_S:g} s lease, after which another host sends the delivery "
                f"again; use at most {most:g}"
            )
        return value


ChannelPlatform = Literal["slack", "telegram", "discord"]
CHANNEL_API_BASES: dict[ChannelPlatform, str] = {
    "slack": "https://slack.com/api",
    "telegram": "https://api.telegram.org",
    "discord": "https://discord.com/api/v10",
}
"""Each platform's Web API; `[channels.<id>] api_base` replaces it (a proxy, a test's fake)."""


class ChannelConfig(_Section):
    """One `[channels.<id>]` table: a Slack, Telegram or Discord bot at `POST /v1/channels/<id>`,
    answered in place. Its credentials are read from the environment when the host starts."""

    platform: ChannelPlatform
    secret_env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    """The variable holding what proves an inbound request: Slack's signing secret, the Telegram
    `secret_token` given to `setWebhook`, or the Discord application's public key (hex)."""
    token_env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    """The variable holding the bot token that sends replies (Slack `xoxb-…`, Telegram `<id>:<secret>`,
    Discord's bot token)."""
    api_base: str | None = Field(default=None, max_length=2000)
    """The platform's Web API base URL; unset: the platform's own (`CHANNEL_API_BASES`)."""
    agent: str | None = Field(default=None, pattern=ID_PATTERN)
    """The agent to run; unset: whichever agent the bindings pick (match on `bot_id` = the channel id,
    `conversation_id`, `workspace_id`, `actor_id`)."""
    events: list[str] | None = Field(default=None, min_length=1, max_length=100)
    """Which normalized event types become runs (`message.received`, `command.invoked`, …); others are
    answered 200 and ignored. Unset: every event type."""
    tolerance_s: float = Field(default=300.0, gt=0, le=3600)
    """How far a signed request's timestamp (Slack, Discord) may be from now, either way."""
    max_bytes: int = Field(default=1024 * 1024, ge=1, le=25 * 1024 * 1024)
    """The largest inbound request accepted (413 past it); it is stored whole as the raw artifact."""
    max_age_s: float = Field(default=3600.0, gt=0, le=7 * 24 * 3600)
    """How long a reply is retried (honouring the platform's `Retry-After`) before it is dead."""
    timeout_s: float = Field(default=15.0, gt=0, le=DELIVERY_LEASE_S - DELIVERY_SETTLE_S)
    """The whole of one send of a reply (every part of it) to the platform's API; also each wait of an
    inbound file's download."""
    stream_interval_s: float = Field(default=1.0, ge=0, le=60)
    """While a run streams (`message.delta`), its reply is a placeholder message edited at most once per
    this many seconds (longer when the platform says `Retry-After`); 0: no placeholder, the reply is
    posted once complete. Slack `chat.update`, Telegram `editMessageText` and Discord message edits all
    take one edit a second per message."""
    max_attachment_bytes: int = Field(default=20 * 1024 * 1024, ge=1, le=2 * 1024 * 1024 * 1024)
    """The largest inbound file fetched (on its first read, never at arrival); a larger one — declared,
    or found while its bytes stream in — is refused with `payload_too_large` and never fetched again."""
    gateway: bool = False
    """Discord only: also hold a Gateway (websocket) connection, over which Discord delivers messages,
    edits, deletions, reactions and member changes (interactions still arrive over HTTP). One host of
    those sharing the database holds it (a lease)."""

    @field_validator("api_base")
    @classmethod
    def _api_base_form(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"expected an http:// or https:// URL, got {value[:100]!r}")
        return None if value is None else value.rstrip("/")

    @model_validator(mode="after")
    def _gateway_is_discord(self) -> ChannelConfig:
        if self.gateway and self.platform != "discord":
            raise ValueError(f"gateway = true is for Discord channels only; this one is {self.platform!r}")
        return self

    @property
    def base_url(self) -> str:
        return self.api_base or CHANNEL_API_BASES[self.platform]


def _check_names(names: Mapping[str, object], what: str, why: str) -> None:
    """Table names that become folder names or path segments: `SKILL_NAME_PATTERN`."""
    for name in names:
        if not re.fullmatch(SKILL_NAME_PATTERN, name):
            raise ValueError(
                f"{what} {name!r} must be 1-64 lowercase letters, digits, '-' or '_', starting with a letter "
                f"or digit ({why})"
            )


class RetentionSettings(_Section):
    """`[retention]`: how many days each kind of record is kept; unset keeps it forever (the default).
    `mcphost gc` and the periodic job delete what is older, never what a queued, running or parked run
    references."""

    run_results_days: float | None = Field(default=None, gt=0, le=36500)
    audit_days: float | None = Field(default=None, gt=0, le=36500)
    events_days: float | None = Field(default=None, gt=0, le=36500)
    transcript_days: float | None = Field(default=None, gt=0, le=36500)
    artifacts_days: float | None = Field(default=None, gt=0, le=36500)
    """New artifacts expire this long after creation (an upload's `expires_in_s` wins); at collection,
    artifacts without an expiry that are older go too. Expired artifacts lose their bytes."""
    dead_deliveries_days: float | None = Field(default=None, gt=0, le=36500)
    """Dead outbound deliveries, counted from the end of their `max_age_s`."""
    run_folders_days: float | None = Field(default=None, gt=0, le=36500)
    """Harness run folders (`<harness_dir>/runs/<run_id>/`) of runs that ended this long ago."""
    harness_homes_days: float | None = Field(default=None, gt=0, le=36500)
    """Session files in harness homes (`<harness_dir>/*-home/`) not written for this long."""
    harness_dirs: list[Path] = Field(default_factory=lambda: [Path(".mcphost/harness")], max_length=100)
    """The harness runners' `data_dir`s (relative to the host's working folder), where run folders and
    harness homes live."""
    interval_s: float = Field(default=3600.0, ge=1, le=7 * 86400)
    """How often a serving host collects, when any `*_days` key is set (one replica at a time)."""

    def days(self, kind: str) -> float | None:
        """The maximum age of `kind` (a `RETENTION_KINDS` name) in days, or None to keep it."""
        value = getattr(self, f"{kind}_days")
        assert value is None or isinstance(value, float | int), kind
        return value

    @property
    def enabled(self) -> bool:
        """Whether any kind has a maximum age (else collection deletes nothing and the job sleeps)."""
        return any(self.days(kind) is not None for kind in RETENTION_KINDS)


RETENTION_KINDS: tuple[str, ...] = (
    "run_results",
    "audit",
    "events",
    "transcript",
    "artifacts",
    "dead_deliveries",
    "run_folders",
    "harness_homes",
)
"""What retention collects, in collection order: each has a `[retention] <kind>_days` key."""


_TABLE_NAMES: dict[str, tuple[str, str]] = {
    "hooks": ("hook source", "it is the last segment of /v1/hooks/<source>"),
    "channels": ("channel id", "it is the last segment of /v1/channels/<id>"),
    "skills": ("skill name", "it becomes a folder name"),
    "secrets": ("secret name", "agents name it in `secrets`"),
    "workspaces": ("workspace name", "agents name it in `workspace`"),
}
"""Tables whose names become folder names or path segments, as `_check_names` words them."""


class Settings(_Section):
    """The whole validated configuration."""

    source: str = "<embedded default>"
    """Where it came from: a file path, or the embedded default."""
    host: HostSettings = Field(default_factory=HostSettings)
    plugins: list[PluginConfig] = Field(default_factory=list[PluginConfig])
    agents: list[AgentConfig] = Field(default_factory=list[AgentConfig])
    tools: dict[str, ToolServerConfig] = Field(default_factory=dict[str, ToolServerConfig])
    knowledge: dict[str, KnowledgeBaseConfig] = Field(default_factory=dict[str, KnowledgeBaseConfig])
    skills: dict[str, SkillConfig] = Field(default_factory=dict[str, SkillConfig])
    secrets: dict[str, SecretConfig] = Field(default_factory=dict[str, SecretConfig], max_length=1000)
    """`[secrets.<name>]`: values projected as environment variables into the runs of agents naming them."""
    workspaces: dict[str, Path] = Field(default_factory=dict[str, Path], max_length=1000)
    """`[workspaces]`: workspace name → folder on this host (relative to the config file's folder), where
    the local runs of an agent with `workspace = "<name>"` work."""
    runtimes: dict[str, RuntimeConfig] = Field(default_factory=dict[str, RuntimeConfig], max_length=1000)
    """`[runtimes.<name>]`: per-runtime projection settings (its `workspaces`), by runtime name."""
    schedules: list[ScheduleSpec] = Field(default_factory=list[ScheduleSpec], max_length=1000)
    """`[[schedules]]`: events the host emits on a timetable (read-only through the API)."""

    @field_validator("schedules")
    @classmethod
    def _schedule_ids(cls, value: list[ScheduleSpec]) -> list[ScheduleSpec]:
        seen: set[str] = set()
        for spec in value:
            if spec.id in seen:
                raise ValueError(f"schedule id {spec.id!r} is used twice; ids must be unique")
            seen.add(spec.id)
        return value

    hooks: dict[str, HookConfig] = Field(default_factory=dict[str, HookConfig])
    """Inbound webhook sources by name (`POST /v1/hooks/<source>`)."""
    channels: dict[str, ChannelConfig] = Field(default_factory=dict[str, ChannelConfig])
    """Chat platforms by channel id (`POST /v1/channels/<id>`): events in, replies in place."""
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    """How long each kind of record is kept (everything, by default)."""
    webhooks: list[WebhookConfig] = Field(default_factory=list[WebhookConfig])
    """Outbound webhooks: results and run ends delivered to receivers."""
    api_keys: list[ApiKeyConfig] = Field(default_factory=list[ApiKeyConfig], max_length=1000)
    """`[[api_keys]]`: bearer keys for `/v1`, each with a role (besides `[host] api_key`, an admin key)."""
    models: dict[str, ModelConfig] = Field(default_factory=dict[str, ModelConfig], max_length=1000)
    """`[models.<id>]`: models the host calls for its runs with its own keys (`mcphost.llm`)."""

    @field_validator("hooks", "channels", "skills", "secrets", "workspaces")
    @classmethod
    def _table_names(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        what, why = _TABLE_NAMES[info.field_name or ""]
        _check_names(value, what, why)
        return value

    @property
    def database_url(self) -> str:
        if self.host.database_url:
            return self.host.database_url
        return f"sqlite+aiosqlite:///{(self.host.data_dir / 'mcphost.db').as_posix()}"

    @property
    def public_url(self) -> str:
        return self.host.public_url or f"http://{self.host.listen}"

    def all_plugins(self) -> list[PluginConfig]:
        """Configured plugins plus, unless disabled, the bundled ones. A command whose first word is
        `python` or `python3` runs on the host's own interpreter (`sys.executable`), so a plugin written
        `["python", "shout.py"]` gets the environment mcphost was installed into, not whatever `python`
        comes first on PATH (the system one, outside `uv run`)."""
        plugins = [
            p.model_copy(update={"command": [sys.executable, *p.command[1:]]})
            if p.command[0] in HOST_PYTHON_NAMES
            else p
            for p in self.plugins
        ]
        if self.host.bundled_plugins:
            plugins += [
                PluginConfig(command=host_module_command(module), name=name)
                for name, module in BUNDLED_PLUGINS.items()
            ]
        return plugins

    def agent(self, agent_id: str) -> AgentConfig:
        for agent in self.agents:
            if agent.id == agent_id:
                return agent
        known = ", ".join(a.id for a in self.agents) or "none"
        raise ConfigError(
            f"Agent {agent_id!r} is not configured in {self.source}; known agents: {known}.",
            details={"agent_id": agent_id},
        )


def default_agent() -> AgentConfig:
    return AgentConfig(id="default", runner=DEFAULT_AGENT_RUNNER, event_types=["message.received"])


# -- loading -----------------------------------------------------------------------------------------

_ENV_PREFIX = "MCPHOST_"


def _env_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for field in HostSettings.model_fields:
        value = environ.get(_ENV_PREFIX + field.upper())
        if value is not None:
            overrides[field] = value
    return overrides


def _format_location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _describe(exc: ValidationError, source: str, data: Mapping[str, Any]) -> str:
    lines: list[str] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        key = _format_location(loc)
        # Name agents by id when we can: "agents[1] (id 'support').runner".
        if len(loc) >= 2 and loc[0] == "agents" and isinstance(loc[1], int):
            agents = data.get("agents")
            if is_json_array(agents) and loc[1] < len(agents):
                entry = agents[loc[1]]
                if is_json_object(entry) and isinstance(entry.get("id"), str):
                    key = key.replace(f"agents[{loc[1]}]", f"agents[{loc[1]}] (id {entry['id']!r})", 1)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key; check the spelling against the config reference in README.md"
        elif err["type"] == "missing":
            msg = "required key is missing"
        lines.append(f"{source}: {key}: {msg}")
    return "\n".join(lines)


def _check_agents(settings: Settings) -> None:
    seen: set[str] = set()
    for index, agent in enumerate(settings.agents):
        if agent.id in seen:
            raise ConfigError(
                f"{settings.source}: agents[{index}].id: agent id {agent.id!r} is used twice; ids must be unique"
            )
        seen.add(agent.id)
        for kb in agent.resources.knowledge_bases:
            if kb not in settings.knowledge:
                known = ", ".join(sorted(settings.knowledge)) or "none"
                raise ConfigError(
                    f"{settings.source}: agents[{index}] (id {agent.id!r}).resources.knowledge_bases: "
                    f"knowledge base {kb!r} is not declared; declared: {known}. Add a [knowledge.{kb}] table."
                )
        for model_id in agent.resources.models:
            if model_id not in settings.models:
                known = ", ".join(sorted(settings.models)) or "none"
                raise ConfigError(
                    f"{settings.source}: agents[{index}] (id {agent.id!r}).resources.models: "
                    f"model {model_id!r} is not declared; declared: {known}. Add a [models.{model_id}] table."
                )
        for skill in agent.resources.skills:
            if skill not in settings.skills:
                known = ", ".join(sorted(settings.skills)) or "none"
                raise ConfigError(
                    f"{settings.source}: agents[{index}] (id {agent.id!r}).resources.skills: "
                    f"skill {skill!r} is not declared; declared: {known}. Add a [skills.{skill}] table."
                )
        for secret in agent.secrets:
            if secret not in settings.secrets:
                known = ", ".join(sorted(settings.secrets)) or "none"
                raise ConfigError(
                    f"{settings.source}: agents[{index}] (id {agent.id!r}).secrets: secret {secret!r} is not "
                    f'declared; declared: {known}. Add a [secrets.{secret}] table with env = "VAR" or '
                    'file = "/path".'
                )
        _check_workspace(settings, index, agent)


def _check_workspace(settings: Settings, index: int, agent: AgentConfig) -> None:
    """A local agent's workspace is in `[workspaces]`; a remote one's in some `[runtimes.<name>]`."""
    name = agent.workspace
    if name is None:
        return
    where = f"{settings.source}: agents[{index}] (id {agent.id!r}).workspace"
    if agent.runtime == "local":
        if name not in settings.workspaces:
            known = ", ".join(sorted(settings.workspaces)) or "none"
            raise ConfigError(
                f"{where}: workspace {name!r} is not in [workspaces] (declared: {known}); the agent's runs "
                f'are local, so add `{name} = "/path/to/folder"` under [workspaces].'
            )
        return
    holders = sorted(r for r, cfg in settings.runtimes.items() if name in cfg.workspaces)
    if not holders:
        raise ConfigError(
            f"{where}: no [runtimes.<name>] table maps workspace {name!r}, so no runtime could claim the "
            f'agent\'s runs; add `workspaces = {{ "{name}" = "/path/on/the/runtime" }}` under '
            "[runtimes.<name>] for each runtime that has it."
        )


def _resolve_paths(settings: Settings, base: Path) -> Settings:
    """Relative skill folders, secret files and local workspaces are relative to the config file's folder."""

    def under(path: Path) -> Path:
        return path if path.is_absolute() else base / path

    skills = {
        name: cfg if cfg.path is None else cfg.model_copy(update={"path": under(cfg.path)})
        for name, cfg in settings.skills.items()
    }
    secrets = {
        name: cfg if cfg.file is None else cfg.model_copy(update={"file": under(cfg.file)})
        for name, cfg in settings.secrets.items()
    }
    workspaces = {name: under(folder) for name, folder in settings.workspaces.items()}
    return settings.model_copy(update={"skills": skills, "secrets": secrets, "workspaces": workspaces})


def _check_skills(settings: Settings) -> Settings:
    """Each skill folder holds a `SKILL.md`; a skill without a `description` takes its front matter's."""
    skills: dict[str, SkillConfig] = {}
    for name, cfg in settings.skills.items():
        if cfg.path is None:
            skills[name] = cfg
            continue
        skill_md = cfg.path / "SKILL.md"
        try:
            text = skill_md.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"{settings.source}: skills.{name}.path: {str(skill_md)!r} cannot be read ({exc}); a skill "
                "folder holds a SKILL.md (front matter with name and description, then its instructions)."
            ) from None
        description = cfg.description or _front_matter(text).get("description", "")
        if not description:
            raise ConfigError(
                f"{settings.source}: skills.{name}: no description; set 'description', or a `description:` "
                f"line in the front matter of {str(skill_md)!r}."
            )
        skills[name] = cfg.model_copy(update={"description": description[:4000]})
    return settings.model_copy(update={"skills": skills})


def _front_matter(text: str) -> dict[str, str]:
    """The `key: value` lines of a `---`-fenced front matter (values unquoted), or nothing."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    found: dict[str, str] = {}
    for line in lines[1:200]:
        if line.strip() == "---":
            return found
        key, sep, value = line.partition(":")
        if sep and key.strip().isidentifier():
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            found[key.strip()] = value
    return {}


def _check_hooks(settings: Settings) -> None:
    known = {agent.id for agent in settings.agents}
    for index, webhook in enumerate(settings.webhooks):
        for agent_id in webhook.agents:
            if agent_id not in known:
                raise ConfigError(
                    f"{settings.source}: webhooks[{index}].agents: agent {agent_id!r} is not configured; known "
                    f"agents: {', '.join(sorted(known)) or 'none'}."
                )
    inbound = [(f"hooks.{s}", h.agent) for s, h in settings.hooks.items()]
    for where, agent_id in [*inbound, *((f"channels.{c}", ch.agent) for c, ch in settings.channels.items())]:
        if agent_id is not None and agent_id not in known:
            raise ConfigError(
                f"{settings.source}: {where}.agent: agent {agent_id!r} is not configured; known "
                f"agents: {', '.join(sorted(known)) or 'none'}."
            )


def _check_api_keys(settings: Settings) -> None:
    """Key names, variables and hashes are unique (`[host] api_key` is named `api_key`); a sender's
    agents are configured. Whether each `key_env` is set is checked when the server starts
    (`guard.api_keys`): a client command on another machine loads the same file without the keys."""
    names = {LEGACY_KEY_NAME} if settings.host.api_key else set[str]()
    sources: dict[tuple[str, str], str] = {}
    known = {agent.id for agent in settings.agents}
    for index, key in enumerate(settings.api_keys):
        where = f"{settings.source}: api_keys[{index}] (name {key.name!r})"
        if key.name in names:
            also = " ([host] api_key is named so)" if key.name == LEGACY_KEY_NAME else ""
            raise ConfigError(
                f"{where}.name: the name {key.name!r} is used twice{also}; names must be unique."
            )
        names.add(key.name)
        source = ("key_env", key.key_env) if key.key_env is not None else ("key_sha256", key.key_sha256 or "")
        if (other := sources.get(source)) is not None:
            said = f"key_env {key.key_env!r}" if key.key_env is not None else "key_sha256"
            raise ConfigError(
                f"{where}: its {said} is also the key of {other!r}; one key has one role, so give each "
                "entry its own key."
            )
        sources[source] = key.name
        for agent_id in key.agents:
            if agent_id not in known:
                raise ConfigError(
                    f"{where}.agents: agent {agent_id!r} is not configured; known agents: "
                    f"{', '.join(sorted(known)) or 'none'}."
                )


def settings_from_mapping(data: Mapping[str, Any], *, source: str, environ: Mapping[str, str]) -> Settings:
    """Validate a parsed config mapping plus environment overrides into `Settings`."""
    merged: dict[str, Any] = dict(data)
    host = merged.get("host")
    overrides = _env_overrides(environ)
    if is_json_object(host):
        host = host | overrides  # a copy: `data` is left as it was
    if host is not None:
        merged["host"] = host
    elif overrides:
        merged["host"] = overrides
    merged["source"] = source
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source, data), details={"source": source}) from None
    if "agents" not in data:
        settings = settings.model_copy(update={"agents": [default_agent()]})
    if problems := check_models(settings.models):
        raise ConfigError("\n".join(f"{source}: {line}" for line in problems), details={"source": source})
    source_path = Path(source)
    settings = _resolve_paths(settings, source_path.parent if source_path.is_file() else Path.cwd())
    _check_agents(settings)
    _check_hooks(settings)
    _check_api_keys(settings)
    return _check_skills(settings)


def load_settings(path: Path | str | None = None, *, environ: Mapping[str, str] | None = None) -> Settings:
    """Load `path`, else `$MCPHOST_CONFIG`, else `./mcphost.toml` if present, else the embedded default.

    An explicitly named file that does not exist is an error; an absent default file is not.
    """
    env = os.environ if environ is None else environ
    explicit = path if path is not None else env.get(CONFIG_ENV)
    if explicit is not None:
        file = Path(explicit)
        if not file.is_file():
            raise ConfigError(
                f"Config file {str(file)!r} does not exist. Pass an existing file with --config, "
                f"or unset {CONFIG_ENV} to use the embedded default."
            )
    else:
        file = Path(DEFAULT_CONFIG_NAME)
        if not file.is_file():
            return settings_from_mapping({}, source="<embedded default>", environ=env)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}. Fix the syntax and try again.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: cannot be read: {exc}") from None
    return settings_from_mapping(data, source=str(file), environ=env)
