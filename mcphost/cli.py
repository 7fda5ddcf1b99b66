"""The `mcphost` command line.

Owns argument parsing, logging set-up (the only place that configures logging), and how results are
shown to a person or a script (`--json`). Every command loads the config first, so a bad config fails
before anything starts. Failures exit non-zero with a one-line reason on stderr:
1 for a run that did not complete or an operational error, 2 for bad usage or bad config.
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TextIO

import anyio
import httpx2

from mcphost import __version__
from mcphost.api import DEFAULT_MAX_UPLOAD_BYTES, ApiLimits
from mcphost.app import (
    DEFAULT_GRACE_S,
    advertised_url,
    create_inspection_grant,
    end_inspection_grant,
    open_database,
    open_host,
    serve,
    serve_locally,
)
from mcphost.config import Settings, load_settings
from mcphost.context import TOKEN_ENV, mcp_url
from mcphost.errors import ConfigError, HostError
from mcphost.gateway import Gateway, UpstreamState
from mcphost.knowledge import IngestProgress, KnowledgeBases
from mcphost.models import ID_PATTERN, AgentEventEnvelope, Run, RunStatus, new_id
from mcphost.protocol import json_schemas

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in ("plugin", "run_id"):
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def configure_logging(level: str, *, json_logs: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _JsonFormatter()
        if json_logs
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("sqlalchemy", "alembic", "httpx", "httpcore", "aiosqlite", "asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def _fail(message: str, code: int = EXIT_FAILED) -> int:
    print(f"mcphost: error: {message}", file=sys.stderr)
    return code


def _dump(obj: Any, out: TextIO = sys.stdout) -> None:
    out.write(json.dumps(obj, indent=2, default=str) + "\n")


def _run_line(run: Run) -> str:
    err = f"  {run.error.code}: {run.error.message}" if run.error else ""
    return f"{run.run_id}  {run.status.value:<9}  agent={run.agent_id}  conversation={run.conversation_id or '-'}{err}"


# -- commands --------------------------------------------------------------------------------------------


async def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    event = _event_from_args(args)
    # The run's MCP endpoint is served on an ephemeral loopback port for the command's duration.
    async with open_host(settings) as host, serve_locally(host):
        admission = await host.orchestrator.submit(event)
        run_id = admission.run.run_id
        streamed = False
        final_text: str | None = None
        async for item in host.orchestrator.results(run_id):
            if args.json:
                print(json.dumps({"seq": item.seq, **item.payload}), flush=True)
                continue
            data = item.payload.get("data", {})
            if item.type == "message.delta":
                chunk = data.get("chunk", {}).get("content")
                if chunk:
                    sys.stdout.write(chunk)
                    sys.stdout.flush()
                    streamed = True
            elif item.type == "message.completed" or (item.type == "run.completed" and data.get("message")):
                final_text = (data.get("message") or {}).get("content")
        run = await host.orchestrator.wait(run_id)
    if args.json:
        _dump({"run": run.model_dump(mode="json")})
    else:
        if not streamed and final_text:
            sys.stdout.write(final_text)
        if streamed or final_text:
            sys.stdout.write("\n")
        sys.stdout.flush()
        print(_run_line(run), file=sys.stderr)
    return EXIT_OK if run.status is RunStatus.COMPLETED else EXIT_FAILED


def _event_from_args(args: argparse.Namespace) -> AgentEventEnvelope:
    payload: dict[str, Any] = {
        "event_type": args.event_type,
        "source": "cli",
        "conversation": {"conversation_id": args.conversation},
        "actor": {"actor_id": args.actor, "actor_type": "user"},
        "input": {"text": args.text},
    }
    if args.event_id:
        payload["event_id"] = args.event_id
    if args.agent:
        payload["agent_id"] = args.agent
    if args.data:
        try:
            payload["data"] = json.loads(args.data)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--data is not valid JSON: {exc}") from None
    from pydantic import ValidationError

    try:
        return AgentEventEnvelope.model_validate(payload)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"the event is not valid: {where}: {err['msg']}") from None


async def cmd_runs(args: argparse.Namespace, settings: Settings) -> int:
    status = RunStatus(args.status) if args.status else None
    async with open_database(settings) as stores:
        page = await stores.runs.list(
            conversation_id=args.conversation, status=status, limit=args.limit, cursor=args.cursor
        )
    if args.json:
        _dump({"runs": [r.model_dump(mode="json") for r in page.items], "next_cursor": page.next_cursor})
        return EXIT_OK
    if not page.items:
        print("no runs", file=sys.stderr)
    for run in page.items:
        print(_run_line(run))
    if page.has_more and page.next_cursor:
        print(f"more: mcphost runs --cursor {page.next_cursor}", file=sys.stderr)
    return EXIT_OK


async def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as stores:
        run = await stores.runs.get(args.run_id)
        results = await stores.results.list(run.run_id, after=0, limit=10_000)
        events = await stores.events.for_run(run.run_id, limit=1000)
        transcript = await stores.transcript.for_run(run.run_id, limit=1000)
        audit = await stores.audit.list(run.run_id, after=0, limit=1000)
        grant = await stores.runs.grant(run.run_id)
    report: dict[str, Any] = {
        "run": run.model_dump(mode="json"),
        "grant": {"revoked": grant.revoked, **grant.grant.model_dump(mode="json", exclude={"token_hash"})},
        "results": [{"seq": r.seq, **r.payload} for r in results],
        "events": [e.model_dump(mode="json") for e in events],
        "transcript": [t.model_dump(mode="json") for t in transcript],
        "audit": [a.model_dump(mode="json") for a in audit],
    }
    if args.json:
        _dump(report)
        return EXIT_OK
    print(_run_line(run))
    print(f"  runner {run.runner_id}  grant {'revoked' if grant.revoked else 'ACTIVE'}")
    print(f"results ({len(results)}):")
    for r in results:
        print(f"  {r.seq:>5} {r.type}  {_short(r.payload.get('data'))}")
    print(f"events ({len(events)}):")
    for e in events:
        print(f"  {e.event_type:<24} {e.kind:<10} {_short(e.payload)}")
    print(f"transcript ({len(transcript)}):")
    for t in transcript:
        print(f"  {t.role:<9} {_short(t.content)}")
    print(f"audit ({len(audit)}):")
    for a in audit:
        print(f"  {a.tool:<20} {a.outcome:<8} {a.code or ''} {a.duration_ms:.1f} ms")
    return EXIT_OK


def _short(value: Any, width: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


async def cmd_runners(args: argparse.Namespace, settings: Settings) -> int:
    async with open_host(settings) as host:
        registry = host.registry
        accepted = [
            {"id": r.manifest.id, "name": r.manifest.name, "plugin": r.plugin.spec.name}
            for r in registry.runners()
        ]
        rejected = [{"id": r.runner_id, "plugin": r.plugin, "reason": r.reason} for r in registry.rejected()]
        plugins = [
            {
                "name": p.name,
                "command": list(p.command),
                "state": p.state,
                "pid": p.pid,
                "restarts": p.restarts,
                "last_error": p.last_error,
                "runners": list(p.runners),
            }
            for p in registry.plugins()
        ]
    if args.json:
        _dump({"runners": accepted, "rejected": rejected, "plugins": plugins})
        return EXIT_OK
    print("plugins:")
    for p in plugins:
        err = f"  last error: {p['last_error']}" if p["last_error"] else ""
        print(f"  {p['name']:<20} {p['state']:<10} pid={p['pid']} restarts={p['restarts']}{err}")
    print("runners:")
    for r in accepted:
        print(f"  {r['id']:<44} {r['name']}  (plugin {r['plugin']})")
    if rejected:
        print("rejected:")
        for r in rejected:
            print(f"  {r['id'] or '?':<44} plugin {r['plugin']}: {r['reason']}")
    return EXIT_OK


async def cmd_db_upgrade(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings):
        pass
    print(f"database at {_redact(settings.database_url)} is up to date", file=sys.stderr)
    return EXIT_OK


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in creds else url
    return url


def cmd_schema(args: argparse.Namespace) -> int:
    out_dir = Path(args.dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, schema in sorted(json_schemas().items()):
            (out_dir / f"{name}.schema.json").write_text(
                json.dumps(schema, indent=2) + "\n", encoding="utf-8"
            )
    except OSError as exc:
        return _fail(f"cannot write schemas to {str(out_dir)!r}: {exc.strerror or exc}")
    print(f"wrote {len(json_schemas())} JSON Schemas to {out_dir}", file=sys.stderr)
    return EXIT_OK


# -- serving and clients of a running server -------------------------------------------------------------


async def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    def ready(url: str) -> None:
        print(
            f"mcphost: serving on {url} (API at {url}/v1, per-run MCP at {url}/runs/<run_id>/mcp)",
            file=sys.stderr,
            flush=True,
        )

    limits = ApiLimits(max_upload_bytes=args.max_upload_bytes)
    await serve(settings, listen=args.listen, grace_s=args.grace, limits=limits, on_ready=ready)
    print("mcphost: stopped", file=sys.stderr)
    return EXIT_OK


def _server_url(args: argparse.Namespace, settings: Settings) -> str:
    return (args.url or os.environ.get("MCPHOST_URL") or advertised_url(settings)).rstrip("/")


def _api_error(response: httpx2.Response, body: bytes) -> str:
    try:
        error = json.loads(body)["error"]
        return f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}: {body[:200].decode(errors='replace')}"


class _ReplyPrinter:
    """Shows a result stream the way `mcphost run` does: deltas live, else the final message."""

    def __init__(self, *, as_json: bool) -> None:
        self.as_json = as_json
        self.streamed = False
        self.final_text: str | None = None
        self.last_seq = 0

    def result(self, item: dict[str, Any]) -> None:
        seq = item.get("seq")
        if not isinstance(seq, int) or seq <= self.last_seq:
            return  # a replayed stream repeats what was shown already
        self.last_seq = seq
        if self.as_json:
            print(json.dumps(item), flush=True)
            return
        data = item.get("data") or {}
        if item.get("type") == "message.delta":
            chunk = (data.get("chunk") or {}).get("content")
            if chunk:
                sys.stdout.write(chunk)
                sys.stdout.flush()
                self.streamed = True
        elif item.get("type") == "message.completed" or (
            item.get("type") == "run.completed" and data.get("message")
        ):
            self.final_text = (data.get("message") or {}).get("content")

    def finish(self) -> None:
        if self.as_json:
            return
        if not self.streamed and self.final_text:
            sys.stdout.write(self.final_text)
        if self.streamed or self.final_text:
            sys.stdout.write("\n")
        sys.stdout.flush()


SEND_RECONNECTS = 5


async def cmd_send(args: argparse.Namespace, settings: Settings) -> int:
    if not args.event_id:
        args.event_id = new_id("evt")  # makes a retried POST idempotent: it returns the same run
    event = _event_from_args(args)
    url = _server_url(args, settings)
    key = os.environ.get(args.api_key_env)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    printer = _ReplyPrinter(as_json=args.json)
    run_id: str | None = None
    end: dict[str, Any] | None = None
    async with httpx2.AsyncClient(
        base_url=url, headers=headers, timeout=httpx2.Timeout(30, read=None)
    ) as client:
        for attempt in range(SEND_RECONNECTS + 1):
            if run_id is None:
                request = client.stream(
                    "POST",
                    "/v1/events",
                    params={"stream": "true"},
                    content=event.model_dump_json(),
                    headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
                )
            else:
                request = client.stream(
                    "GET",
                    f"/v1/runs/{run_id}/results",
                    headers={"Accept": "text/event-stream", "Last-Event-ID": str(printer.last_seq)},
                )
            try:
                async with request as response:
                    if response.status_code >= 400:
                        return _fail(_api_error(response, await response.aread()))
                    async for sse in httpx2.EventSource(response):
                        payload = json.loads(sse.data) if sse.data else {}
                        if sse.event == "run":
                            run_id = payload["run_id"]
                        elif sse.event == "end":
                            end = payload
                        elif sse.event == "error":
                            return _fail(f"{payload['error']['code']}: {payload['error']['message']}")
                        else:
                            printer.result(payload)
                if end is not None:
                    break
            except httpx2.TransportError as exc:
                if attempt == SEND_RECONNECTS or (run_id is None and isinstance(exc, httpx2.ConnectError)):
                    return _fail(f"cannot reach mcphost at {url}: {exc}. Is `mcphost serve` running there?")
            await anyio.sleep(min(0.2 * 2**attempt, 3))
    printer.finish()
    if end is None or run_id is None:
        return _fail(
            f"the stream of run {run_id or '?'} ended without its result; see `mcphost show {run_id}`"
        )
    status = end.get("status")
    error = end.get("error") or {}
    line = f"{run_id}  {status}" + (f"  {error.get('code')}: {error.get('message')}" if error else "")
    if args.json:
        _dump({"run_id": run_id, "status": status, "error": error or None})
    else:
        print(line, file=sys.stderr)
    return EXIT_OK if status == RunStatus.COMPLETED.value else EXIT_FAILED


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


_TOKEN_REF = "@@MCPHOST_RUN_TOKEN@@"


def _double_quoted(text: str) -> str:
    """`text` inside double quotes for a POSIX shell, with the token placeholder left to expand."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`").replace("$", "\\$")
    return '"' + escaped.replace(_TOKEN_REF, f"${TOKEN_ENV}") + '"'


