"""Getting started and checking a setup: `mcphost init` and `mcphost config check`.

Owns the commented `mcphost.toml` that `init` writes (every key it sets is a default, so the file loads
and changes nothing until edited) and the checks of `config check`: the config loads, every agent's
runner is one the configured plugins provide, every plugin's program exists, the harness CLIs the agents
need are installed, every upstream tool server answers, every host model answers a 1-token request
(unless `--skip-models`), the database opens. Does not own validating the
config (`mcphost.config`), the runner listing (`_runners`) nor connecting upstreams (`mcphost.gateway`).

Invariants: `init` never overwrites a file unless `--force`; `config check` prints one line (or one
JSON document) per check and exits 1 when any failed, 2 when the config itself does not load.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from mcphost.cli._common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, dump, fail

INIT_TEMPLATE = """\
# mcphost.toml - written by `mcphost init`. Every key is optional; the values below are the defaults.
# `mcphost config check` checks this file, its runners, plugins, tool servers and database.
# Reference: README.md, "Configuration". MCPHOST_<KEY> environment variables override [host] keys.

[host]
# database_url = "postgresql+asyncpg://user:password@127.0.0.1:5432/mcphost"   # default: SQLite below
data_dir = ".mcphost"              # the SQLite database, blobs and run folders
listen = "127.0.0.1:8787"          # where `mcphost serve` listens
# public_url = "https://agents.example.com"   # how runners reach the host (default http://<listen>)
# api_key = "..."                  # an admin key for /v1; without any key the server stays on loopback
public = ["openapi", "docs"]       # which of metrics, openapi, docs answer without a key
run_timeout_s = 300                # default run deadline (seconds)
bundled_plugins = true             # start the bundled runners: echo, memo, claude-code, codex-agent

# API keys with roles (README, "API keys and roles"): admin | operator (decide, cancel, redeliver,
# schedules, and read) | sender (post events, read its own runs) | reader (GET only).
# [[api_keys]]
# name = "ci"
# key_env = "MCPHOST_CI_KEY"       # the variable holding the key; or key_sha256 = "<hex SHA-256 of the key>"
# role = "sender"
# agents = ["default"]             # sender only: the agents its events may bind to

# A plugin of your own: a long-lived process speaking the stdio protocol (README, "Writing a runner").
# `python` here is mcphost's own interpreter.
# [[plugins]]
# command = ["python", "shout.py"]

# Which agent takes which events. Without any [[agents]], one agent `default` answers message.received
# with the bundled memo runner. `mcphost runners` lists the runner ids you can name.
[[agents]]
id = "default"
runner = "plugin:mcphost/memo/default"
event_types = ["message.received"]

# An agent driving Claude Code (needs the `claude` CLI; see examples/claude-code.toml):
# [[agents]]
# id = "coder"
# runner = "plugin:mcphost/claude-code/default"
# match = { conversation_id = "code" }
# actions = { allow = ["message.edit"] }   # platform actions its runs may ask for (action.requested);
#                                          # the runner's manifest must list them in platform_api too

# Upstream MCP tool servers the agents may call (`mcphost tools` lists them):
# [tools.weather]
# command = ["python", "tools/weather_server.py"]

# A signed inbound webhook at POST /v1/hooks/github (GitHub: ping is answered 200 without a run):
# [hooks.github]
# verify = "github"
# secret = "a-long-random-string-also-set-on-github"
# events = ["push", "pull_request"]        # others are answered 200 and ignored; unset: every event
# conversation_id = "$.repository.full_name"   # event types github.push, github.pull_request
# replay_window_s = 3600                   # GitHub signs no delivery id: refuse its body again under a new one

# Knowledge bases the agents may search (`mcphost kb ingest docs` indexes them):
# [knowledge.docs]
# name = "Project docs"
# paths = ["docs/**/*.md"]

# A receiver of what runs produce, signed per Standard Webhooks (`mcphost deliveries` lists the outbox):
# [[webhooks]]
# url = "https://chat-adapter.example.com/mcphost"
# secret = "whsec_..."             # whsec_ and the base64 of 16+ random bytes
# max_age_s = 86400                # retried this long, then dead
# timeout_s = 15                   # the whole of one send, the answer included (at most 50)
"""


def cmd_init(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if path.exists() and not args.force:
        return fail(f"{str(path)!r} exists; pass --force to overwrite it", EXIT_USAGE)
    try:
        path.write_text(INIT_TEMPLATE, encoding="utf-8")
    except OSError as exc:
        return fail(f"cannot write {str(path)!r}: {exc.strerror or exc}")
    print(f"wrote {path}; check it with: mcphost --config {path} config check", file=sys.stderr)
    return EXIT_OK


@dataclass
class Check:
    check: str
    status: str
    """`ok`, `warn` (cannot be told without starting something, or not checked) or `fail`."""
    detail: str
    http_status: int | None = None
    """A model check's: the upstream's answer."""
    latency_ms: float | None = None
    """A model check's: how long its answer took."""


