"""The `mcphost` command line.

The package owns argument parsing, logging set-up (the only place that configures logging), and how
results are shown to a person or a script (`--json`). Every command loads the config first, so a bad
config fails before anything starts — except `send` given a server's URL (`--url` or `MCPHOST_URL`)
and `cancel --url`: they are clients of a server that has its own config, and start at the cost of the
HTTP client alone. Failures exit non-zero with a one-line reason on stderr:
1 for a run that did not complete or an operational error, 2 for bad usage or bad config.

This module owns the parser, its argument types and `main`, the entry point of both the console script
(`mcphost = "mcphost.cli:main"`) and `python -m mcphost.cli` (`__main__`). It does not own what the
commands do: `_runs` (run, runs, show, runners, schema, db), `_server` (serve), `_send` (send, cancel), `_grants` (grant,
revoke and the MCP client configs), `_knowledge` (kb, tools), `_state` (state get/list/delete),
`_schedules` (schedules), `_gc` (gc), `_deliveries` (deliveries), `_channels` (channels), `_approvals` (approvals), `_replay`
(record export, replay); `_common` holds exit codes, logging set-up and output helpers.

Invariants: every subcommand, flag and help text is declared here, in the order `--help` lists them;
every command but `schema`, `init`, `completion`, `send` with a server URL and `cancel --url` loads the
config before it does anything; a `HostError` (also one wrapped in
an exception group) becomes a one-line error and exit code 1, or 2 for a `ConfigError`.

Size: past 600 lines because the whole command-line surface is declared in one place, `build_parser`,
in `--help` order (the first invariant above), so one file shows every command and flag and the shell
completions are generated from it; the commands themselves live in their own modules.
"""

from __future__ import annotations

import argparse
import errno
import getpass
import importlib
import os
import re
import sys
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from mcphost import __version__
from mcphost.cli._common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE,
    EXIT_USAGE,
    configure_logging,
    fail,
)
from mcphost.common import gcstart
from mcphost.common.excgroups import find

if TYPE_CHECKING:
    from mcphost.config import Settings

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PIPE",
    "EXIT_USAGE",
    "build_parser",
    "configure_logging",
    "main",
]

# Copies of values the parser shows in `--help`, so that building it imports nothing beyond the standard
# library (pydantic alone costs several times a bare interpreter start). tests/mcphost/test_cli.py pins
# each to its source.
RUN_STATUSES: tuple[str, ...] = ("queued", "running", "completed", "failed", "cancelled", "parked")
"""`mcphost.models.RunStatus` values."""
STATE_SCOPES: tuple[str, ...] = ("conversation", "actor", "subject", "runner", "binding", "workspace")
"""`mcphost.protocol.STATE_SCOPES`."""
OWNER_FLAGS: tuple[str, ...] = (
    "runner_id",
    "binding_id",
    "conversation_id",
    "thread_id",
    "actor_id",
    "subject_type",
    "subject_id",
    "workspace_id",
)
"""`mcphost.cli._state.OWNER_FLAGS`: every id that names a state scope's owner."""
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,199}$"
"""`mcphost.models.ID_PATTERN`."""
DEFAULT_GRACE_S = 10.0
"""`mcphost.serving.DEFAULT_GRACE_S`."""
DEFAULT_MAX_UPLOAD_BYTES = 100 * 1024 * 1024
"""`mcphost.api.DEFAULT_MAX_UPLOAD_BYTES`."""


_CONFIG_HELP = "mcphost.toml to use (default: $MCPHOST_CONFIG, ./mcphost.toml, else the embedded default)"


