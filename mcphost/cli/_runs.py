"""Commands that work in this process: `run`, `runs`, `show`, `schema` and `db upgrade`.

Owns running one event end to end in-process (`run`), listing and showing stored runs, writing the
protocol's and the config file's JSON Schemas and upgrading the database. Does not own the runner listing (`_runners`) nor talking to a running server (`_server`) inspection grants (`_grants`).

Invariants: `run` streams the reply to stdout and the run's summary line to stderr, and exits 0 only
for a completed run; database URLs are shown with their password masked.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mcphost.app import open_database, open_host, preload_for
from mcphost.cli._common import EXIT_FAILED, EXIT_OK, dump, event_from_args, fail, run_line, runs_page, short
from mcphost.common import gcstart
from mcphost.config import Settings
from mcphost.models import RunStatus
from mcphost.protocol import JSONObject, json_schemas
from mcphost.serving import serve_locally
from mcphost.stores.runtime_audit import RuntimeAudit


async def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    event = event_from_args(args)
    # The run's MCP endpoint is served on an ephemeral loopback port for the command's duration.
    async with open_host(settings) as host, serve_locally(host):
        gcstart.resume()  # the host is up: its start-up's objects are frozen out of the collector's way
        admission = await host.orchestrator.submit(event, via="cli")
        run_id = admission.run.run_id
        await preload_for(host, admission.run)
        streamed = False
        final_text: str | None = None
        async for item in host.orchestrator.results(run_id):
            if args.json:
                dump({"seq": item.seq, **item.payload})
                continue
            data: JSONObject = item.payload.get("data", {})
            if item.type == "message.delta":
                delta: JSONObject = data.get("chunk", {})
                chunk = delta.get("content")
                if chunk:
                    sys.stdout.write(chunk)
                    sys.stdout.flush()
                    streamed = True
            elif item.type == "message.completed" or (item.type == "run.completed" and data.get("message")):
                message: JSONObject = data.get("message") or {}
                final_text = message.get("content")
        run = await host.orchestrator.wait(run_id)
    if args.json:
        dump({"run": run.model_dump(mode="json")})
    else:
        if not streamed and final_text:
            sys.stdout.write(final_text)
        if streamed or final_text:
            sys.stdout.write("\n")
        sys.stdout.flush()
        print(run_line(run), file=sys.stderr)
    return EXIT_OK if run.status is RunStatus.COMPLETED else EXIT_FAILED


async def cmd_runs(args: argparse.Namespace, settings: Settings) -> int:
    if args.watch:
        from mcphost.cli._watch import watch_runs

        return await watch_runs(args, settings)
    status = RunStatus(args.status) if args.status else None
    async with open_database(settings) as stores:
        page = await stores.runs.list(
            conversation_id=args.conversation, status=status, limit=args.limit, cursor=args.cursor
        )
    if args.json:
        dump(runs_page(page))
        return EXIT_OK
    if not page.items:
        print("no runs", file=sys.stderr)
    for run in page.items:
        print(run_line(run))
    if page.has_more and page.next_cursor:
        print(f"more: mcphost runs --cursor {page.next_cursor}", file=sys.stderr)
    return EXIT_OK


async def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    if args.follow:
        from mcphost.cli._watch import follow_run

        return await follow_run(args, settings)
    async with open_database(settings) as stores:
        run = await stores.runs.get(args.run_id)
        results = await stores.results.list(run.run_id, after=0, limit=10_000)
        events = await stores.events.for_run(run.run_id, limit=1000)
        transcript = await stores.transcript.for_run(run.run_id, limit=1000)
        audit = await stores.audit.list(run.run_id, after=0, limit=1000)
        grant = await stores.runs.grant(run.run_id)
        attempts = await stores.runs.attempts(run.event_id)
        placement = await stores.dispatch.audit(run.run_id)
    report: dict[str, Any] = {
        "run": run.model_dump(mode="json"),
        "attempts": [
            {"run_id": a.run_id, "attempt": a.attempt, "status": a.status, "error": a.error and a.error.code}
            for a in attempts
        ],
        "grant": {"revoked": grant.revoked, **grant.grant.model_dump(mode="json", exclude={"token_hash"})},
        "results": [{"seq": r.seq, **r.payload} for r in results],
        "events": [e.model_dump(mode="json") for e in events],
        "transcript": [t.model_dump(mode="json") for t in transcript],
        "audit": [a.model_dump(mode="json") for a in audit],
        "runtime": placement.model_dump(mode="json") if placement is not None else None,
    }
    if args.json:
        dump(report)
        return EXIT_OK
    print(run_line(run))
    print(f"  runner {run.runner_id}  grant {'revoked' if grant.revoked else 'ACTIVE'}")
    print_placement(placement)
    if len(attempts) > 1:
        print(f"attempts of event {run.event_id} ({len(attempts)}):")
        for a in attempts:
            mark = "  <- this run" if a.run_id == run.run_id else ""
            print(f"  {a.attempt:>3} {a.run_id} {a.status}{f' ({a.error.code})' if a.error else ''}{mark}")
    print(f"results ({len(results)}):")
    for r in results:
        print(f"  {r.seq:>5} {r.type}  {short(r.payload.get('data'))}")
    print(f"events ({len(events)}):")
    for e in events:
        print(f"  {e.event_type:<24} {e.kind:<10} {short(e.payload)}")
    print(f"transcript ({len(transcript)}):")
    for t in transcript:
        print(f"  {t.role:<9} {short(t.content)}")
    print(f"audit ({len(audit)}):")
    for a in audit:
        print(f"  {a.tool:<20} {a.outcome:<8} {a.code or ''} {a.duration_ms:.1f} ms")
    return EXIT_OK


def print_placement(placement: RuntimeAudit | None) -> None:
    """Where a run ran: the host itself, or the runtime of its latest claim and every claim's events."""
    if placement is None:
        print("  ran on this host (local)")
        return
    where = (
        f"runtime {placement.runtime_name} ({placement.runtime_id})"
        if placement.runtime_id is not None or placement.runtime_name is not None
        else "no runtime yet (queued)"
    )
    print(f"  ran on {where}  attempt {placement.attempts}  fence {placement.fence}  [{placement.state}]")
    timings = [f"renewals {placement.renewals}"]
    if placement.claimed_at is not None:
        timings.insert(0, f"claimed {placement.claimed_at - placement.queued_at:.3f} s after queued")
        if placement.first_result_at is not None:
            timings.insert(1, f"first result +{placement.first_result_at - placement.claimed_at:.3f} s")
    if placement.output_artifact_id is not None:
        timings.append(f"output {placement.output_artifact_id}")
    print("  " + "  ".join(timings))
    for event in placement.events:
        rest = {k: v for k, v in event.items() if k not in ("event", "at") and v is not None}
        print(f"    {event.get('event', '?'):<9} {short(rest)}")


