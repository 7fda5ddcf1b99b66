"""`mcphost schedules`: every schedule (the config file's and those created through the API) with its
next and newest fire times, straight from the database (no server needed).

Owns how the timetable is shown, a page at a time as `mcphost runs` shows runs (`--limit`, default 20;
`--cursor` continues, and the next command is printed to stderr): one line per schedule, or with
`--json` one document `{"schedules": [ScheduleStatus…], "next_cursor"}`. Does not own firing (`schedules.py`) or the schedules themselves.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time

from mcphost.app import open_database
from mcphost.cli._common import EXIT_OK, dump
from mcphost.config import Settings
from mcphost.schedules import ScheduleStatus, schedule_page


def _when(at: int | None) -> str:
    if at is None:
        return "-"
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def schedule_line(status: ScheduleStatus) -> str:
    spec = status.spec
    when = f"cron {spec.cron!r} {spec.timezone}" if spec.cron is not None else f"every {spec.period_s}s"
    state = "paused" if status.paused else "active"
    return (
        f"{status.id}  {status.origin}  {state}  next {_when(status.next_fire_at)}  "
        f"last {_when(status.last_fire_at)}  {when}  -> {spec.event_type}"
    )


async def cmd_schedules(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as stores:
        page = await schedule_page(
            stores, settings.schedules, limit=args.limit, cursor=args.cursor, now=time.time()
        )
    if args.json:
        dump({"schedules": [s.model_dump(mode="json") for s in page.items], "next_cursor": page.next_cursor})
        return EXIT_OK
    for status in page.items:
        print(schedule_line(status))
    if page.has_more and page.next_cursor:
        print(f"more: mcphost schedules --cursor {page.next_cursor}", file=sys.stderr)
    return EXIT_OK
