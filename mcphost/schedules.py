"""The scheduler: finds due fires of the config's and the API's schedules, claims each in the database and
emits its event; and the timetable that `GET /v1/schedules` and `mcphost schedules` show.

Owns `Scheduler` (what is due, claiming, emitting, waking on API changes), `run_scheduler` (its loop, a
task owned by `app.open_host`), `ScheduleStatus` and `schedule_page` (one page of the timetable for
`GET /v1/schedules` and `mcphost schedules`: config schedules first, then stored ones, each by id; its
cursor is the last item's origin and id, so a page reads at most `limit` + 1 stored schedules and the
newest claims of its own schedules). Does not own what a schedule says or when it fires
(`timetable.py`), storage (`stores/schedules.py`) or admission (`Orchestrator.submit`, passed in).

Invariants:
- Each fire produces at most one event across any number of replicas: the replica whose claim of
  (schedule id, fire time) stores the row submits the event, and its `event_id` is derived from both
  (`timetable.fire_event_id`), so even a repeated submit is the same idempotent admission. A replica that
  dies between its claim and its submit loses that one fire (the claim is not retried).
- Misfires: a schedule's next fire is looked for after its newest claim (a stored schedule without one:
  after its creation; a config schedule without one: after this scheduler started, so a new config entry
  does not replay the past). When that fire is due, the latest due fire time is the one claimed; the ones
  between are not emitted. The claimed fire is emitted when it is at most `MISFIRE_GRACE_S` late, or
  always under `misfire = "run_once"`; otherwise it is claimed as `skipped` and nothing is emitted.
- The loop is cheap when idle: it sleeps until the earliest next fire, at most `RELOAD_S` (changes made
  on other replicas are seen then), and wakes at once when this process's API changes a schedule. A tick
  reads the schedules and their newest claims (two queries) and handles at most `MAX_FIRES_PER_TICK`
  due schedules; the rest go to the next tick, which follows immediately.
- The loop never takes the host down: a failing tick (storage gone, a bug) is logged and retried with
  back-off from `ERROR_BACKOFF_S` (`common/periodic.py`); a fire whose submit fails (no agent bound, a `reject` policy) is logged. Each fire
  this scheduler claimed is told to `on_fire` (`fired`, `skipped` or `refused`: the `/metrics` counter).
- A config schedule and a stored schedule never share an id: `run_scheduler` refuses to start
  (`ConfigError`) when the database holds one with a config schedule's id, and the API refuses to create one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal

import anyio
from anyio.abc import TaskStatus
from pydantic import BaseModel, ConfigDict

from mcphost.bindings import Bindings
from mcphost.common.periodic import Periodic
from mcphost.errors import ConfigError, ConflictError, HostError, InvalidArgumentError
from mcphost.models import AgentEventEnvelope
from mcphost.stores import Page, StoredSchedule, Stores
from mcphost.timetable import ScheduleSpec

log = logging.getLogger(__name__)

MISFIRE_GRACE_S = 2.0
"""A fire later than this is a misfire: skipped, or run once (`misfire`)."""
RELOAD_S = 15.0
"""The longest the loop sleeps: how soon a schedule created or paused on another replica is seen."""
MAX_FIRES_PER_TICK = 100
ERROR_BACKOFF_S = 5.0

Submit = Callable[[AgentEventEnvelope], Awaitable[object]]
FireOutcome = Literal["fired", "skipped", "refused"]
OnFire = Callable[[FireOutcome], None]
"""Told the outcome of each fire this scheduler claimed (the `/metrics` counter)."""


class ScheduleStatus(BaseModel):
    """A schedule and where it stands: `GET /v1/schedules`, `mcphost schedules --json`."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    id: str
    origin: Literal["config", "api"]
    """`config` (`[[schedules]]`, read-only through the API) or `api` (created with POST /v1/schedules)."""
    paused: bool
    next_fire_at: int | None
    """Epoch seconds of the next fire; None while paused."""
    last_fire_at: int | None
    """Epoch seconds of the newest claimed fire (emitted or skipped), if any."""
    created_at: float | None
    """When it was created through the API; None for config schedules."""
    spec: ScheduleSpec


def _anchor(
    spec: ScheduleSpec, last: dict[str, int], stored: StoredSchedule | None, started_at: float
) -> float:
    """Where the next fire of `spec` is looked for (see the module docstring)."""
    claimed = last.get(spec.id)
    if claimed is not None:
        return claimed
    return stored.created_at if stored is not None else started_at


