"""`mcphost schedules`: every schedule (the config file's and those created through the API) with its
next and newest fire times, straight from the database (no server needed).

Owns how the timetable is shown: one line per schedule, or with `--json` one JSON document per line
(`schedules.ScheduleStatus`). Does not own firing (`schedules.py`) or the schedules themselves.
"""

from __future__ import annotations

import argparse
import datetime
import time

from mcphost.app import open_database
from mcphost.cli._common import EXIT_OK, dump
from mcphost.config import Settings
from mcphost.schedules import ScheduleStatus, timetable


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
        stored = await stores.schedules.list()
        last = await stores.schedules.last_fires()
    for status in timetable(settings.schedules, stored, last, now=time.time()):
        if args.json:
            dump(status.model_dump(mode="json"))
        else:
            print(schedule_line(status))
    return EXIT_OK