def _add_common(parser: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    # SUPPRESS: a command's --config is set only when given there, so it does not overwrite one given
    # before the command (`mcphost --config FILE runs` and `mcphost runs --config FILE` both work).
    parser.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help=_CONFIG_HELP)
    if json_flag:
        parser.add_argument(
            "--json", action="store_true", help="machine-readable output: one JSON document per line"
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcphost",
        description="mcphost: an MCP-native agent host. Events in, one agent run per event, facts served over MCP.",
        epilog='Quickstart: mcphost run "hello"   ·   Docs: README.md',
    )
    parser.add_argument("--version", action="version", version=f"mcphost {__version__}")
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="log verbosity on stderr (default: warning)",
    )
    parser.add_argument("--log-json", action="store_true", help="structured JSON log lines on stderr")
    parser.add_argument("--config", metavar="FILE", help=_CONFIG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "run",
        help="run one event end to end and stream the reply",
        description="Send one event through its bound agent and stream the reply as it arrives; then print the run id and status on stderr. Exits 0 when the run completed.",
    )
    p.add_argument("text", metavar="TEXT", help="the message text")
    p.add_argument("--conversation", default="cli", metavar="ID", help="conversation id (default: cli)")
    p.add_argument(
        "--actor", default=_default_actor(), metavar="ID", help="actor id (default: your user name)"
    )
    p.add_argument("--agent", metavar="ID", help="send to this agent (it must be bound to the event type)")
    p.add_argument(
        "--event-type", default="message.received", metavar="T", help="event type (default: message.received)"
    )
    p.add_argument("--event-id", metavar="ID", help="event id (a repeated id returns the existing run)")
    p.add_argument("--data", metavar="JSON", help="event data object as JSON")
    _add_common(p)

    p = sub.add_parser("runs", help="list runs, newest first", description="List runs, newest first.")
    p.add_argument("--conversation", metavar="ID", help="only this conversation")
    p.add_argument("--status", choices=RUN_STATUSES, help="only runs in this status")
    p.add_argument("--limit", type=_limit, default=20, metavar="N", help="how many (1-100, default 20)")
    p.add_argument("--cursor", metavar="C", help="continue from a previous listing")
    p.add_argument(
        "--watch", action="store_true", help="reprint the listing every --interval seconds until Ctrl-C"
    )
    _add_interval(p)
    _add_common(p)

    p = sub.add_parser(
        "show",
        help="show a run: results, event log, transcript rows and audit",
        description="Show one run with its results, event log entries, transcript rows and audit.",
    )
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument(
        "--follow",
        action="store_true",
        help="print the run's results as they are stored until it ends; exit 0 when it completed",
    )
    _add_interval(p)
    _add_common(p)

    p = sub.add_parser(
        "cancel",
        help="cancel a run (an inspection grant is revoked)",
        description="Cancel a run: in the database, where the host running it sees the request and ends it, or through a running server's API with --url (POST /v1/runs/{run_id}/cancel). An inspection grant is revoked. Exits 1 when the run has already ended.",
    )
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--url", metavar="URL", help="cancel through this server's API instead of the database")
    p.add_argument(
        "--reason", metavar="TEXT", help="why (the run ends cancelled with it, on whichever host runs it)"
    )
    _add_api_key_env(p)
    _add_common(p, json_flag=False)

    p = sub.add_parser(
        "runners",
        help="list the configured plugins and their runners (--check: start them)",
        description="List the configured plugins and the runners they provide without starting them: a bundled plugin's runners are known from its code, a harness runner whose CLI is not installed shows as missing. --check starts every plugin and lists the runners they registered, and any rejected manifests with the reason.",
    )
    p.add_argument("--check", action="store_true", help="start the plugins and list what they register")
    _add_common(p)

    p = sub.add_parser(
        "kb",
        help="knowledge bases: ingest files, list, search",
        description="Knowledge bases from [knowledge.<kb_id>] in mcphost.toml: ingest their files (Markdown, text, HTML), list them, search them.",
    )
    kb_sub = p.add_subparsers(dest="kb_command", metavar="ACTION", required=True)
    k = kb_sub.add_parser(
        "ingest",
        help="ingest a knowledge base's files (incremental)",
        description="Bring a knowledge base in line with its files: new and changed files are (re)chunked, unchanged ones skipped, removed ones deleted. PATHS (files, folders or globs) replace the configured paths; then only documents under them are deleted when gone. Safe to interrupt and re-run.",
    )
    k.add_argument("kb_id", metavar="KB")
    k.add_argument(
        "paths", nargs="*", metavar="PATH", help="files, folders or globs (default: the configured paths)"
    )
    _add_common(k)
    k = kb_sub.add_parser(
        "list",
        help="configured knowledge bases and what is stored",
        description="List the configured knowledge bases with their document and chunk counts.",
    )
    _add_common(k)
    k = kb_sub.add_parser(
        "search",
        help="search a knowledge base",
        description="The chunks of a knowledge base most relevant to QUERY (full-text: BM25 on SQLite, ts_rank_cd on PostgreSQL).",
    )
    k.add_argument("kb_id", metavar="KB")
    k.add_argument("query", metavar="QUERY")
    k.add_argument("--top-k", type=_top_k, default=5, metavar="N", help="how many chunks (1-50, default 5)")
    k.add_argument("--path", metavar="GLOB", help="only documents whose path matches this glob")
    k.add_argument("--prefix", metavar="P", help="only documents whose path starts with P")
    k.add_argument(
        "--meta", action="append", metavar="KEY=VALUE", help="only documents with this metadata (repeatable)"
    )
    _add_common(k)

    p = sub.add_parser(
        "tools",
        help="upstream tool servers: status and tools",
        description="Connect every [tools.<server>] upstream MCP server and list its status and its tools as runs see them (<server>__<tool>). Exits 1 when a server is unavailable.",
    )
    _add_tools_timeout(p)
    _add_common(p)

    p = sub.add_parser(
        "schema",
        help="write the protocol's and mcphost.toml's JSON Schemas and the OpenAPI document to DIR",
        description="Write every Protocol v1 model (the per-run MCP tools' answers included) as JSON Schema "
        "into DIR, for runners in other languages, mcphost_toml.schema.json, the config file's schema "
        "for editors, and openapi.json, the HTTP API's document (for client generators).",
    )
    p.add_argument("dir", metavar="DIR")

    p = sub.add_parser(
        "serve",
        help="serve the HTTP API and the per-run MCP endpoints",
        description="Serve /v1 (events, runs, result streams, artifacts), /healthz, /metrics and the per-run MCP endpoints. SIGTERM/SIGINT: stop taking events, let running runs finish for --grace seconds, cancel the rest, stop the plugins.",
    )
    p.add_argument(
        "--listen", metavar="HOST:PORT", help="address to bind (default: [host] listen, 127.0.0.1:8787)"
    )
    p.add_argument(
        "--grace",
        type=_seconds,
        default=DEFAULT_GRACE_S,
        metavar="S",
        help=f"shutdown grace period for running runs (default {DEFAULT_GRACE_S:g} s)",
    )
    p.add_argument(
        "--max-upload-bytes",
        type=_positive_int,
        default=DEFAULT_MAX_UPLOAD_BYTES,
        metavar="N",
        help=f"largest artifact upload (default {DEFAULT_MAX_UPLOAD_BYTES})",
    )
    _add_common(p, json_flag=False)

    p = sub.add_parser(
        "send",
        help="send an event to a running server and stream the reply",
        description="Post a message event to a running `mcphost serve` and stream the reply (SSE), reconnecting with Last-Event-ID if the connection drops. Exits 0 when the run completed.",
    )
    p.add_argument("text", metavar="TEXT", help="the message text")
    p.add_argument(
        "--url",
        metavar="URL",
        help="server base URL (default: $MCPHOST_URL, else [host] public_url / listen)",
    )
    p.add_argument("--conversation", default="cli", metavar="ID", help="conversation id (default: cli)")
    p.add_argument(
        "--actor", default=_default_actor(), metavar="ID", help="actor id (default: your user name)"
    )
    p.add_argument("--agent", metavar="ID", help="send to this agent (it must be bound to the event type)")
    p.add_argument(
        "--event-type", default="message.received", metavar="T", help="event type (default: message.received)"
    )
    p.add_argument(
        "--event-id",
        metavar="ID",
        help="event id (default: a new one; a repeated id returns the existing run)",
    )
    p.add_argument("--data", metavar="JSON", help="event data object as JSON")
    _add_api_key_env(p)
    _add_common(p)

    p = sub.add_parser(
        "grant",
        help="create an inspection grant: an MCP endpoint onto one conversation for an IDE or harness",
        description="Create an inspection grant (a run without a runner) bound to one conversation, read-only unless --write, and print ready-to-paste MCP configs for Claude Code, Codex, VS Code and Cursor, direct over HTTP and through mcphost-bridge. The token is printed once.",
    )
    p.add_argument(
        "--conversation", required=True, type=_conversation_id, metavar="ID", help="the conversation to read"
    )
    p.add_argument(
        "--thread", type=_conversation_id, metavar="ID", help="one thread of it (default: the main line)"
    )
    p.add_argument(
        "--ttl",
        type=_ttl,
        default=3600.0,
        metavar="DURATION",
        help="how long the grant lives: 90s, 30m, 1h (default), 2d",
    )
    p.add_argument(
        "--tools",
        nargs="+",
        metavar="GLOB",
        help="only the facts tools matching these globs (default: every read tool); '*' never grants host "
        "tools, only a glob that contains '__' does (see --host-tools)",
    )
    p.add_argument(
        "--host-tools",
        nargs="+",
        metavar="SERVER__TOOL",
        help="grant these host (upstream) tools, each named <server>__<tool> (globs allowed: 'search__*'); "
        "a grant has no host tool unless it is named here or in --tools",
    )
    p.add_argument("--write", action="store_true", help="also allow creating artifacts in the conversation")
    p.add_argument(
        "--url",
        metavar="URL",
        help="the server's base URL as clients reach it (default: the URL of a `mcphost serve` running on "
        "this data directory, else [host] public_url, else [host] listen)",
    )
    _add_common(p)

    p = sub.add_parser(
        "revoke",
        help="revoke an inspection grant (or request a run's cancel)",
        description="End an inspection grant now: its token stops working. For a run with a runner, request its cancel.",
    )
    p.add_argument("run_id", metavar="RUN_ID")
    _add_common(p, json_flag=False)

    p = sub.add_parser(
        "schedules",
        help="list schedules with their next fire times",
        description="List the schedules (the config file's [[schedules]], then those created through POST /v1/schedules, each by id) with their next and newest fire times, straight from the database, a page at a time: --cursor continues where the previous page said. --json prints one document with the page and next_cursor.",
    )
    p.add_argument("--limit", type=_limit, default=20, metavar="N", help="how many (1-100, default 20)")
    p.add_argument("--cursor", metavar="C", help="continue from a previous listing")
    _add_common(p)

    p = sub.add_parser(
        "gc",
        help="delete records older than [retention] allows",
        description="Delete what is older than the [retention] *_days keys allow: run results, audit, event-log and transcript rows, expired artifacts and their bytes, dead deliveries, harness run folders and harness-home session files; in bounded batches, never what a queued, running or parked run references. Reports rows (folders, files) and bytes per kind. Without any key everything is kept. Waits for nobody: when a serving host is collecting (it holds the retention lease) it says so and exits 1. --dry-run counts and deletes nothing; --json prints one JSON document per kind.",
    )
    p.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")
    _add_common(p)

    p = sub.add_parser(
        "state",
        help="run-visible state: get, list, delete",
        description="Read or delete run-visible state values straight in the database (no server needed). A scope's owner is named by ids: conversation = --runner-id --binding-id --conversation-id [--thread-id]; actor = --runner-id --binding-id --actor-id; subject = --runner-id --binding-id --subject-type --subject-id; runner = --runner-id; binding = --binding-id; workspace = --workspace-id --runner-id.",
    )
    state_sub = p.add_subparsers(dest="state_command", metavar="ACTION", required=True)
    for action, help_text in (
        ("get", "print one value"),
        ("list", "list an owner's values in key order"),
        ("delete", "delete one value (also one too deep to be served)"),
    ):
        s = state_sub.add_parser(
            action, help=help_text, description=help_text[0].upper() + help_text[1:] + "."
        )
        s.add_argument("scope", choices=STATE_SCOPES, metavar="SCOPE", help=", ".join(STATE_SCOPES))
        if action != "list":
            s.add_argument("key", metavar="KEY")
        else:
            s.add_argument("--prefix", metavar="P", help="only keys starting with P")
            s.add_argument("--limit", type=int, default=50, metavar="N", help="page size (1-100, default 50)")
            s.add_argument("--cursor", metavar="C", help="continue after a previous page")
        for name in OWNER_FLAGS:
            s.add_argument(f"--{name.replace('_', '-')}", dest=name, metavar="ID")
        _add_common(s)

    p = sub.add_parser(
        "init",
        help="write a commented mcphost.toml",
        description="Write a commented mcphost.toml that loads as it is (its values are the defaults) and says what to change. Refuses to overwrite a file unless --force.",
    )
    p.add_argument(
        "path", nargs="?", default="mcphost.toml", metavar="PATH", help="where (default: ./mcphost.toml)"
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing file")

    p = sub.add_parser(
        "explain",
        help="dry run: the agent and grant an event would get, and why a tool is (not) allowed",
        description="Explain an event that has not happened: which agent binds it and why the others do not, the grant it would get layer by layer (the runner's manifest, the agent's config, the event's scope ids) and, for each named tool, resource or state scope, 'allowed' or the layer that removed it and the config key or manifest field that would add it. Nothing is stored or run.",
    )
    p.add_argument(
        "--event", required=True, metavar="FILE.json", help="the event, as POST /v1/events takes it"
    )
    p.add_argument(
        "--tool",
        dest="tools",
        action="append",
        metavar="NAME",
        help="a facts tool or <server>__<tool> (repeatable)",
    )
    p.add_argument(
        "--resource", dest="resources", action="append", metavar="URI", help="a resource URI (repeatable)"
    )
    p.add_argument(
        "--state-scope",
        dest="state_scopes",
        action="append",
        metavar="SCOPE",
        help="a state scope, checked for read and write (repeatable)",
    )
    p.add_argument(
        "--model",
        dest="models",
        action="append",
        metavar="ID[:invoke|stream|rerank]",
        help="a host model ([models.<id>]), or one way of calling it (repeatable)",
    )
    _add_common(p)

    p = sub.add_parser(
        "usage",
        help="host model usage: tokens and cost by agent, actor, model, conversation or day",
        description="Total the host model calls (the per-run model endpoints) stored in the database.",
    )
    p.add_argument(
        "--by",
        choices=["agent", "actor", "model", "conversation", "day"],
        default="model",
        help="what to total by (default: model)",
    )
    _add_common(p)

    p = sub.add_parser("config", help="check the configuration", description="Configuration tools.")
    config_sub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    c = config_sub.add_parser(
        "check",
        help="validate the config, its runners, plugins, CLIs, tool servers, models and database",
        description="Check the config: it loads; every agent's runner is provided by a configured plugin; every plugin's program exists; the harness CLIs the agents need are installed; every upstream tool server answers; every [models.<id>] answers a 1-token request (with the host's key; --skip-models to spend nothing); the database opens. One line per check (ok, warn, fail); exits 1 when a check failed, 2 when the config does not load.",
    )
    _add_tools_timeout(c)
    c.add_argument(
        "--skip-models",
        action="store_true",
        help="do not call the [models] (each check call costs one token)",
    )
    _add_common(c)

    p = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description='Print a completion script for SHELL. bash: eval "$(mcphost completion bash)" in ~/.bashrc; zsh: the same with zsh in ~/.zshrc; fish: mcphost completion fish > ~/.config/fish/completions/mcphost.fish.',
    )
    p.add_argument("shell", choices=["bash", "zsh", "fish"], metavar="SHELL", help="bash, zsh or fish")

    p = sub.add_parser(
        "deliveries",
        help="outbound webhook deliveries; redeliver one",
        description="List outbound webhook deliveries, newest first (--status dead: the dead-letter list), or "
        "put one back to pending with `mcphost deliveries redeliver DELIVERY_ID`.",
    )
    p.add_argument(
        "action", nargs="?", choices=["list", "redeliver"], default="list", help="list (default) or redeliver"
    )
    p.add_argument(
        "delivery_id", nargs="?", metavar="DELIVERY_ID", help="the delivery to send again (redeliver)"
    )
    p.add_argument(
        "--status", choices=["pending", "delivered", "dead"], help="only deliveries in this status"
    )
    p.add_argument("--limit", type=_limit, default=20, metavar="N", help="how many (1-100, default 20)")
    p.add_argument("--cursor", metavar="C", help="continue from a previous listing")
    _add_common(p)

    p = sub.add_parser(
        "channels",
        help="the [channels.<id>] chat bots; point a platform at the host",
        description="List the [channels.<id>] chat bots and the URL each platform must call, or "
        "`mcphost channels register CHANNEL_ID`: set a Telegram bot's webhook (setWebhook with the channel's "
        "secret token), or print the URL and the exact settings to paste for Slack and Discord.",
    )
    p.add_argument(
        "action", nargs="?", choices=["list", "register"], default="list", help="list (default) or register"
    )
    p.add_argument("channel_id", nargs="?", metavar="CHANNEL_ID", help="the channel to register")
    p.add_argument("--url", help="the URL the platform calls (default: [host] public_url + /v1/channels/ID)")
    _add_common(p)

    p = sub.add_parser(
        "runtimes",
        help="registered runtimes; add, drain, disable, enable or remove one",
        description="List the runtimes (worker machines that claim remote runs), or change one. `add NAME` "
        "prints the runtime's token once (stored hashed).",
    )
    p.add_argument(
        "action",
        nargs="?",
        choices=["list", "add", "drain", "disable", "enable", "remove"],
        default="list",
        help="list (default), add, drain, disable, enable or remove",
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="the runtime's name")
    p.add_argument(
        "--labels", metavar="K=V,...", help="add: the runtime's labels (they win over reported ones)"
    )
    _add_common(p)

    p = sub.add_parser(
        "runtime",
        help="run this machine as a runtime of a host",
        description="Register with the host at --host with a runtime token, heartbeat, claim the runs of "
        "agents whose [agents.runtime] labels this runtime has, and run them with this machine's plugins.",
    )
    p.add_argument("--host", required=True, metavar="URL", help="the host's URL (its public URL)")
    p.add_argument("--token", metavar="TOKEN", help="the runtime token (default: $MCPHOST_RUNTIME_TOKEN)")
    p.add_argument(
        "--slots", type=int, default=1, choices=range(1, 257), metavar="N", help="runs at once (1-256)"
    )
    p.add_argument("--labels", metavar="K=V,...", help="labels to report (the host's win on conflict)")
    p.add_argument("--workdir", type=Path, metavar="DIR", help="the plugins' working folder")
    _add_common(p, json_flag=False)

    p = sub.add_parser(
        "approvals",
        help="human approvals; approve, deny or answer one",
        description="List approvals, newest first (--status pending: what waits for a decision), or decide one "
        "with `mcphost approvals approve APPROVAL_ID` / `mcphost approvals deny APPROVAL_ID [--note TEXT]`; "
        "a question a harness asked the user (kind interaction) is answered with "
        "`mcphost approvals answer APPROVAL_ID TEXT`. "
        "Deciding again the same way changes nothing; the other decision is refused.",
    )
    p.add_argument(
        "action",
        nargs="?",
        choices=["list", "approve", "deny", "answer"],
        default="list",
        help="list (default), approve, deny or answer",
    )
    p.add_argument("approval_id", nargs="?", metavar="APPROVAL_ID", help="the approval to decide")
    p.add_argument(
        "answer", nargs="?", type=_note, metavar="TEXT", help="with answer: the answer to the question"
    )
    p.add_argument("--note", type=_note, help="why (stored with the decision; at most 2000 characters)")
    p.add_argument(
        "--status",
        choices=["pending", "approved", "denied", "expired"],
        help="only approvals in this status",
    )
    p.add_argument("--limit", type=_limit, default=20, metavar="N", help="how many (1-100, default 20)")
    p.add_argument("--cursor", metavar="C", help="continue from a previous listing")
    _add_common(p)

    p = sub.add_parser(
        "record",
        help="export a recorded run",
        description="Recorded runs (agents with record = true, events with options.record): export one as a "
        "JSON document (format mcphost.recording/1) for `mcphost replay --suite`.",
    )
    record_sub = p.add_subparsers(dest="record_command", metavar="ACTION", required=True)
    r = record_sub.add_parser(
        "export",
        help="write a recorded run as one JSON document",
        description="Write the recording of a finished run (envelope, context, every MCP call with its answer, "
        "the result stream) as one JSON document to FILE or stdout. Exits 2 when the run does not exist, "
        "was not recorded or has not ended.",
    )
    r.add_argument("run_id", metavar="RUN_ID", help="the recorded run")
    r.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    _add_common(r, json_flag=False)

    p = sub.add_parser(
        "replay",
        help="replay a recorded run against a runner and show what changed",
        description="Start the runner (the recorded one, or --runner) on a replay of a recorded run: the same "
        "context, every MCP call answered from the recording (a call that was not recorded gets a tool error "
        "and counts as a divergence), writes kept in a scratch database. Then compare the tool calls, final "
        "messages, state writes and artifacts with the recording. With --suite, replay every exported "
        "recording (*.json) in DIR. Exits 0 when nothing diverged, 1 when something did, 2 on an error.",
    )
    p.add_argument("run_id", nargs="?", metavar="RUN_ID", help="the recorded run (not with --suite)")
    p.add_argument(
        "--runner", metavar="RUNNER_ID", help="replay with this runner instead of the recorded one"
    )
    p.add_argument("--suite", metavar="DIR", help="replay every exported recording (*.json) in DIR")
    p.add_argument(
        "--junit", metavar="FILE", help="with --suite: write JUnit XML (one testcase per recording)"
    )
    _add_common(p)

    p = sub.add_parser("db", help="database maintenance", description="Database maintenance.")
    db_sub = p.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    u = db_sub.add_parser(
        "upgrade",
        help="apply pending migrations",
        description="Apply pending schema migrations (the host also does this at start).",
    )
    _add_common(u, json_flag=False)
    return parser


