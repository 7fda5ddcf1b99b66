"""The API's answers as the client returns them: pydantic models of `/openapi.json`'s component schemas.

Owns the client's view of each answer. Tolerant by design: a field the server adds later is kept (in
`model_extra`) instead of failing the call, so an older client reads a newer server. Each model names
the OpenAPI component it reads (`tests/mcphost/client/test_models.py` checks every field against the
server's document: same name, same requiredness). Imported only by the calls that return a model, so a
client that only streams results never imports pydantic.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mcphost.client._json import JSONObject, JSONValue

RunStatus = Literal["queued", "running", "completed", "failed", "cancelled", "parked"]
ApprovalStatus = Literal["pending", "approved", "denied", "expired"]
Decision = Literal["approve", "deny", "answer"]


class Answer(BaseModel):
    """Base of every answer: frozen, and open to fields this client does not know yet."""

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)


class ErrorDetail(Answer):
    code: str
    message: str
    details: JSONObject


class Admitted(Answer):
    """`POST /v1/events` (202): the run the event made, or the existing one (`created` false)."""

    run_id: str
    event_id: str
    status: RunStatus
    created: bool


class RunFailure(Answer):
    """Why a run did not complete (`Run.error`): a record, not an exception."""

    code: str
    message: str
    details: JSONObject = Field(default_factory=dict[str, JSONValue])


class Run(Answer):
    run_id: str
    event_id: str
    event_type: str
    agent_id: str | None
    runner_id: str | None
    conversation_id: str | None
    thread_id: str | None
    status: RunStatus
    created_at: float
    started_at: float | None = None
    ended_at: float | None = None
    deadline_at: float
    error: RunFailure | None = None
    usage: JSONObject = Field(default_factory=dict[str, JSONValue])
    host_id: str | None = None
    attempt: int = 1
    previous_run_id: str | None = None
    created_by: str | None = None


class Attempt(Answer):
    run_id: str
    attempt: int
    status: RunStatus
    error: RunFailure | None
    created_at: float
    ended_at: float | None


class GrantSummary(Answer):
    """What the run may touch (PROTOCOL §6), without its token; the other fields are in `model_extra`."""

    runner_id: str | None
    binding_id: str | None
    conversation_id: str | None
    thread_id: str | None
    actor_id: str | None
    deadline_at: float
    revoked: bool
    active: bool


class RunView(Answer):
    """`GET /v1/runs/{run_id}`."""

    run: Run
    grant: GrantSummary
    mcp_url: str
    attempts: list[Attempt]


class RunsPage(Answer):
    items: list[Run]
    next_cursor: str | None
    has_more: bool


class CancelAnswer(Answer):
    run_id: str
    status: RunStatus
    cancel_requested: bool


class ApprovalRecord(Answer):
    approval_id: str
    run_id: str
    agent_id: str | None
    conversation_id: str | None
    kind: Literal["tool", "action", "interaction"]
    status: ApprovalStatus
    request: JSONObject
    note: str | None
    created_at: float
    expires_at: float
    decided_at: float | None
    parked: bool = False
    continuation_run_id: str | None = None
    used_by_run_id: str | None = None


class ApprovalsPage(Answer):
    items: list[ApprovalRecord]
    next_cursor: str | None
    has_more: bool


class ScheduleSpec(Answer):
    """A schedule as created (`POST /v1/schedules` takes the same fields)."""

    id: str
    cron: str | None = None
    every: str | int | None = None
    timezone: str = "UTC"
    agent: str | None = None
    event_type: str = "schedule.triggered"
    conversation_id: str | None = None
    text: str | None = None
    data: JSONObject = Field(default_factory=dict[str, JSONValue])
    misfire: Literal["skip", "run_once"] = "skip"


class ScheduleStatus(Answer):
    id: str
    origin: str
    paused: bool
    next_fire_at: int | None
    last_fire_at: int | None
    created_at: float | None
    spec: ScheduleSpec


class SchedulesPage(Answer):
    items: list[ScheduleStatus]
    next_cursor: str | None
    has_more: bool


class ScheduleDeleted(Answer):
    schedule_id: str
    deleted: bool


class TranscriptRecord(Answer):
    seq: int
    cursor: str
    item_id: str
    conversation_id: str
    thread_id: str | None
    role: str
    content: str
    contents: list[JSONObject]
    contents_error: str | None = None
    artifacts: list[JSONObject]
    event_id: str | None
    run_id: str | None
    actor_id: str | None
    created_at: float


class TranscriptPage(Answer):
    items: list[TranscriptRecord]
    next_cursor: str | None
    prev_cursor: str | None
    has_more: bool


class StoredEvent(Answer):
    seq: int
    cursor: str
    event_id: str
    event_type: str
    kind: str
    conversation_id: str | None
    thread_id: str | None
    run_id: str | None
    actor_id: str | None
    source: str
    payload: JSONObject
    created_at: float
    payload_error: str | None = None


class EventsPage(Answer):
    items: list[StoredEvent]
    next_cursor: str | None
    prev_cursor: str | None
    has_more: bool


class ChannelReply(Answer):
    delivery_id: str
    type: str
    status: str
    run_id: str | None
    attempts: int
    created_at: float
    delivered_at: float | None
    last_error: str | None


class ChannelView(Answer):
    channel_id: str
    platform: str
    events: list[str] | None
    agents: list[str]
    accepted: int
    ignored: int
    last_inbound_at: float | None
    last_event_type: str | None
    last_source_event_type: str | None
    last_run_id: str | None
    last_ignored_at: float | None
    last_ignored_reason: str | None
    last_ignored_type: str | None
    pending: int
    dead: int
    last_delivery: ChannelReply | None
    last_error: ChannelReply | None


class ChannelsView(Answer):
    channels: list[ChannelView]


class RuntimeClaim(Answer):
    """A run a runtime holds now."""

    run_id: str
    fence: int
    attempt: int
    claimed_at: float | None
    lease_until: float
    last_renewal_at: float | None


class RuntimeView(Answer):
    runtime_id: str
    name: str
    state: Literal["online", "draining", "disabled"]
    alive: bool
    last_heartbeat_at: float | None
    slots: int
    running: int
    runs: list[RuntimeClaim] = Field(default_factory=list[RuntimeClaim])
    labels: dict[str, str]
    capabilities: JSONObject
    created_at: float


class RuntimesView(Answer):
    runtimes: list[RuntimeView]


class RuntimeAudit(Answer):
    """Where a remote run ran: its latest claim's runtime, fence and timings, and every claim's events."""

    run_id: str
    state: Literal["queued", "claimed", "ended"]
    runtime_id: str | None
    runtime_name: str | None
    fence: int
    attempts: int
    queued_at: float
    claimed_at: float | None
    first_result_at: float | None
    renewals: int
    last_renewal_at: float | None
    lease_until: float | None
    ended_at: float | None
    end_status: str | None
    output_artifact_id: str | None
    events: list[JSONObject]


class RunRuntimeView(Answer):
    run_id: str
    runtime: RuntimeAudit | None
    """None: the run was executed on the host itself."""