def _show(check: Check, *, as_json: bool) -> None:
    if as_json:
        dump({k: v for k, v in asdict(check).items() if v is not None})
    else:
        print(f"{check.status:<4}  {check.check:<24} {check.detail}", flush=True)


async def _checks(args: argparse.Namespace, settings_source: str | None) -> list[Check]:
    from mcphost.app import open_database
    from mcphost.cli._runners import program_found, static_listing
    from mcphost.config import load_settings
    from mcphost.errors import HostError, find_error
    from mcphost.gateway.host_tools import Gateway, UpstreamState

    checks: list[Check] = []

    def add(check: Check) -> None:
        checks.append(check)
        _show(check, as_json=args.json)

    settings = load_settings(settings_source)
    add(Check("config", "ok", f"{settings.source} loads ({len(settings.agents)} agents)"))

    plugins, runners = static_listing(settings)
    unknown_plugins = [p.name for p in plugins if p.state == "configured" and not p.runners]
    for plugin in settings.all_plugins():
        ok = program_found(plugin)
        add(
            Check(
                f"plugin {plugin.display_name}",
                "ok" if ok else "fail",
                " ".join(plugin.command) if ok else f"{plugin.command[0]!r} is not found",
            )
        )
    by_id = {r.id: r for r in runners}
    for agent in settings.agents:
        runner = by_id.get(agent.runner)
        name = f"agent {agent.id}"
        if runner is None and unknown_plugins:
            add(
                Check(
                    name,
                    "warn",
                    f"runner {agent.runner!r} is not a bundled one; plugin(s) {', '.join(unknown_plugins)} "
                    "tell theirs only when started: `mcphost runners --check`",
                )
            )
        elif runner is None:
            known = ", ".join(by_id) or "none"
            add(Check(name, "fail", f"runner {agent.runner!r} is not provided by any plugin; known: {known}"))
        elif runner.status == "missing":
            add(Check(name, "fail", f"runner {agent.runner}: {runner.detail}"))
        else:
            add(
                Check(name, "ok", f"runner {agent.runner}" + (f" ({runner.detail})" if runner.detail else ""))
            )

    if settings.tools:
        gateway = Gateway.from_settings(settings)
        async with gateway.running():
            servers = await gateway.catalog(timeout=args.timeout)
        for server in servers:
            ready = server.state is UpstreamState.READY
            add(
                Check(
                    f"tools {server.server}",
                    "ok" if ready else "fail",
                    f"{len(server.tools)} tools" if ready else f"{server.state.value}: {server.last_error}",
                )
            )

    if settings.models and args.skip_models:
        add(Check("models", "warn", f"{len(settings.models)} models not called (--skip-models)"))
    elif settings.models:
        import httpx2

        from mcphost.llm.probe import probe_model

        async with httpx2.AsyncClient(follow_redirects=False, trust_env=False) as client:
            for model_id, entry in settings.models.items():
                found = await probe_model(client, model_id, entry, timeout_s=args.timeout)
                status = "warn" if found.status == "skipped" else found.status
                add(Check(f"model {model_id}", status, found.detail, found.http_status, found.latency_ms))

    from mcphost.cli._runs import redact

    try:
        async with open_database(settings):
            pass
        add(Check("database", "ok", f"{redact(settings.database_url)} opens, schema up to date"))
    except Exception as exc:
        error = find_error(exc, HostError)
        if error is None:
            raise
        add(Check("database", "fail", error.message))
    return checks


async def cmd_config_check(args: argparse.Namespace, config: str | None) -> int:
    from mcphost.errors import ConfigError

    try:
        checks = await _checks(args, config)
    except ConfigError as exc:
        _show(Check("config", "fail", exc.message), as_json=args.json)
        return EXIT_USAGE
    return EXIT_FAILED if any(c.status == "fail" for c in checks) else EXIT_OK
