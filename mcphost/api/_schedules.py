"""The schedule endpoints: `GET/POST /v1/schedules`, `GET/DELETE /v1/schedules/{schedule_id}` and
`POST /v1/schedules/{schedule_id}/pause|resume`.

Owns what these routes accept and answer. Does not own what a schedule may say (`timetable.ScheduleSpec`
validates the body), storage (`stores/schedules.py`) or firing (`schedules.Scheduler`, woken after every
change so a new or resumed schedule is looked at at once).

Invariants:
- `GET /v1/schedules` is paged like the other lists (`limit`, `cursor` → `next_cursor`, `has_more`;
  `schedules.schedule_page`): a page reads at most `limit` + 1 stored schedules.
- Schedules from the config file are read-only here: deleting, pausing or resuming one is a 409 that
  says to edit the file, and creating one with a config schedule's id is a 409.
- A body is refused before anything is stored: an unknown time zone, a cron expression that is invalid or
  never fires or has no fire left (a 7-field expression whose year has passed), an `every` outside 1 s … 366 days, a value no store can keep (400 naming the field), or an
  event no agent is bound to (404, as `POST /v1/events` answers it).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcphost.api._http import parse_json, parse_query, path_id, read_body
from mcphost.api._models import QueryModel, ScheduleDeleted, SchedulesPage, SchedulesQuery
from mcphost.api._state import ApiState, api_state
from mcphost.common.timestamps import json_with_iso
from mcphost.errors import ConflictError, NotFoundError
from mcphost.schedules import Scheduler, ScheduleStatus
from mcphost.timetable import ScheduleSpec

MAX_SCHEDULE_BODY_BYTES = 1024 * 1024


def _scheduler(state: ApiState) -> Scheduler:
    assert state.scheduler is not None, "app.py gives the API the host's scheduler"
    return state.scheduler


def _read_only(schedule_id: str) -> ConflictError:
    return ConflictError(
        f"Schedule {schedule_id!r} is defined in the config file ([[schedules]]) and is read-only through "
        "the API; edit the file and restart the host to change it.",
        details={"schedule_id": schedule_id},
    )


async def _status(scheduler: Scheduler, schedule_id: str) -> ScheduleStatus:
    for status in await scheduler.statuses():
        if status.id == schedule_id:
            return status
    raise NotFoundError(
        f"Schedule {schedule_id!r} does not exist; GET /v1/schedules lists them.",
        details={"schedule_id": schedule_id},
    )


def _answer(status: ScheduleStatus, code: int = 200) -> Response:
    return JSONResponse(json_with_iso(status), status_code=code)


async def list_schedules(request: Request) -> Response:
    state = api_state(request)
    query = parse_query(request, SchedulesQuery)
    page = await _scheduler(state).page(limit=query.limit, cursor=query.cursor)
    answer = SchedulesPage(items=page.items, next_cursor=page.next_cursor, has_more=page.has_more)
    return JSONResponse(json_with_iso(answer))


async def create_schedule(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, QueryModel)
    spec = parse_json(ScheduleSpec, await read_body(request, MAX_SCHEDULE_BODY_BYTES))
    scheduler = _scheduler(state)
    scheduler.check(spec)
    await state.stores.schedules.create(spec)
    scheduler.wake()
    return _answer(await _status(scheduler, spec.id), 201)


async def show_schedule(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, QueryModel)
    return _answer(await _status(_scheduler(state), path_id(request, "schedule_id")))


async def delete_schedule(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, QueryModel)
    schedule_id = path_id(request, "schedule_id")
    scheduler = _scheduler(state)
    if schedule_id in scheduler.config_ids:
        raise _read_only(schedule_id)
    await state.stores.schedules.delete(schedule_id)
    scheduler.wake()
    return JSONResponse(json_with_iso(ScheduleDeleted(schedule_id=schedule_id, deleted=True)))


async def _set_paused(request: Request, paused: bool) -> Response:
    state = api_state(request)
    parse_query(request, QueryModel)
    schedule_id = path_id(request, "schedule_id")
    scheduler = _scheduler(state)
    if schedule_id in scheduler.config_ids:
        raise _read_only(schedule_id)
    await state.stores.schedules.set_paused(schedule_id, paused)
    scheduler.wake()
    return _answer(await _status(scheduler, schedule_id))


async def pause_schedule(request: Request) -> Response:
    return await _set_paused(request, True)


async def resume_schedule(request: Request) -> Response:
    return await _set_paused(request, False)