def _add_tools_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=float,
        default=15.0,
        metavar="S",
        help="how long to wait for each tool server (default 15)",
    )


def _add_api_key_env(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--api-key-env",
        default="MCPHOST_API_KEY",
        metavar="NAME",
        help="environment variable holding the API key (default: MCPHOST_API_KEY)",
    )


def _add_interval(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--interval",
        type=_interval,
        default=1.0,
        metavar="S",
        help="seconds between reads of the database for --follow/--watch (default 1)",
    )


def _interval(value: str) -> float:
    try:
        n = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds (a number), got {value!r}") from None
    if not 0.05 <= n <= 3600:
        raise argparse.ArgumentTypeError(f"expected seconds from 0.05 to 3600, got {n:g}")
    return n


def _limit(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 100, got {value!r}") from None
    if not 1 <= n <= 100:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 100, got {n}")
    return n


def _note(value: str) -> str:
    if len(value) > 2000 or "\x00" in value:
        raise argparse.ArgumentTypeError("expected at most 2000 characters and no NUL")
    return value


def _seconds(value: str) -> float:
    try:
        n = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds (a number >= 0), got {value!r}") from None
    if not 0 <= n <= 3600:
        raise argparse.ArgumentTypeError(f"expected seconds from 0 to 3600, got {n:g}")
    return n


def _positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value!r}")
    return int(value)


