"""The API's request and response models: what each route accepts and the shape of each answer.

Owns the query, path and body models (`extra="forbid"`, so an unknown parameter is a 400) and the answer
models that `/openapi.json` publishes as component schemas. Does not own parsing (`_http.parse_query`,
`parse_json`) or the routes that use them (`_endpoints`, `_artifacts`, `_routes`).

Invariants:
- Query and path models are frozen; field docstrings become the parameter descriptions in OpenAPI.
- Answers never carry secrets: `GrantSummary` is a grant without its token hash.
"""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import AwareDatetime, ConfigDict, Field, model_validator

from mcphost.common.fielddocs import DocumentedModel
from mcphost.gateway.status import UpstreamState
from mcphost.grants import GrantView
from mcphost.hooks import IgnoreReason
from mcphost.models import ID_PATTERN, GrantLayers, Run, RunFailure, RunStatus
from mcphost.protocol import AgentRunContext, JSONObject, JSONValue
from mcphost.protocol.facts import KnowledgeChunk
from mcphost.schedules import ScheduleStatus
from mcphost.stores import (
    MAX_RUN_SEQ,
    ApprovalRecord,
    ApprovalStatus,
    AuditRecord,
    ConversationRecord,
    Decision,
    DeliveryRecord,
    DeliveryStatus,
    StoredEvent,
    TranscriptRecord,
)
from mcphost.stores.knowledge import MAX_SEARCH_LIMIT
from mcphost.stores.state import StateEntry

RESULTS_PAGE_LIMIT = 1000
MAX_KNOWLEDGE_QUERY_CHARS = 2000
"""The same cap as the per-run `knowledge_retrieve` tool's `query`."""
MIME_PATTERN = re.compile(r"^[A-Za-z0-9][\w.+-]{0,99}/[A-Za-z0-9][\w.+-]{0,99}(\s*;.{0,95})?$")


# -- request and response models ---------------------------------------------------------------------


class QueryModel(DocumentedModel):
    """Base of the query and path models; parsed on its own, it is a query that accepts no parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


MAX_WAIT_S = 3600.0
DEFAULT_WAIT_S = 300.0


class IngestQuery(QueryModel):
    stream: bool = False
    """Answer with an SSE stream of the run's results instead of 202."""
    wait: bool = False
    """Block until the run ends and answer 200 with the run and its results (`RunWaited`); when
    `timeout_s` passes first, 202 with `done: false` (the run goes on: post the same event again, with
    its `event_id`, to wait again). Not with `stream`."""
    timeout_s: float | None = Field(default=None, gt=0, le=MAX_WAIT_S)
    """How long `wait=true` blocks at most (default 300 s, at most 3600 s)."""

    @model_validator(mode="after")
    def _one_way_to_answer(self) -> Self:
        if self.wait and self.stream:
            raise ValueError("`wait` and `stream` answer differently: choose one")
        if self.timeout_s is not None and not self.wait:
            raise ValueError("`timeout_s` bounds `wait=true`; pass it with wait=true or not at all")
        return self


class RunsQuery(QueryModel):
    conversation_id: str | None = Field(default=None, pattern=ID_PATTERN)
    status: RunStatus | None = None
    agent: str | None = Field(default=None, pattern=ID_PATTERN)
    """Only runs of this agent (its `[[agents]] id`)."""
    since: AwareDatetime | None = None
    """Only runs created at or after this time: epoch seconds or ISO 8601 with a time zone."""
    until: AwareDatetime | None = None
    """Only runs created before this time: epoch seconds or ISO 8601 with a time zone."""
    limit: int = Field(default=50, ge=1, le=100)
    cursor: str | None = Field(default=None, max_length=500)


class DeliveriesQuery(QueryModel):
    status: DeliveryStatus | None = None
    """`pending`, `delivered` or `dead` (the dead-letter list)."""
    run_id: str | None = Field(default=None, max_length=100)
    limit: int = Field(default=50, ge=1, le=100)
    cursor: str | None = Field(default=None, max_length=500)


class ApprovalsQuery(QueryModel):
    status: ApprovalStatus | None = None
    """`pending`, `approved`, `denied` or `expired` (as of now)."""
    run_id: str | None = Field(default=None, max_length=100)
    limit: int = Field(default=50, ge=1, le=100)
    cursor: str | None = Field(default=None, max_length=500)


class SchedulesQuery(QueryModel):
    limit: int = Field(default=50, ge=1, le=100)
    cursor: str | None = Field(default=None, max_length=500)


class ResultsQuery(QueryModel):
    after: int = Field(default=0, ge=0, le=MAX_RUN_SEQ)
    """Resume after this host sequence (`Last-Event-ID` wins when both are given)."""
    limit: int = Field(default=RESULTS_PAGE_LIMIT, ge=1, le=10_000)
    """Page size of the JSON answer (SSE streams everything)."""


