"""Every call of the API the client makes, as data: method, path, query, body and how to read the answer.

Owns the HTTP shape of each resource method (`AsyncClient` and `Client` run the same `Call`s, one with
`await`), so the two clients cannot drift apart. Does not own sending (`_async`, `_sync`) or result
streams (`_stream`). The answer models (`models`, pydantic) are imported inside each builder, when a call
that returns one is made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Generic, Literal, TypeVar
from urllib.parse import quote

from mcphost.client._json import JSONObject, JSONValue

if TYPE_CHECKING:
    from mcphost.client.models import (
        Admitted,
        ApprovalRecord,
        ApprovalsPage,
        ApprovalStatus,
        CancelAnswer,
        ChannelsView,
        Decision,
        EventsPage,
        RunRuntimeView,
        RunsPage,
        RunStatus,
        RuntimesView,
        RuntimeView,
        RunView,
        ScheduleDeleted,
        SchedulesPage,
        ScheduleStatus,
        TranscriptPage,
    )

T = TypeVar("T")
Params = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[bytes], T]
    params: Params = ()
    body: JSONObject | None = None


def segment(value: str) -> str:
    """`value` as one path segment (a `/` or `?` in an id stays inside it)."""
    return quote(value, safe="")


def query(**values: str | int | bool | datetime | Sequence[str] | None) -> Params:
    """Query parameters without the unset ones; a sequence repeats its parameter."""
    params: list[tuple[str, str]] = []
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool):
            params.append((name, "true" if value else "false"))
        elif isinstance(value, datetime):
            params.append((name, value.isoformat()))
        elif isinstance(value, str | int):
            params.append((name, str(value)))
        else:
            params.extend((name, item) for item in value)
    return tuple(params)


# -- events and runs ---------------------------------------------------------------------------------


def send_event(event: Mapping[str, JSONValue]) -> Call[Admitted]:
    from mcphost.client.models import Admitted

    return Call("POST", "/v1/events", Admitted.model_validate_json, body=dict(event))


def list_runs(
    *,
    conversation_id: str | None,
    status: RunStatus | None,
    agent: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int | None,
    cursor: str | None,
) -> Call[RunsPage]:
    from mcphost.client.models import RunsPage

    params = query(
        conversation_id=conversation_id,
        status=status,
        agent=agent,
        since=since,
        until=until,
        limit=limit,
        cursor=cursor,
    )
    return Call("GET", "/v1/runs", RunsPage.model_validate_json, params)


def get_run(run_id: str) -> Call[RunView]:
    from mcphost.client.models import RunView

    return Call("GET", f"/v1/runs/{segment(run_id)}", RunView.model_validate_json)


def cancel_run(run_id: str, reason: str | None) -> Call[CancelAnswer]:
    from mcphost.client.models import CancelAnswer

    body: JSONObject = {} if reason is None else {"reason": reason}
    return Call("POST", f"/v1/runs/{segment(run_id)}/cancel", CancelAnswer.model_validate_json, body=body)


# -- approvals ---------------------------------------------------------------------------------------


def list_approvals(
    *, status: ApprovalStatus | None, run_id: str | None, limit: int | None, cursor: str | None
) -> Call[ApprovalsPage]:
    from mcphost.client.models import ApprovalsPage

    params = query(status=status, run_id=run_id, limit=limit, cursor=cursor)
    return Call("GET", "/v1/approvals", ApprovalsPage.model_validate_json, params)


def get_approval(approval_id: str) -> Call[ApprovalRecord]:
    from mcphost.client.models import ApprovalRecord

    return Call("GET", f"/v1/approvals/{segment(approval_id)}", ApprovalRecord.model_validate_json)


def decide_approval(
    approval_id: str, decision: Decision, *, note: str | None, answer: str | None
) -> Call[ApprovalRecord]:
    from mcphost.client.models import ApprovalRecord

    body: JSONObject = {"decision": decision}
    if note is not None:
        body["note"] = note
    if answer is not None:
        body["answer"] = answer
    return Call(
        "POST", f"/v1/approvals/{segment(approval_id)}", ApprovalRecord.model_validate_json, body=body
    )


# -- runtimes ----------------------------------------------------------------------------------------


def run_runtime(run_id: str) -> Call[RunRuntimeView]:
    from mcphost.client.models import RunRuntimeView

    return Call("GET", f"/v1/runs/{segment(run_id)}/runtime", RunRuntimeView.model_validate_json)


def list_runtimes() -> Call[RuntimesView]:
    from mcphost.client.models import RuntimesView

    return Call("GET", "/v1/runtimes", RuntimesView.model_validate_json)


def set_runtime_state(runtime: str, action: Literal["drain", "disable", "enable"]) -> Call[RuntimeView]:
    from mcphost.client.models import RuntimeView

    return Call("POST", f"/v1/runtimes/{segment(runtime)}/{action}", RuntimeView.model_validate_json)


# -- channels ----------------------------------------------------------------------------------------


def list_channels() -> Call[ChannelsView]:
    from mcphost.client.models import ChannelsView

    return Call("GET", "/v1/channels", ChannelsView.model_validate_json)


# -- schedules ---------------------------------------------------------------------------------------


def list_schedules(*, limit: int | None, cursor: str | None) -> Call[SchedulesPage]:
    from mcphost.client.models import SchedulesPage

    return Call("GET", "/v1/schedules", SchedulesPage.model_validate_json, query(limit=limit, cursor=cursor))


def get_schedule(schedule_id: str) -> Call[ScheduleStatus]:
    from mcphost.client.models import ScheduleStatus

    return Call("GET", f"/v1/schedules/{segment(schedule_id)}", ScheduleStatus.model_validate_json)


def create_schedule(spec: Mapping[str, JSONValue]) -> Call[ScheduleStatus]:
    from mcphost.client.models import ScheduleStatus

    return Call("POST", "/v1/schedules", ScheduleStatus.model_validate_json, body=dict(spec))


def delete_schedule(schedule_id: str) -> Call[ScheduleDeleted]:
    from mcphost.client.models import ScheduleDeleted

    return Call("DELETE", f"/v1/schedules/{segment(schedule_id)}", ScheduleDeleted.model_validate_json)


def pause_schedule(schedule_id: str, *, resume: bool) -> Call[ScheduleStatus]:
    from mcphost.client.models import ScheduleStatus

    action = "resume" if resume else "pause"
    return Call("POST", f"/v1/schedules/{segment(schedule_id)}/{action}", ScheduleStatus.model_validate_json)


# -- conversations -----------------------------------------------------------------------------------


def transcript(
    conversation_id: str, *, before: str | None, after: str | None, limit: int | None, thread_id: str | None
) -> Call[TranscriptPage]:
    from mcphost.client.models import TranscriptPage

    params = query(before=before, after=after, limit=limit, thread_id=thread_id)
    path = f"/v1/conversations/{segment(conversation_id)}/transcript"
    return Call("GET", path, TranscriptPage.model_validate_json, params)


def conversation_events(
    conversation_id: str,
    *,
    before: str | None,
    after: str | None,
    limit: int | None,
    thread_id: str | None,
    event_type: Sequence[str] | None,
) -> Call[EventsPage]:
    from mcphost.client.models import EventsPage

    params = query(before=before, after=after, limit=limit, thread_id=thread_id, event_type=event_type)
    path = f"/v1/conversations/{segment(conversation_id)}/events"
    return Call("GET", path, EventsPage.model_validate_json, params)
