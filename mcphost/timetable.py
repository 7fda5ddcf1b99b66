"""Schedules as data: `ScheduleSpec` (one `[[schedules]]` entry or one `POST /v1/schedules` body), its fire
times, and the event a fire emits.

Owns what a schedule may say and when it fires. Does not own storage (`stores/schedules.py`), claiming a
fire or the loop that emits events (`schedules.py`).

Invariants:
- Fire times are whole epoch seconds, the same on every replica: `every` fires at the multiples of its
  period since the epoch (`every = "10s"` at :00, :10, …); `cron` fires where croniter says, read in the
  schedule's `timezone` (default UTC), so daylight-saving changes follow the zone.
- A spec that validates can always compute its next fire: an expression that never matches (`0 0 30 2 *`),
  a step past its field's range (`*/99 * * * *`: croniter would read it as `0`, firing once an hour),
  an unknown time zone, `every` outside 1 s … 366 days, text or ids that no event could carry are refused
  here, at config load and at `POST /v1/schedules`, never later in the loop.
- A fire's `event_id` is `schedule:<id>:<fire time>`, so every replica builds the same event for the
  same fire and the idempotent admission of `event_id` stores at most one run of it.
"""

from __future__ import annotations

import datetime
import re
import zoneinfo
from typing import TYPE_CHECKING, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from mcphost.common.fielddocs import DocumentedModel
from mcphost.ingress import SCHEDULE_PREFIX
from mcphost.models import (
    EVENT_TYPE_PATTERN,
    ID_PATTERN,
    AgentEventEnvelope,
    EventConversation,
    EventInput,
    EventSubject,
)
from mcphost.protocol import MAX_JSON_DEPTH, JSONObject, json_depth, nesting_message, unstorable

if TYPE_CHECKING:
    from croniter import croniter

SCHEDULE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
DEFAULT_EVENT_TYPE = "schedule.triggered"
MAX_EVERY_S = 366 * 24 * 3600
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_EVERY = re.compile(r"^\s*(\d{1,9})\s*([smhd])\s*$")
Misfire = Literal["skip", "run_once"]
CRON_FIELDS: tuple[tuple[str, int, int], ...] = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 6),
    ("second", 0, 59),
)
"""The fields of a cron expression in order (6th: seconds, croniter's order) and their value ranges."""