class PageQuery(QueryModel):
    before: str | None = Field(default=None, max_length=500)
    after: str | None = Field(default=None, max_length=500)
    limit: int = Field(default=50, ge=1, le=100)
    thread_id: str | None = Field(default=None, pattern=ID_PATTERN)


class EventsPageQuery(PageQuery):
    event_type: list[str] | None = Field(default=None, max_length=20)
    """Only these event types (repeat the parameter for several)."""


class AuditQuery(QueryModel):
    after: int = Field(default=0, ge=0, le=MAX_RUN_SEQ)
    """Resume after this audit sequence."""
    limit: int = Field(default=100, ge=1, le=1000)


class UploadQuery(QueryModel):
    name: str | None = Field(default=None, max_length=255)
    """File name (default: the multipart part's filename)."""
    mime_type: str | None = Field(default=None, max_length=200, pattern=MIME_PATTERN.pattern)
    """Media type (default: the part's or the request's Content-Type)."""
    conversation_id: str | None = Field(default=None, pattern=ID_PATTERN)
    """The conversation the artifact belongs to: that conversation's runs may read it."""
    expires_in_s: int | None = Field(default=None, ge=1, le=36500 * 86400)
    """Seconds until the artifact expires (reads as not found, and retention deletes it); default
    `[retention] artifacts_days`, else never."""


class KnowledgeSearchQuery(QueryModel):
    q: str = Field(min_length=1, max_length=MAX_KNOWLEDGE_QUERY_CHARS)
    """What to look for (the words of the query; punctuation is ignored)."""
    limit: int = Field(default=10, ge=1, le=MAX_SEARCH_LIMIT)
    """How many chunks to return, best first (the per-run `knowledge_retrieve` tool's `top_k` range)."""


class ToolsQuery(QueryModel):
    connect: bool = False
    """Connect every upstream that is not connected and list its tools first (each bounded by the list
    timeout); without it, the answer is what the host knows now and an idle upstream lists no tools."""


class ConversationsQuery(QueryModel):
    prefix: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._:@/+=-]{1,200}$")
    """Only conversations whose id starts with this."""
    agent: str | None = Field(default=None, pattern=ID_PATTERN)
    """Only conversations whose newest run was of this agent."""
    actor: str | None = Field(default=None, pattern=ID_PATTERN)
    """Only conversations whose newest actor (of the newest event that named one) is this."""
    limit: int = Field(default=50, ge=1, le=100)
    cursor: str | None = Field(default=None, max_length=500)


class ConversationPath(QueryModel):
    conversation_id: str = Field(pattern=ID_PATTERN)


class CancelBody(DocumentedModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)

    reason: str | None = Field(default=None, max_length=500)
    """Why; the run ends `cancelled` with it (its error message), on whichever replica runs it."""


class DecisionBody(DocumentedModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)

    decision: Decision
    """`approve` or `deny`; `answer` for an `interaction` approval (the harness asked the user)."""
    note: str | None = Field(default=None, max_length=2000)
    """Why; stored with the decision and shown to a resumed or waiting run."""
    answer: str | None = Field(default=None, min_length=1, max_length=2000)
    """The person's answer to an `interaction` approval (required with `answer`, refused otherwise);
    stored as the approval's note and given to the continuation run."""

    @model_validator(mode="after")
    def _answer_goes_with_its_decision(self) -> Self:
        if (self.decision == "answer") != (self.answer is not None):
            raise ValueError("`answer` is required with decision 'answer' and allowed with no other")
        if self.answer is not None and self.note is not None:
            raise ValueError("an answer is its own note: send `answer` without `note`")
        return self


class _Answer(DocumentedModel):
    model_config = ConfigDict(defer_build=True)


class Admitted(_Answer):
    run_id: str
    event_id: str
    status: RunStatus
    created: bool
    """False when the event_id was seen before: this is the existing run."""


class RunWaited(_Answer):
    """The answer of `POST /v1/events?wait=true`: the run as it ended (200), or as it stands when the
    wait timed out (202, `done: false`; the run goes on)."""

    run_id: str
    event_id: str
    status: RunStatus
    created: bool
    """False when the event_id was seen before: this is the existing run."""
    done: bool
    """The run has ended; false when `timeout_s` passed first."""
    run: Run
    results: list[JSONObject]
    """The run's results, each with its host sequence as `seq`, without `message.delta` (the
    `message.completed` that follows holds the whole message); at most 1000."""
    results_complete: bool
    """Every such result is in `results`; else continue with `GET /v1/runs/{run_id}/results?after=
    <next_after>`."""
    next_after: int
    """The host sequence of the last result read."""
    message: JSONObject | None
    """The run's final assistant message (of `run.completed`, else the last `message.completed`)."""