def _top_k(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 50:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 50, got {value!r}")
    return int(value)


def _default_actor() -> str:
    try:
        name = getpass.getuser()
    except (OSError, KeyError):
        return "local"
    return "".join(c for c in name if c.isalnum() or c in "._-") or "local"


_TTL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_TTL_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _ttl(value: str) -> float:
    match = _TTL.match(value.lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"expected a duration such as 90s, 30m, 1h or 2d; got {value!r}")
    return float(match.group(1)) * _TTL_UNITS[match.group(2)]


def _conversation_id(value: str) -> str:
    if not re.match(ID_PATTERN, value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a valid id (letters, digits and ._:@/+=- up to 200)"
        )
    return value


_COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("_runs", "cmd_run"),
    "runs": ("_runs", "cmd_runs"),
    "show": ("_runs", "cmd_show"),
    "runners": ("_runners", "cmd_runners"),
    "db": ("_runs", "cmd_db_upgrade"),
    "kb": ("_knowledge", "cmd_kb"),
    "tools": ("_knowledge", "cmd_tools"),
    "serve": ("_server", "cmd_serve"),
    "send": ("_send", "cmd_send"),
    "cancel": ("_send", "cmd_cancel"),
    "grant": ("_grants", "cmd_grant"),
    "revoke": ("_grants", "cmd_revoke"),
    "state": ("_state", "cmd_state"),
    "schedules": ("_schedules", "cmd_schedules"),
    "gc": ("_gc", "cmd_gc"),
    "deliveries": ("_deliveries", "cmd_deliveries"),
    "channels": ("_channels", "cmd_channels"),
    "approvals": ("_approvals", "cmd_approvals"),
    "runtimes": ("_runtimes", "cmd_runtimes"),
    "runtime": ("_runtimes", "cmd_runtime"),
    "explain": ("_explain", "cmd_explain"),
    "usage": ("_usage", "cmd_usage"),
    "record": ("_replay", "cmd_record"),
    "replay": ("_replay", "cmd_replay"),
}
"""Each command's module (imported only when the command runs: `--help` and `--version` import none of
them, nor the server, SQLAlchemy or `mcp` they pull in) and its `async (args, settings) -> exit code`."""