class Scheduler:
    """Due fires of the config's and the stored schedules → claimed once → submitted events."""

    def __init__(
        self,
        stores: Stores,
        config: Sequence[ScheduleSpec],
        *,
        submit: Submit,
        bindings: Bindings,
        host_id: str | None = None,
        on_fire: OnFire | None = None,
    ) -> None:
        self._stores = stores
        self._on_fire = on_fire
        self._config = {spec.id: spec for spec in config}
        self._submit = submit
        self._bindings = bindings
        self._host_id = host_id
        self._started_at = time.time()
        self.loop = Periodic("the scheduler", self._tick_now, interval_s=RELOAD_S, retry_s=ERROR_BACKOFF_S)
        """Ticks until the next fire (`run_scheduler`); a failing tick backs off from `ERROR_BACKOFF_S`."""

    @property
    def config_ids(self) -> frozenset[str]:
        return frozenset(self._config)

    def wake(self) -> None:
        """Look at the schedules again now (one was created, paused, resumed or deleted)."""
        self.loop.wake()

    def check(self, spec: ScheduleSpec) -> None:
        """Refuse a schedule no fire of which could run.

        Raises:
            ConflictError: a config schedule has its id, or more than one agent is bound to its event.
            NotFoundError: no agent is bound to its event (`NoBindingError`).
        """
        if spec.id in self._config:
            raise ConflictError(
                f"Schedule {spec.id!r} is defined in the config file ([[schedules]]); choose another id.",
                details={"schedule_id": spec.id},
            )
        if (problem := spec.spent_problem(time.time())) is not None:
            raise InvalidArgumentError(f"body: {problem}; give a timetable that fires again.")
        self._bindings.resolve(spec.event(spec.next_fire(time.time()) or int(time.time())))

    async def check_config(self) -> None:
        """Refuse to start on a config schedule that shares an id with a stored one, or binds no agent.

        Raises:
            ConfigError: naming the schedule and what to do.
        """
        for spec in self._config.values():
            try:
                self._bindings.resolve(spec.event(spec.next_fire(time.time()) or int(time.time())))
            except HostError as exc:
                raise ConfigError(
                    f"schedules (id {spec.id!r}): its event {spec.event_type!r} cannot run: {exc.message}",
                    details={"schedule_id": spec.id},
                ) from None
        clashes = sorted(self.config_ids & {s.spec.id for s in await self._stores.schedules.list()})
        if clashes:
            raise ConfigError(
                f"schedules: id(s) {', '.join(map(repr, clashes))} are both in the config file and created "
                "through the API; delete the stored one (DELETE /v1/schedules/{id}) or rename the config entry.",
                details={"schedule_ids": clashes},
            )

    async def statuses(self, now: float | None = None) -> list[ScheduleStatus]:
        """Every schedule, config ones first, with its next and newest fire times."""
        now = time.time() if now is None else now
        stored = await self._stores.schedules.list()
        last = await self._stores.schedules.last_fires()
        return timetable(list(self._config.values()), stored, last, now=now, started_at=self._started_at)

    async def page(self, *, limit: int, cursor: str | None) -> Page[ScheduleStatus]:
        """One page of `statuses` (`schedule_page`), for `GET /v1/schedules`."""
        return await schedule_page(
            self._stores,
            list(self._config.values()),
            limit=limit,
            cursor=cursor,
            now=time.time(),
            started_at=self._started_at,
        )

    async def tick(self, now: float) -> float:
        """Claim and emit what is due at `now`; the time to look again."""
        stored = await self._stores.schedules.list()
        last = await self._stores.schedules.last_fires()
        entries: list[tuple[ScheduleSpec, StoredSchedule | None]] = [(s, None) for s in self._config.values()]
        entries += [(s.spec, s) for s in stored if not s.paused and s.spec.id not in self._config]
        wake_at = now + RELOAD_S
        handled = 0
        for spec, record in entries:
            due = spec.next_fire(_anchor(spec, last, record, self._started_at))
            if due is None:  # spent: a cron expression with no fire left
                continue
            if due > now:
                wake_at = min(wake_at, due)
                continue
            if handled >= MAX_FIRES_PER_TICK:
                wake_at = now
                continue
            handled += 1
            latest = spec.last_fire(now) or due
            await self._fire(spec, due, latest, now=now, stored=record is not None)
            wake_at = min(wake_at, spec.next_fire(latest) or wake_at)
        return wake_at

    async def _fire(self, spec: ScheduleSpec, due: int, latest: int, *, now: float, stored: bool) -> None:
        late = now - latest > MISFIRE_GRACE_S
        emit = not late or spec.misfire == "run_once"
        outcome = "fired" if emit else "skipped"
        if not await self._stores.schedules.claim(
            spec.id, latest, outcome=outcome, host_id=self._host_id, stored=stored
        ):
            return  # another replica claimed it, or it was paused or deleted meanwhile
        if latest > due or late:
            log.info(
                "schedule %s missed fires from %d to %d (misfire = %s): %s the one at %d",
                spec.id,
                due,
                latest,
                spec.misfire,
                "emitting" if emit else "skipping",
                latest,
            )
        if not emit:
            self._fired("skipped")
            return
        event = spec.event(latest)
        try:
            await self._submit(event)
        except HostError as exc:
            self._fired("refused")
            log.warning(
                "schedule %s: the event %s of its fire was refused: %s", spec.id, event.event_id, exc.message
            )
        else:
            self._fired("fired")

    def _fired(self, outcome: FireOutcome) -> None:
        if self._on_fire is not None:
            self._on_fire(outcome)

    async def _tick_now(self) -> float:
        """One pass of the loop at the current time; the seconds until the next."""
        return max(await self.tick(time.time()) - time.time(), 0.0)


