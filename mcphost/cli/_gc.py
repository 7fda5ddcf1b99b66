"""`mcphost gc [--dry-run] [--json]`: delete what is older than `[retention]` allows, straight on the
database and the harness folders (no server needed).

Owns showing what went. Does not own the collection (`mcphost/retention.py`), which takes the same
lease as the serving hosts' periodic job, so it never runs beside one, and never touches what a held run
references.
"""

from __future__ import annotations

import argparse
import os
import socket

from mcphost.app import open_database
from mcphost.cli._common import EXIT_OK, dump, fail
from mcphost.config import Settings
from mcphost.retention import LEASE, Collector


async def cmd_gc(args: argparse.Namespace, settings: Settings) -> int:
    if not settings.retention.enabled:
        if not args.json:
            print("nothing to collect: no [retention] *_days key is set (everything is kept)")
        return EXIT_OK
    async with open_database(settings) as stores:
        collector = Collector(stores, settings.retention, holder=f"gc:{socket.gethostname()}:{os.getpid()}")
        done = await collector.dry_run() if args.dry_run else await collector.tick()
    if done is None:
        return fail(f"another host is collecting right now (it holds the {LEASE!r} lease); try again later")
    verb = "would delete" if args.dry_run else "deleted"
    for item in done:
        if args.json:
            dump({**item.model_dump(mode="json"), "dry_run": args.dry_run})
        else:
            unit = {"run_folders": "folders", "harness_homes": "files"}.get(item.kind, "rows")
            print(f"{item.kind}: {verb} {item.rows} {unit}, {item.bytes} bytes")
    return EXIT_OK
