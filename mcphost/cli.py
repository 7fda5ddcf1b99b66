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
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TextIO

import anyio

from mcphost import __version__
from mcphost.app import open_database, open_host
from mcphost.config import Settings, load_settings
from mcphost.errors import ConfigError, HostError
from mcphost.models import AgentEventEnvelope, Run, RunStatus
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
    async with open_host(settings) as host:
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
        "schema",
        help="write the protocol's JSON Schemas to DIR",
        description="Write every Protocol v1 model as JSON Schema into DIR, for runners in other languages.",
    )
    p.add_argument("dir", metavar="DIR")

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