class StreamEnd(_Answer):
    """The `event: end` of a result stream: the run's final status."""

    run_id: str
    status: RunStatus
    error: RunFailure | None = None
    """Why the run did not complete (absent when it did)."""


class HookIgnored(_Answer):
    """A verified webhook that makes no run (`POST /v1/hooks/{source}`, 200)."""

    ignored: Literal[True] = True
    reason: IgnoreReason
    """`ping`: GitHub's hello; `event_not_selected`: the event is not in `[hooks.<source>] events`."""
    source_event_type: str | None
    """The sender's name for the event (`X-GitHub-Event`, a payload's `type`)."""


class GrantSummary(GrantView):
    """What a run may touch (PROTOCOL §6), without its token hash: the grant's view plus the run's ids."""

    runner_id: str | None
    binding_id: str | None
    conversation_id: str | None
    thread_id: str | None
    actor_id: str | None
    deadline_at: float
    revoked: bool
    active: bool
    layers: GrantLayers | None = None
    """What the manifest and agent layers offered (the event layer is the scope ids above); None for
    inspection grants, which have no layers."""


class Attempt(_Answer):
    """One run of the event, in the event's attempt chain."""

    run_id: str
    attempt: int
    status: RunStatus
    error: RunFailure | None
    created_at: float
    ended_at: float | None


class RunView(_Answer):
    run: Run
    grant: GrantSummary
    mcp_url: str
    """The run's MCP endpoint (it answers only while the grant is active, with the run token)."""
    attempts: list[Attempt]
    """Every run of this run's event, first attempt first: one, unless a host restart failed an
    attempt (`host.restarted`) and the event was submitted again."""


class RunRecords(_Answer):
    """What a run left besides its results and audit: the context it was started with (without its token),
    its event-log entries and its transcript rows, oldest first (at most 1000 of each)."""

    run_id: str
    context: AgentRunContext | None
    """None while the run is queued, and for inspection grants (they have no context)."""
    events: list[StoredEvent]
    transcript: list[TranscriptRecord]


class AgentInfo(_Answer):
    """A configured agent as a client picks it: which events it takes and what runs it (no prompt, no
    runner config: those may hold what only the operator should read)."""

    id: str
    runner: str
    event_types: list[str]
    match: dict[str, str | list[str]]
    concurrency: str
    timeout_s: float | None
    hooks: list[str]
    """The `[hooks.<source>]` senders whose events come to this agent: those that name it, and those that
    name no agent and send an event type it takes (its `match` may still turn one away)."""
    tools: list[str]
    """Its `resources.tools`: globs of the upstream host tools (`<server>__<tool>`) it may call."""
    knowledge_bases: list[str]
    """Its `resources.knowledge_bases`."""


class AgentsView(_Answer):
    agents: list[AgentInfo]


class RunsPage(_Answer):
    items: list[Run]
    next_cursor: str | None
    has_more: bool


class DeliveriesPage(_Answer):
    items: list[DeliveryRecord]
    next_cursor: str | None
    has_more: bool


class ApprovalsPage(_Answer):
    items: list[ApprovalRecord]
    next_cursor: str | None
    has_more: bool


class ConversationsPage(_Answer):
    items: list[ConversationRecord]
    """Newest activity (newest run) first."""
    next_cursor: str | None
    has_more: bool


class ResultsPage(_Answer):
    run_id: str
    status: RunStatus
    results: list[JSONObject]
    """Each result as persisted, with its host sequence as `seq`."""
    next_after: int
    """Pass as `after` to continue."""
    complete: bool
    """The run has ended and nothing follows."""


class CancelAnswer(_Answer):
    run_id: str
    status: RunStatus
    cancel_requested: bool


class TranscriptPage(_Answer):
    items: list[TranscriptRecord]
    next_cursor: str | None
    prev_cursor: str | None
    has_more: bool


class StatePath(QueryModel):
    scope: str
    key: str


class StateScopePath(QueryModel):
    scope: str


class StateOwnerQuery(QueryModel):
    """The ids that make up a state scope's owner; each scope uses its own (`STATE_OWNER_IDS`)."""

    runner_id: str | None = Field(default=None, max_length=200)
    """conversation, actor, subject, runner, workspace: the runner, e.g. `plugin:mcphost/echo/default`."""
    binding_id: str | None = Field(default=None, max_length=200)
    """conversation, actor, subject, binding: the agent (binding) id."""
    conversation_id: str | None = Field(default=None, max_length=200)
    """conversation."""
    thread_id: str | None = Field(default=None, max_length=200)
    """conversation (optional: none is the conversation's main line)."""
    actor_id: str | None = Field(default=None, max_length=200)
    """actor."""
    subject_type: str | None = Field(default=None, max_length=200)
    """subject."""
    subject_id: str | None = Field(default=None, max_length=200)
    """subject."""
    workspace_id: str | None = Field(default=None, max_length=200)
    """workspace."""


