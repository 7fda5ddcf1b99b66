"""`mcphost gc [--dry-run] [--json]`: delete the records older than `[retention]` allows, straight on the
database (no server needed).

Owns turning `[retention]` into cutoffs and showing what went. Does not own the deletes
(`stores/retention.py`), which never touch what an active run references.
"""

from __future__ import annotations

import argparse
import time

from mcphost.app import open_database
from mcphost.cli._common import EXIT_OK, dump
from mcphost.config import Settings
from mcphost.stores.retention import KINDS, Collected, RetentionStore

DAY_S = 86400.0


async def cmd_gc(args: argparse.Namespace, settings: Settings) -> int:
    now = time.time()
    done: list[Collected] = []
    async with open_database(settings) as stores:
        retention = RetentionStore(stores.db)
        for kind in KINDS:
            days = settings.retention.days(kind)
            if days is not None:
                done.append(await retention.collect(kind, now - days * DAY_S, dry_run=args.dry_run))
    verb = "would delete" if args.dry_run else "deleted"
    for item in done:
        if args.json:
            dump({**item.model_dump(mode="json"), "dry_run": args.dry_run})
        else:
            print(f"{item.kind}: {verb} {item.rows} rows")
    if not done and not args.json:
        print("nothing to collect: no [retention] *_days key is set (everything is kept)")
    return EXIT_OK