def _toml_str(text: str) -> str:
    return json.dumps(text)


def mcp_client_configs(url: str) -> dict[str, dict[str, Any]]:
    """Ready-to-paste MCP client configs for `url`, reading the token from $MCPHOST_RUN_TOKEN."""
    bridge_args = ["--url", url]
    env_ref = "${" + TOKEN_ENV + "}"
    claude_http = {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {env_ref}"}}
    claude_bridge = {
        "type": "stdio",
        "command": "mcphost-bridge",
        "args": bridge_args,
        "env": {TOKEN_ENV: env_ref},
    }
    shell_http = json.dumps({**claude_http, "headers": {"Authorization": f"Bearer {_TOKEN_REF}"}})
    vscode_input = [
        {"type": "promptString", "id": "mcphost-token", "description": "mcphost run token", "password": True}
    ]
    toml_args = "[" + ", ".join(_toml_str(a) for a in bridge_args) + "]"
    return {
        "claude_code": {
            "http": {
                "command": f"claude mcp add-json mcphost {_double_quoted(shell_http)}",
                "mcp_config": {"mcpServers": {"mcphost": claude_http}},
            },
            "bridge": {
                "command": "claude mcp add-json mcphost " + "'" + json.dumps(claude_bridge) + "'",
                "mcp_config": {"mcpServers": {"mcphost": claude_bridge}},
            },
        },
        "codex": {
            "http": {
                "overrides": [
                    f"mcp_servers.mcphost.url={_toml_str(url)}",
                    f'mcp_servers.mcphost.bearer_token_env_var="{TOKEN_ENV}"',
                ],
                "config_toml": f'[mcp_servers.mcphost]\nurl = {_toml_str(url)}\nbearer_token_env_var = "{TOKEN_ENV}"\n',
            },
            "bridge": {
                "overrides": [
                    'mcp_servers.mcphost.command="mcphost-bridge"',
                    f"mcp_servers.mcphost.args={toml_args}",
                    f'mcp_servers.mcphost.env_vars=["{TOKEN_ENV}"]',
                ],
                "config_toml": f'[mcp_servers.mcphost]\ncommand = "mcphost-bridge"\nargs = {toml_args}\nenv_vars = ["{TOKEN_ENV}"]\n',
            },
        },
        "vscode": {
            "http": {
                "servers": {
                    "mcphost": {
                        "type": "http",
                        "url": url,
                        "headers": {"Authorization": "Bearer ${input:mcphost-token}"},
                    }
                },
                "inputs": vscode_input,
            },
            "bridge": {
                "servers": {
                    "mcphost": {
                        "type": "stdio",
                        "command": "mcphost-bridge",
                        "args": bridge_args,
                        "env": {TOKEN_ENV: "${input:mcphost-token}"},
                    }
                },
                "inputs": vscode_input,
            },
        },
        "cursor": {
            "http": {
                "mcpServers": {
                    "mcphost": {"url": url, "headers": {"Authorization": "Bearer ${env:" + TOKEN_ENV + "}"}}
                }
            },
            "bridge": {
                "mcpServers": {
                    "mcphost": {
                        "command": "mcphost-bridge",
                        "args": bridge_args,
                        "env": {TOKEN_ENV: "${env:" + TOKEN_ENV + "}"},
                    }
                }
            },
        },
    }


def _print_grant_guide(
    run_id: str, url: str, token: str, configs: dict[str, dict[str, Any]], summary: str
) -> None:
    def block(obj: Any) -> str:
        return json.dumps(obj, indent=2)

    cc, codex, vscode, cursor = configs["claude_code"], configs["codex"], configs["vscode"], configs["cursor"]
    rule = "-" * 78
    print(f"{summary}\nMCP endpoint: {url}\n")
    print(
        f"{rule}\nSECRET - the run token, shown only this once. Anyone holding it can read what the grant allows."
    )
    print(f"export {TOKEN_ENV}='{token}'\n{rule}")
    print(
        f"The configs below read the token from ${TOKEN_ENV}: export it in the shell that starts the client.\n"
    )
    print("## Claude Code\n# direct HTTP:")
    print(cc["http"]["command"])
    print("# through the stdio bridge:")
    print(cc["bridge"]["command"])
    print("# or save as mcphost.json and start `claude --mcp-config mcphost.json` (direct HTTP):")
    print(block(cc["http"]["mcp_config"]))
    print("# (through the bridge):")
    print(block(cc["bridge"]["mcp_config"]))
    print("\n## Codex\n# direct HTTP:")
    print("codex " + " ".join(f"-c '{o}'" for o in codex["http"]["overrides"]))
    print("# through the stdio bridge:")
    print("codex " + " ".join(f"-c '{o}'" for o in codex["bridge"]["overrides"]))
    print("# or in ~/.codex/config.toml (direct HTTP):")
    print(codex["http"]["config_toml"], end="")
    print("# (through the bridge):")
    print(codex["bridge"]["config_toml"], end="")
    print("\n## VS Code (.vscode/mcp.json; it asks for the token) - direct HTTP:")
    print(block(vscode["http"]))
    print("# through the stdio bridge:")
    print(block(vscode["bridge"]))
    print("\n## Cursor (.cursor/mcp.json) - direct HTTP:")
    print(block(cursor["http"]))
    print("# through the stdio bridge:")
    print(block(cursor["bridge"]))
    print(f"\nEnd it early with: mcphost revoke {run_id}")


async def cmd_grant(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as stores:
        made = await create_inspection_grant(
            stores,
            conversation_id=args.conversation,
            thread_id=args.thread,
            ttl_s=args.ttl,
            tools=args.tools or (),
            write=args.write,
        )
    run_id = made.run.run_id
    url = mcp_url(advertised_url(settings), run_id)
    configs = mcp_client_configs(url)
    expires = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(made.grant.deadline_at))
    if args.json:
        _dump(
            {
                "run_id": run_id,
                "url": url,
                "token": made.token,
                "token_env": TOKEN_ENV,
                "expires_at": made.grant.deadline_at,
                "conversation_id": args.conversation,
                "thread_id": args.thread,
                "tools": sorted(made.grant.tools),
                "host_tool_globs": list(made.grant.host_tool_globs),
                "write": args.write,
                "configs": configs,
            }
        )
        return EXIT_OK
    access = "read and create artifacts" if args.write else "read-only"
    summary = (
        f"Inspection grant {run_id} on conversation {args.conversation!r}"
        + (f" thread {args.thread!r}" if args.thread else "")
        + f" ({access}; tools: {', '.join(sorted(made.grant.tools))}), valid until {expires}."
    )
    _print_grant_guide(run_id, url, made.token, configs, summary)
    return EXIT_OK


async def cmd_revoke(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as stores:
        run = await stores.runs.get(args.run_id)
        if run.status.is_terminal:
            print(
                f"{run.run_id} has already ended ({run.status}); its token no longer works", file=sys.stderr
            )
            return EXIT_OK
        if run.runner_id is None:
            run = await end_inspection_grant(stores, run.run_id, "revoked with mcphost revoke")
            print(
                f"{run.run_id} revoked: its token stops working within seconds on every host", file=sys.stderr
            )
        else:
            await stores.runs.request_cancel(run.run_id)
            print(
                f"{run.run_id} is a run of {run.runner_id}: cancel requested (its host ends it)",
                file=sys.stderr,
            )
    return EXIT_OK


# -- knowledge bases and tools -----------------------------------------------------------------------------


class _IngestBar:
    """Ingest progress on stderr: a bar redrawn in place on a terminal, one line per document otherwise."""

    WIDTH = 24

    def __init__(self, kb_id: str, out: TextIO | None = None) -> None:
        self._kb = kb_id
        self._out = out or sys.stderr
        self._tty = self._out.isatty()

    def __call__(self, p: IngestProgress) -> None:
        detail = f" ({p.detail})" if p.detail else ""
        if not self._tty:
            if p.outcome != "unchanged":
                print(f"{p.done}/{p.total} {p.outcome:<9} {p.path}{detail}", file=self._out, flush=True)
            return
        filled = self.WIDTH * p.done // max(p.total, 1)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        line = f"\r{self._kb} [{bar}] {p.done}/{p.total} {p.outcome:<9} {p.path}"[:160]
        self._out.write(line.ljust(160) + ("\n" if p.done == p.total else ""))
        self._out.flush()


def _kb_filters(args: argparse.Namespace) -> dict[str, Any]:
    filters: dict[str, Any] = {}
    if args.path:
        filters["path"] = args.path
    if args.prefix:
        filters["path_prefix"] = args.prefix
    meta: dict[str, Any] = {}
    for pair in args.meta or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--meta takes KEY=VALUE; got {pair!r}")
        meta[key] = value
    if meta:
        filters["metadata"] = meta
    return filters


async def cmd_kb(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as stores:
        kb = KnowledgeBases.from_settings(stores.db, settings)
        if args.kb_command == "list":
            bases = await kb.describe()
            if args.json:
                _dump({"knowledge_bases": [b.model_dump(mode="json") for b in bases]})
                return EXIT_OK
            if not bases:
                print(
                    f"no knowledge bases in {settings.source}; add a [knowledge.<kb_id>] table",
                    file=sys.stderr,
                )
            for b in bases:
                when = (
                    time.strftime("%Y-%m-%d %H:%M", time.localtime(b.last_ingested_at))
                    if b.last_ingested_at
                    else "never ingested"
                )
                print(f"{b.kb_id:<20} {b.documents:>6} docs {b.chunks:>7} chunks  {when}  {b.name}")
                print(f"{'':<20} paths: {', '.join(b.paths) or '-'}")
            return EXIT_OK
        if args.kb_command == "ingest":
            # PATHs on the command line are relative to the working folder (configured ones to the config).
            paths = [os.path.join(os.getcwd(), p) for p in args.paths]
            report = await kb.ingest(
                args.kb_id, paths or None, on_progress=None if args.json else _IngestBar(args.kb_id)
            )
            if args.json:
                _dump(report.model_dump(mode="json"))
                return EXIT_OK
            print(
                f"{args.kb_id}: {len(report.added)} added, {len(report.updated)} updated, "
                f"{len(report.unchanged)} unchanged, {len(report.deleted)} deleted, {len(report.skipped)} skipped; "
                f"{report.chunks} chunks written in {report.elapsed_s:.1f} s",
                file=sys.stderr,
            )
            for skipped in report.skipped:
                print(f"  skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
            return EXIT_OK
        chunks = await kb.retrieve(
            args.kb_id, args.query, top_k=args.top_k, filters=_kb_filters(args) or None
        )
    if args.json:
        _dump({"chunks": [c.model_dump(mode="json") for c in chunks]})
        return EXIT_OK
    if not chunks:
        print("no matching chunks", file=sys.stderr)
    for rank, chunk in enumerate(chunks, 1):
        meta = chunk.metadata
        lines = f"lines {meta.get('start_line')}-{meta.get('end_line')}" if "start_line" in meta else ""
        print(f"{rank}. {chunk.document}  {meta.get('heading', '')}  {lines}  (score {chunk.score:.4g})")
        print("   " + _short(" ".join(chunk.text.split()), 300))
    return EXIT_OK


async def cmd_tools(args: argparse.Namespace, settings: Settings) -> int:
    if not settings.tools:
        print(f"no tool servers in {settings.source}; add a [tools.<server>] table", file=sys.stderr)
        if args.json:
            _dump({"servers": []})
        return EXIT_OK
    gateway = Gateway.from_settings(settings)
    async with gateway.running():
        servers = await gateway.catalog(timeout=args.timeout)
    if args.json:
        _dump({"servers": [s.model_dump(mode="json") for s in servers]})
    else:
        for s in servers:
            state = s.state.value if s.state is UpstreamState.READY else f"{s.state.value}: {s.last_error}"
            print(f"{s.server:<16} {s.transport:<5} {_short(s.target, 50):<50} {state}")
            for tool in s.tools:
                print(f"  {tool.name:<36} {_short(tool.description or '', 80)}")
    return EXIT_OK if all(s.state is UpstreamState.READY for s in servers) else EXIT_FAILED


# -- parser ----------------------------------------------------------------------------------------------


def _add_common(parser: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="mcphost.toml to use (default: $MCPHOST_CONFIG, ./mcphost.toml, else the embedded default)",
    )
    if json_flag:
        parser.add_argument("--json", action="store_true", help="machine-readable JSON output")


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
    p.add_argument("--status", choices=[s.value for s in RunStatus], help="only runs in this status")
    p.add_argument("--limit", type=_limit, default=20, metavar="N", help="how many (1-100, default 20)")
    p.add_argument("--cursor", metavar="C", help="continue from a previous listing")
    _add_common(p)

    p = sub.add_parser(
        "show",
        help="show a run: results, event log, transcript rows and audit",
        description="Show one run with its results, event log entries, transcript rows and audit.",
    )
    p.add_argument("run_id", metavar="RUN_ID")
    _add_common(p)

    p = sub.add_parser(
        "runners",
        help="list registered runners and rejected manifests",
        description="Start the configured plugins and list the runners they registered, and any rejected manifests with the reason.",
    )
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
    p.add_argument(
        "--timeout",
        type=float,
        default=15.0,
        metavar="S",
        help="how long to wait for each server (default 15)",
    )
    _add_common(p)

    p = sub.add_parser(
        "schema",
        help="write the protocol's JSON Schemas to DIR",
        description="Write every Protocol v1 model as JSON Schema into DIR, for runners in other languages.",
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
    p.add_argument(
        "--api-key-env",
        default="MCPHOST_API_KEY",
        metavar="NAME",
        help="environment variable holding the API key (default: MCPHOST_API_KEY)",
    )
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
        help="only facts tools matching these globs; globs naming <server>__<tool> grant host tools",
    )
    p.add_argument("--write", action="store_true", help="also allow creating artifacts in the conversation")
    _add_common(p)

    p = sub.add_parser(
        "revoke",
        help="revoke an inspection grant (or request a run's cancel)",
        description="End an inspection grant now: its token stops working. For a run with a runner, request its cancel.",
    )
    p.add_argument("run_id", metavar="RUN_ID")
    _add_common(p, json_flag=False)

    p = sub.add_parser("db", help="database maintenance", description="Database maintenance.")
    db_sub = p.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    u = db_sub.add_parser(
        "upgrade",
        help="apply pending migrations",
        description="Apply pending schema migrations (the host also does this at start).",
    )
    _add_common(u, json_flag=False)
    return parser


def _limit(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 100, got {value!r}") from None
    if not 1 <= n <= 100:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 100, got {n}")
    return n


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


_ASYNC_COMMANDS: dict[str, Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]] = {
    "run": cmd_run,
    "runs": cmd_runs,
    "show": cmd_show,
    "runners": cmd_runners,
    "kb": cmd_kb,
    "tools": cmd_tools,
    "serve": cmd_serve,
    "send": cmd_send,
    "grant": cmd_grant,
    "revoke": cmd_revoke,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level, json_logs=args.log_json)
    if args.command == "schema":
        return cmd_schema(args)
    try:
        settings = load_settings(getattr(args, "config", None))
        if args.command == "db":
            return anyio.run(cmd_db_upgrade, args, settings)
        return anyio.run(_ASYNC_COMMANDS[args.command], args, settings)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except Exception as exc:
        # Errors raised inside task groups arrive wrapped in exception groups.
        error = _host_error(exc)
        if error is None:
            raise
        return _fail(error.message, EXIT_USAGE if isinstance(error, ConfigError) else EXIT_FAILED)


def _host_error(exc: BaseException) -> HostError | None:
    if isinstance(exc, HostError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:  # pyright: ignore[reportUnknownVariableType]
            found = _host_error(inner)  # pyright: ignore[reportUnknownArgumentType]
            if found is not None:
                return found
    return None


if __name__ == "__main__":
    sys.exit(main())