def timetable(
    config: Sequence[ScheduleSpec],
    stored: Sequence[StoredSchedule],
    last: dict[str, int],
    *,
    now: float,
    started_at: float | None = None,
) -> list[ScheduleStatus]:
    """The status of each schedule at `now` (config ones first, then stored ones by id)."""
    out: list[ScheduleStatus] = []
    since = now if started_at is None else started_at
    for spec in config:
        anchor = _anchor(spec, last, None, since)
        out.append(
            ScheduleStatus(
                id=spec.id,
                origin="config",
                paused=False,
                next_fire_at=spec.next_fire(max(anchor, now)),
                last_fire_at=last.get(spec.id),
                created_at=None,
                spec=spec,
            )
        )
    for record in stored:
        spec = record.spec
        anchor = _anchor(spec, last, record, since)
        out.append(
            ScheduleStatus(
                id=spec.id,
                origin="api",
                paused=record.paused,
                next_fire_at=None if record.paused else spec.next_fire(max(anchor, now)),
                last_fire_at=last.get(spec.id),
                created_at=record.created_at,
                spec=spec,
            )
        )
    return out


async def schedule_page(
    stores: Stores,
    config: Sequence[ScheduleSpec],
    *,
    limit: int,
    cursor: str | None,
    now: float,
    started_at: float | None = None,
) -> Page[ScheduleStatus]:
    """One page of the timetable: config schedules first, then stored ones, each by id, continuing after
    `cursor`. Reads at most `limit` + 1 stored schedules and the newest claims of the page's schedules.

    Raises:
        InvalidArgumentError: `cursor` is not a schedules cursor of this host.
    """
    assert limit >= 1, "the API and the CLI bound limit to 1..100"
    origin, after = "c", None
    if cursor is not None:
        position = stores.cursors.decode_key(cursor, "schedules")
        origin, _, after = position.partition(":")
        if origin not in ("c", "a") or not after:
            raise InvalidArgumentError(f"Malformed schedules cursor {cursor[:80]!r}: it carries no position.")
    configs: list[ScheduleSpec] = []
    if origin == "c":
        configs = sorted((s for s in config if after is None or s.id > after), key=lambda s: s.id)[
            : limit + 1
        ]
    stored: list[StoredSchedule] = []
    if len(configs) <= limit:
        stored = await stores.schedules.page(
            after=after if origin == "a" else None, limit=limit + 1 - len(configs)
        )
    has_more = len(configs) + len(stored) > limit
    configs = configs[:limit]
    stored = stored[: limit - len(configs)]
    last = await stores.schedules.last_fires([*(s.id for s in configs), *(s.spec.id for s in stored)])
    items = timetable(configs, stored, last, now=now, started_at=started_at)
    next_cursor = None
    if has_more and items:
        final = items[-1]
        next_cursor = stores.cursors.encode(
            "schedules", f"{'c' if final.origin == 'config' else 'a'}:{final.id}"
        )
    return Page[ScheduleStatus](items=items, next_cursor=next_cursor, prev_cursor=None, has_more=has_more)


async def run_scheduler(
    scheduler: Scheduler, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """The scheduler loop, until cancelled. Checks the config first, so a clash fails the host's start."""
    await scheduler.check_config()
    await scheduler.loop.run(task_status=task_status)
