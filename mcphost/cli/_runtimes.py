"""`mcphost runtimes [add|drain|disable|enable|remove NAME]` (the registry, straight on the database) and
`mcphost runtime --host URL --token TOKEN` (the worker daemon, which speaks HTTP only).

A runtime's token is printed once, by `add`, and stored hashed; the daemon reads it from `--token` or
`MCPHOST_RUNTIME_TOKEN` (an environment variable keeps it out of the process list).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from mcphost.app import open_database, plugin_specs
from mcphost.cli._common import EXIT_OK, EXIT_USAGE, dump, fail
from mcphost.config import Settings
from mcphost.models import check_labels
from mcphost.stores import RuntimeRecord

TOKEN_ENV = "MCPHOST_RUNTIME_TOKEN"


def parse_labels(value: str | None) -> dict[str, str]:
    """`k=v,k2=v2` as a map, or ValueError naming the part that is not a label."""
    labels: dict[str, str] = {}
    for part in (value or "").split(","):
        if not part.strip():
            continue
        key, sep, label = part.strip().partition("=")
        if not sep:
            raise ValueError(f"label {part.strip()[:70]!r} is not key=value")
        labels[key.strip()] = label.strip()
    return check_labels(labels)


def runtime_line(r: RuntimeRecord, lease_s: float, now: float) -> str:
    seen = "never" if r.last_heartbeat_at is None else f"{now - r.last_heartbeat_at:.0f}s ago"
    alive = "alive" if r.alive(lease_s, now) else "gone"
    labels = ",".join(f"{k}={v}" for k, v in sorted(r.effective_labels.items())) or "-"
    return (
        f"{r.name}  {r.state:<8}  {alive:<5}  slots={r.running}/{r.slots}  heartbeat={seen}  labels={labels}"
    )


async def cmd_runtimes(args: argparse.Namespace, settings: Settings) -> int:
    action: str = args.action
    if action != "list" and not args.name:
        return fail(f"mcphost runtimes {action} needs a NAME (see `mcphost runtimes`).", EXIT_USAGE)
    try:
        labels = parse_labels(args.labels)
    except ValueError as exc:
        return fail(f"--labels: {exc}", EXIT_USAGE)
    lease_s = settings.host.runtime_lease_s
    async with open_database(settings) as stores:
        if action == "add":
            record, token = await stores.runtimes.add(args.name, labels)
            if args.json:
                dump({"runtime": record.model_dump(mode="json"), "token": token})
            else:
                print(token)
                print(
                    f"runtime {record.name} ({record.runtime_id}) added; the token above is shown once. Start it "
                    f"with: {TOKEN_ENV}=<token> mcphost runtime --host <the host's URL>",
                    file=sys.stderr,
                )
            return EXIT_OK
        if action == "remove":
            record = await stores.runtimes.remove(args.name)
            print(f"runtime {record.name} removed; its token is refused from now on", file=sys.stderr)
            return EXIT_OK
        if action in ("drain", "disable", "enable"):
            state = {"drain": "draining", "disable": "disabled", "enable": "online"}[action]
            record = await stores.runtimes.set_state(args.name, state)  # type: ignore[arg-type]
            records = [record]
        else:
            records = await stores.runtimes.list()
    now = time.time()
    if args.json:
        for r in records:
            dump({**r.model_dump(mode="json"), "alive": r.alive(lease_s, now), "labels": r.effective_labels})
        return EXIT_OK
    if not records:
        print("no runtimes; add one with `mcphost runtimes add NAME`", file=sys.stderr)
    for r in records:
        print(runtime_line(r, lease_s, now))
    return EXIT_OK


async def cmd_runtime(args: argparse.Namespace, settings: Settings) -> int:
    from mcphost.runtimes.daemon import RuntimeDaemon, run_daemon

    token = args.token or os.environ.get(TOKEN_ENV, "")
    if not token:
        return fail(
            f"mcphost runtime needs --token TOKEN or {TOKEN_ENV} (printed by `mcphost runtimes add`).",
            EXIT_USAGE,
        )
    try:
        labels = parse_labels(args.labels)
    except ValueError as exc:
        return fail(f"--labels: {exc}", EXIT_USAGE)
    daemon = RuntimeDaemon(
        host=args.host,
        token=token,
        specs=plugin_specs(settings),
        slots=args.slots,
        labels=labels,
        workdir=args.workdir,
    )
    await run_daemon(daemon)
    return EXIT_OK
