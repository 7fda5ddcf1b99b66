"""Following the database: `mcphost show RUN --follow` and `mcphost runs --watch`.

Owns polling the stores every `--interval` seconds: `--follow` prints a run's results as they are stored
(from the first, so a late start misses nothing) until the run ends; `--watch` reprints the runs listing.
Does not own the listing's format (`_common.run_line`) nor anything a server would push: it reads the
database, so it works against any host writing there (another process, another machine on PostgreSQL).

Invariants: `--follow` prints each result once, in sequence order, and exits 0 when the run completed,
1 when it ended otherwise; `--watch` runs until interrupted (Ctrl-C, exit 130). Each `--json` document
is one line.
"""

from __future__ import annotations

import argparse
import sys

import anyio

from mcphost.app import open_database
from mcphost.cli._common import EXIT_FAILED, EXIT_OK, dump, run_line, runs_page, short
from mcphost.config import Settings
from mcphost.models import RunStatus

PAGE = 500


async def follow_run(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as stores:
        run = await stores.runs.get(args.run_id)
        if not args.json:
            print(run_line(run), file=sys.stderr, flush=True)
        after = 0
        while True:
            # Read the status before the results: a run seen ended has all its results stored.
            run = await stores.runs.get(run.run_id)
            while True:
                results = await stores.results.list(run.run_id, after=after, limit=PAGE)
                for r in results:
                    if args.json:
                        dump({"seq": r.seq, **r.payload})
                    else:
                        print(f"{r.seq:>5} {r.type}  {short(r.payload.get('data'))}", flush=True)
                    after = r.seq
                if len(results) < PAGE:
                    break
            if run.status.is_terminal:
                break
            await anyio.sleep(args.interval)
    if args.json:
        dump({"run": run.model_dump(mode="json")})
    else:
        print(run_line(run), file=sys.stderr)
    return EXIT_OK if run.status is RunStatus.COMPLETED else EXIT_FAILED


async def watch_runs(args: argparse.Namespace, settings: Settings) -> int:
    status = RunStatus(args.status) if args.status else None
    clear = sys.stdout.isatty() and not args.json
    async with open_database(settings) as stores:
        while True:
            page = await stores.runs.list(conversation_id=args.conversation, status=status, limit=args.limit)
            if args.json:
                dump(runs_page(page))
            else:
                if clear:
                    sys.stdout.write("\x1b[H\x1b[2J")
                print(f"-- {len(page.items)} runs, newest first (every {args.interval:g} s; Ctrl-C stops)")
                for run in page.items:
                    print(run_line(run))
                sys.stdout.flush()
            await anyio.sleep(args.interval)
