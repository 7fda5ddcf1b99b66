"""`mcphost usage`: host model calls totalled from the database, as a table or (`--json`) the document
`GET /v1/usage` answers. Does not own the totals (`stores.usage`)."""

from __future__ import annotations

import argparse

from mcphost.app import open_database
from mcphost.cli._common import EXIT_OK, dump
from mcphost.config import Settings


async def cmd_usage(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as stores:
        totals = await stores.usage.totals(args.by)
    if args.json:
        dump({"group_by": args.by, "totals": [t.model_dump(mode="json") for t in totals]})
        return EXIT_OK
    print(f"{args.by:<24} {'calls':>7} {'failed':>7} {'input':>10} {'output':>10} {'cached':>10} {'usd':>12}")
    for t in totals:
        key = "-" if t.key is None else t.key[:24]
        print(
            f"{key:<24} {t.calls:>7} {t.failed:>7} {t.input_tokens:>10} {t.output_tokens:>10} "
            f"{t.cached_tokens:>10} {t.cost_usd:>12.6f}"
        )
    return EXIT_OK