_OPENS_HOST = frozenset({"run", "serve"})
"""Commands that open a host and start faster for it: the plugins its agents use are spawned before the
command's module (and the server stack) is imported (`mcphost.app.plugins_first`), and the command
turns the collector back on itself once the host is up (`mcphost.common.gcstart`); every other command
does that before it runs, so a long `watch` or `send` never runs without it."""


async def _plugins_first(module: str, name: str, args: argparse.Namespace, settings: Settings) -> int:
    """Run a command of `_OPENS_HOST` with its host's first plugins spawned before its module is imported."""
    from mcphost.app import plugins_first

    if args.command == "serve":  # what `serve` refuses, it refuses before a plugin is spawned
        from mcphost.guard import listen_of

        listen_of(settings, args.listen)
    async with plugins_first(settings):
        command: Any = getattr(importlib.import_module(f"mcphost.cli.{module}"), name)
        return int(await command(args, settings))


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: `argv` (None: the process's own arguments, as the console script and `python -m
    mcphost.cli` call it; the process then ends here, `exit_now`). Returns the exit code."""
    if argv is not None:
        return _guarded(argv)
    gcstart.pause()  # the console script (not a caller in-process): see `mcphost.common.gcstart`
    return exit_now(_guarded(None))  # never returns: the process ends there


def exit_now(code: int) -> NoReturn:
    """End the process with `code` once a command is done, without the interpreter's teardown.

    Everything a command holds is closed before it returns (plugins stopped, the database closed, the
    tracer flushed and shut down), so what is left at exit is clearing every module and object, ~85 ms
    of a one-shot run's ~1.3 s on a 2-core machine. The standard streams and the logging handlers are
    flushed first. Under a tracer, profiler or coverage measurement, which write their data at exit,
    the interpreter exits as usual.
    """
    if sys.gettrace() is not None or sys.getprofile() is not None or "coverage" in sys.modules:
        sys.exit(code)
    if "logging" in sys.modules:
        import logging

        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):  # a reader gone or a stream closed: nothing more can be written
            stream.flush()
    os._exit(code)


def _guarded(argv: Sequence[str] | None) -> int:
    """`_main`, with an interrupt, a reader gone away and the collector's pause handled."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # inside the try: a reader gone before the final flush is a broken pipe too
        return code
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED)
    except BaseException as exc:
        if find(exc, KeyboardInterrupt) is not None:
            return fail("interrupted", EXIT_INTERRUPTED)
        if find(exc, BrokenPipeError) is not None:
            # The reader went away (`mcphost runs | head -1`): stop quietly, as Unix tools do.
            _drop_stdout()
            return EXIT_PIPE
        full = find(exc, OSError)
        if full is not None and full.errno in (errno.ENOSPC, errno.EDQUOT):
            # A full disk (the output redirected to it, or the data folder on it) is not a defect: one
            # line that says what to do, not a traceback.
            _drop_stdout()
            return fail(f"{full.strerror}: free some space and run the command again", EXIT_FAILED)
        raise
    finally:
        gcstart.resume()


def _drop_stdout() -> None:
    """Point stdout at /dev/null: what it still buffers can never be written, and the final flush would
    fail a second time."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command not in _OPENS_HOST:
        gcstart.resume()
    configure_logging(args.log_level, json_logs=args.log_json)
    if args.command == "schema":
        from mcphost.cli._runs import cmd_schema

        return cmd_schema(args)
    if args.command == "init":
        from mcphost.cli._setup import cmd_init

        return cmd_init(args)
    if args.command == "completion":
        from mcphost.cli._completion import completion_script

        sys.stdout.write(completion_script(parser, args.shell))
        return EXIT_OK
    import anyio

    if args.command == "config":
        from mcphost.cli._setup import cmd_config_check

        return anyio.run(cmd_config_check, args, args.config)

    from mcphost.errors import ConfigError, HostError, find_error

    try:
        if (args.command == "send" and (args.url or os.environ.get("MCPHOST_URL"))) or (
            args.command == "cancel" and args.url
        ):
            from mcphost.cli._send import cmd_client

            return anyio.run(cmd_client, args)
        from mcphost.config import load_settings

        settings = load_settings(args.config)
        module, name = _COMMANDS[args.command]
        if args.command in _OPENS_HOST:
            from mcphost.cli._server import loop_options

            options = loop_options(settings) if args.command == "serve" else {}
            return anyio.run(_plugins_first, module, name, args, settings, backend_options=options)
        command: Any = getattr(importlib.import_module(f"mcphost.cli.{module}"), name)
        return anyio.run(command, args, settings)
    except Exception as exc:
        # Errors raised inside task groups arrive wrapped in exception groups.
        error = find_error(exc, HostError)
        if error is None:
            raise
        return fail(error.message, EXIT_USAGE if isinstance(error, ConfigError) else EXIT_FAILED)
