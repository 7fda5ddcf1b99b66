"""What every `mcphost` command shares: exit codes, logging set-up and how output is written.

Owns the exit codes, the logging configuration (the only place in mcphost that configures logging),
the one-line error report on stderr, JSON output, the one-line summary of a run, and turning command
line flags into the event that `run` and `send` submit. Does not own argument parsing (`mcphost.cli`)
nor any command.

Invariants: stdout carries only what a command was asked for (replies, listings, `--json` documents);
diagnostics, progress and logs go to stderr. An error is reported as one line,
`mcphost: error: <reason>`, and turns into the exit code the caller returns.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from mcphost.models import AgentEventEnvelope, Run
    from mcphost.stores import Page

EXIT_OK = 0
EXIT_FAILED = 1
"""A run that did not complete, or an operational error (not found, conflict, a server unreachable)."""
EXIT_USAGE = 2
"""Bad usage or bad config, including a database that cannot be reached or opened as configured."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT), as a shell reports a process it interrupted (128 + 2)."""
EXIT_PIPE = 141
"""The reader of stdout went away (`mcphost runs | head -1`): as a shell reports SIGPIPE (128 + 13)."""


ACCESS_LOGGER = "uvicorn.access"
"""uvicorn's access log: one INFO record per request, args (client, method, path, HTTP version, status)."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record: `timestamp` (ISO 8601, UTC, milliseconds), `ts` (epoch seconds), `level`,
    `logger`, `msg`; `plugin` and `run_id` when the record has them; `trace_id` and `span_id` when tracing is
    on and the record was logged inside a span; the request's `client`, `method`, `path`, `http_version` and
    `status` on access lines; `exc` with the traceback of a record that has one."""

    def format(self, record: logging.LogRecord) -> str:
        from mcphost import tracing  # imported on the first record: `mcphost --help` logs none

        out: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in ("plugin", "run_id"):
            if hasattr(record, key):
                out[key] = getattr(record, key)
        ids = tracing.current_ids()
        if ids is not None:
            out["trace_id"], out["span_id"] = ids
        if record.name == ACCESS_LOGGER and isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, version, status = record.args
            out.update(client=client, method=method, path=path, http_version=version, status=status)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(level: str, *, json_logs: bool) -> None:
    """Log records at `level` and above to stderr, as text or JSON lines; access lines at `warning` too.

    `mcphost serve` writes one access line per request unless the level is `error`: uvicorn logs them at
    INFO, so the access logger is set to INFO whenever the level is `warning` or lower.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if json_logs else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("sqlalchemy", "alembic", "httpx", "httpx2", "httpcore", "aiosqlite", "asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.INFO if root.level <= logging.WARNING else root.level)


def fail(message: str, code: int = EXIT_FAILED) -> int:
    print(f"mcphost: error: {message}", file=sys.stderr)
    return code


def dump(obj: Any, out: TextIO | None = None) -> None:
    """`obj` as one compact JSON line (JSON Lines): every `--json` document can be read line by line."""
    # sys.stdout is looked up per call, not bound at import, so a redirected stdout is honoured.
    (out or sys.stdout).write(json.dumps(obj, separators=(",", ":"), default=str) + "\n")
    (out or sys.stdout).flush()


def runs_page(page: Page[Run]) -> dict[str, Any]:
    """A page of runs as `GET /v1/runs` answers it (`RunsPage`, ISO 8601 twins included): the envelope of
    `mcphost runs --json`."""
    from mcphost.api import RunsPage  # the API's models, only when a listing is printed
    from mcphost.common.timestamps import json_with_iso

    answer = RunsPage(items=page.items, next_cursor=page.next_cursor, has_more=page.has_more)
    return json_with_iso(answer)


def run_line(run: Run) -> str:
    err = f"  {run.error.code}: {run.error.message}" if run.error else ""
    return f"{run.run_id}  {run.status.value:<9}  agent={run.agent_id}  conversation={run.conversation_id or '-'}{err}"


def short(value: Any, width: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def event_payload(args: argparse.Namespace) -> dict[str, Any]:
    """The event `run` and `send` build from their arguments, as JSON, before any validation but its own:
    `--event-id`'s form and `--data`'s JSON (what the server cannot tell apart from the rest)."""
    payload: dict[str, Any] = {
        "event_type": args.event_type,
        "source": "cli",
        "conversation": {"conversation_id": args.conversation},
        "actor": {"actor_id": args.actor, "actor_type": "user"},
        "input": {"text": args.text},
    }
    if args.event_id:
        from mcphost.ingress import check_client_event_id

        check_client_event_id(args.event_id)  # hooks, schedules and continuations have their own ids
        payload["event_id"] = args.event_id
    if args.agent:
        payload["agent_id"] = args.agent
    if args.data:
        from mcphost.errors import ConfigError

        try:
            payload["data"] = json.loads(args.data)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--data is not valid JSON: {exc}") from None
    return payload


def event_from_args(args: argparse.Namespace) -> AgentEventEnvelope:
    payload = event_payload(args)
    from pydantic import ValidationError

    from mcphost.common.validation import describe
    from mcphost.errors import ConfigError
    from mcphost.models import AgentEventEnvelope

    try:
        return AgentEventEnvelope.model_validate(payload)
    except ValidationError as exc:
        raise ConfigError(f"the event is not valid: {describe(exc, root='(event)')}") from None