def parse_every(value: object) -> int:
    """`"10s"`, `"5m"`, `"2h"`, `"1d"` or a whole number of seconds → seconds, within 1 s … 366 days."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as '10s', '5m', '2h' or '1d', got {value!r}")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and (match := _EVERY.match(value)):
        seconds = int(match[1]) * _UNITS[match[2]]
    else:
        raise ValueError(f"expected a duration such as '10s', '5m', '2h' or '1d', got {str(value)[:40]!r}")
    if not 1 <= seconds <= MAX_EVERY_S:
        raise ValueError(f"must be between 1 second and 366 days, got {min(seconds, 10**12)} s")
    return seconds


def cron_step_problem(expression: str) -> str | None:
    """What is wrong with a step in `expression` that is past its field's range (`*/99` in the minute
    field), else None. croniter accepts such a step and fires only at the range's start, which is
    never what was meant."""
    fields = expression.split()
    if not fields or fields[0].startswith("@"):
        return None
    for (name, low, high), field in zip(CRON_FIELDS, fields, strict=False):
        for item in field.split(","):
            _, slash, step = item.partition("/")
            if slash and step.isascii() and step.isdigit() and int(step) > high:
                return (
                    f"the step {int(step)} in the {name} field ({item[:40]!r}) is past the field's range "
                    f"{low}-{high}; use a step from 1 to {high}"
                )
    return None


class ScheduleSpec(DocumentedModel):
    """A schedule: when it fires (`cron` in `timezone`, or `every`) and the event each fire emits."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    id: str = Field(pattern=SCHEDULE_ID_PATTERN)
    """1-100 letters, digits, '.', '_' or '-'; unique among the config's and the API's schedules."""
    cron: str | None = Field(default=None, min_length=1, max_length=200)
    """A cron expression (5 fields, or 6 with seconds last; `@hourly` and the like), read in `timezone`."""
    every: str | int | None = None
    """A period: `"10s"`, `"5m"`, `"2h"`, `"1d"` or whole seconds; fires at its multiples since the epoch."""
    timezone: str = Field(default="UTC", min_length=1, max_length=100)
    """IANA time zone the `cron` expression is read in (`Europe/Berlin`)."""
    agent: str | None = Field(default=None, pattern=ID_PATTERN)
    """Send the event to this agent (it must still be bound to the event type)."""
    event_type: str = Field(default=DEFAULT_EVENT_TYPE, pattern=EVENT_TYPE_PATTERN, max_length=100)
    conversation_id: str | None = Field(default=None, pattern=ID_PATTERN)
    text: str | None = Field(default=None, max_length=256 * 1024)
    """The event's `input.text`."""
    data: JSONObject = Field(default_factory=dict)
    """The event's `data` (`ctx.event.data`)."""
    misfire: Misfire = "skip"
    """A fire found late (the host was down or busy): `skip` it, or `run_once` for all the missed ones."""

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value[:100]!r}; use an IANA name such as 'Europe/Berlin'"
            ) from None
        return value

    @field_validator("data")
    @classmethod
    def _storable(cls, value: JSONObject) -> JSONObject:
        if json_depth(value) > MAX_JSON_DEPTH:
            raise ValueError(nesting_message("data"))
        if (problem := unstorable(value)) is not None:
            raise ValueError(problem.message("data"))
        return value

    @field_validator("every", mode="before")
    @classmethod
    def _period(cls, value: object) -> object:
        if value is not None:
            parse_every(value)  # before pydantic's own coercion, which would read `true` as 1
        return value

    @field_validator("text")
    @classmethod
    def _storable_text(cls, value: str | None) -> str | None:
        if value is not None and (problem := unstorable(value)) is not None:
            raise ValueError(problem.message("text"))
        return value

    @model_validator(mode="after")
    def _one_timetable(self) -> ScheduleSpec:
        if (self.cron is None) == (self.every is None):
            raise ValueError("set exactly one of 'cron' (an expression) or 'every' (a period such as '10s')")
        if self.cron is not None:
            from croniter import (
                croniter,  # only for a cron schedule (with dateutil, a third of `send`'s config)
            )

            if not croniter.is_valid(self.cron):
                raise ValueError(f"cron: {self.cron[:200]!r} is not a valid cron expression")
            if (problem := cron_step_problem(self.cron)) is not None:
                raise ValueError(f"cron: {self.cron[:200]!r}: {problem}")
            # Whether it fires at all, before or after now: the same answer whenever a spec is validated
            # (a stored one is read back long after it was accepted). Whether it has a fire left is the
            # creator's check (`spent_problem`): a spec whose last fire has passed is spent, not invalid.
            now = datetime.datetime.now(datetime.UTC).timestamp()
            if self.next_fire(now) is None and self.last_fire(now) is None:
                raise ValueError(f"cron: {self.cron[:200]!r} never fires")
        return self

    @property
    def period_s(self) -> int | None:
        """`every` in seconds, or None for a cron schedule."""
        return None if self.every is None else parse_every(self.every)

    def _cron(self, at: float) -> croniter:
        from croniter import croniter

        assert self.cron is not None
        start = datetime.datetime.fromtimestamp(at, zoneinfo.ZoneInfo(self.timezone))
        return croniter(self.cron, start)

    def next_fire(self, after: float) -> int | None:
        """The first fire time strictly after `after`; None when a cron expression has none left (one that
        names a year, e.g. `0 9 1 1 * 0 2026`, once that year has passed)."""
        period = self.period_s
        if period is not None:
            return (int(after) // period + 1) * period
        from croniter import CroniterError

        try:
            return int(self._cron(after).get_next(float))
        except (CroniterError, ValueError, OverflowError):
            return None

    def spent_problem(self, now: float) -> str | None:
        """Why a new schedule would never fire from `now` on (a cron expression naming a year whose last
        fire has passed), or None."""
        if self.next_fire(now) is not None:
            return None
        return f"cron: {(self.cron or '')[:200]!r} has no fire left after now (its last one has passed)"

    def last_fire(self, at: float) -> int | None:
        """The last fire time at or before `at` (None when a cron expression finds none)."""
        period = self.period_s
        if period is not None:
            return int(at) // period * period
        from croniter import CroniterError

        try:
            return int(self._cron(int(at) + 1).get_prev(float))
        except (CroniterError, ValueError, OverflowError):
            return None

    def event(self, fire_at: int) -> AgentEventEnvelope:
        """The event the fire at `fire_at` emits; the same on every replica."""
        return AgentEventEnvelope(
            event_id=fire_event_id(self.id, fire_at),
            event_type=self.event_type,
            event_time=float(fire_at),
            source="scheduler",
            conversation=None
            if self.conversation_id is None
            else EventConversation(conversation_id=self.conversation_id),
            subject=EventSubject(subject_type="schedule", subject_id=self.id, data={"fire_at": fire_at}),
            input=EventInput(text=self.text),
            data=dict(self.data),
            agent_id=self.agent,
        )


def fire_event_id(schedule_id: str, fire_at: int) -> str:
    """The `event_id` of one fire: derived from the schedule and the fire time only."""
    return f"{SCHEDULE_PREFIX}{schedule_id}:{fire_at}"