class StateListQuery(StateOwnerQuery):
    prefix: str | None = Field(default=None, max_length=200)
    """Only keys starting with this."""
    limit: int = Field(default=50, ge=1, le=100)
    cursor: str | None = Field(default=None, max_length=500)


class StateValue(_Answer):
    """One state value of an owner, as a run of that owner reads it (`state_get`)."""

    scope: str
    key: str
    owner: list[str]
    """The owner tuple the ids made, as stored."""
    value: JSONValue
    """None when `unservable`."""
    size: int
    """Bytes of the value's compact JSON."""
    updated_at: float
    unservable: bool
    """The stored value nests too deep to be served: delete or overwrite it."""


class StatePage(_Answer):
    """A page of an owner's state values in key order (`state_list`, values always inline)."""

    scope: str
    owner: list[str]
    items: list[StateEntry]
    next_cursor: str | None
    has_more: bool


class StateDeleted(_Answer):
    scope: str
    key: str
    owner: list[str]
    """The owner tuple the ids made, as stored."""
    deleted: bool


class EventsPage(_Answer):
    items: list[StoredEvent]
    next_cursor: str | None
    prev_cursor: str | None
    has_more: bool


class AuditPage(_Answer):
    items: list[AuditRecord]
    next_after: int
    has_more: bool


class RunnerInfo(_Answer):
    id: str
    name: str
    plugin: str


class RejectedInfo(_Answer):
    id: str | None
    plugin: str
    reason: str


class PluginInfo(_Answer):
    name: str
    command: list[str]
    state: str
    pid: int | None
    restarts: int
    last_error: str | None
    runners: list[str]


class RunnersView(_Answer):
    runners: list[RunnerInfo]
    rejected: list[RejectedInfo]
    plugins: list[PluginInfo]


class Health(_Answer):
    status: Literal["ok"]
    version: str
    host_id: str
    active_runs: int


class ErrorDetail(_Answer):
    code: str
    message: str
    details: JSONObject


class ErrorBody(_Answer):
    error: ErrorDetail


class SchedulesPage(_Answer):
    items: list[ScheduleStatus]
    """The config file's schedules first, then those created through the API, each by id."""
    next_cursor: str | None
    has_more: bool


class ScheduleDeleted(_Answer):
    schedule_id: str
    deleted: bool


class KnowledgeBaseView(_Answer):
    """A configured knowledge base, what is stored for it and which agents may search it."""

    kb_id: str
    name: str
    description: str
    paths: list[str]
    """Its configured sources (files, folders, globs), as written in `[knowledge.<kb_id>]`."""
    documents: int
    chunks: int
    bytes: int
    last_ingested_at: float | None
    """When a document of it was last (re)ingested; None when it never was."""
    ready: bool
    """Whether it has documents to search (`mcphost kb ingest <kb_id>` makes it ready)."""
    agents: list[str]
    """The agents whose `resources.knowledge_bases` name it (a runner's manifest may still cut it)."""


class KnowledgeView(_Answer):
    knowledge_bases: list[KnowledgeBaseView]


class KnowledgeSearchAnswer(_Answer):
    kb_id: str
    query: str
    hits: list[KnowledgeChunk]
    """Best first, as the per-run `knowledge_retrieve` tool answers."""


class ToolParam(_Answer):
    """One top-level property of a tool's input schema."""

    name: str
    type: str
    """The JSON Schema type (`a|b` for several; empty when the schema names none)."""
    required: bool


class UpstreamToolInfo(_Answer):
    name: str
    """The host name an agent calls, `<server>__<tool>`."""
    tool: str
    """The upstream's own name."""
    description: str | None
    params: list[ToolParam]
    """The input schema's top-level properties (a summary, not the schema)."""
    agents: list[str]
    """The agents whose `resources.tools` globs allow it (a runner's manifest may still cut it)."""


class UpstreamInfo(_Answer):
    """One `[tools.<server>]` upstream MCP server: how it is reached (never its headers or env values)."""

    server: str
    transport: str
    """`stdio` or `http`."""
    target: str
    """The command without its arguments, or the URL without credentials, query or fragment."""
    state: UpstreamState
    """`idle` (nothing needed it yet), `connecting`, `ready` (connected), `backoff` (the last attempt
    failed or the connection was lost; see `last_error`) or `closed`."""
    last_error: str | None
    connects: int
    """Successful connections since the host started."""
    tools: list[UpstreamToolInfo]
    """Its tools as last listed (none before it first connected)."""
    agents: list[str]
    """The agents with a `resources.tools` glob that can match a tool of this server."""


class ToolsView(_Answer):
    servers: list[UpstreamInfo]