async def cmd_db_upgrade(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings):
        pass
    print(f"database at {redact(settings.database_url)} is up to date", file=sys.stderr)
    return EXIT_OK


def redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in creds else url
    return url


CONFIG_SCHEMA_NAME = "mcphost_toml"
"""`mcphost schema` writes the config file's schema as `<DIR>/mcphost_toml.schema.json`."""


def config_schema() -> JSONObject:
    """The JSON Schema of `mcphost.toml` (the `Settings` model), for editors that check TOML against one
    (taplo / Even Better TOML: `#:schema ./mcphost_toml.schema.json` on the file's first line)."""
    schema = Settings.model_json_schema()
    schema["properties"].pop("source")  # set by the loader (the file's path), not a key of the file
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "title": "mcphost.toml"}


OPENAPI_FILE = "openapi.json"


def cmd_schema(args: argparse.Namespace) -> int:
    from mcphost.api._routes import openapi

    out_dir = Path(args.dir)
    schemas = {**json_schemas(), CONFIG_SCHEMA_NAME: config_schema()}
    files = {f"{name}.schema.json": schema for name, schema in sorted(schemas.items())}
    files[OPENAPI_FILE] = openapi()  # the HTTP API's document, as /openapi.json serves it
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for file_name, document in files.items():
            (out_dir / file_name).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        return fail(f"cannot write schemas to {str(out_dir)!r}: {exc.strerror or exc}")
    print(f"wrote {len(schemas)} JSON Schemas and {OPENAPI_FILE} to {out_dir}", file=sys.stderr)
    return EXIT_OK
