"""`mcphost deliveries [--status S]` and `mcphost deliveries redeliver ID`: the outbound webhook
outbox, straight on the database (no server needed; a running host's sender picks a redelivery up).
"""

from __future__ import annotations

import argparse
import sys

from mcphost.app import open_database
from mcphost.cli._common import EXIT_OK, dump, fail
from mcphost.config import Settings
from mcphost.delivery import redelivery_age
from mcphost.stores import DeliveryRecord


def delivery_line(d: DeliveryRecord) -> str:
    err = f"  {d.last_error}" if d.last_error else ""
    return f"{d.delivery_id}  {d.status:<9}  {d.type:<17}  attempts={d.attempts}  run={d.run_id or '-'}  {d.url}{err}"


async def cmd_deliveries(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as stores:
        if args.action == "redeliver":
            if not args.delivery_id:
                return fail(
                    "mcphost deliveries redeliver needs a DELIVERY_ID (see `mcphost deliveries --status dead`)."
                )
            current = await stores.deliveries.get(args.delivery_id)
            max_age_s = redelivery_age(settings.webhooks, current.url)
            delivery = await stores.deliveries.redeliver(args.delivery_id, max_age_s=max_age_s)
            if args.json:
                dump(delivery.model_dump(mode="json"))
            else:
                print(f"{delivery.delivery_id} is pending again; a running host sends it next")
            return EXIT_OK
        page = await stores.deliveries.list(status=args.status, limit=args.limit, cursor=args.cursor)
    if args.json:
        dump({"deliveries": [d.model_dump(mode="json") for d in page.items], "next_cursor": page.next_cursor})
        return EXIT_OK
    if not page.items:
        print("no deliveries", file=sys.stderr)
    for item in page.items:
        print(delivery_line(item))
    if page.has_more and page.next_cursor:
        print(f"more: mcphost deliveries --cursor {page.next_cursor}", file=sys.stderr)
    return EXIT_OK
