"""The route table and the OpenAPI document: `routes()` and `openapi()` read the same `_ENDPOINTS`.

Owns which handler serves which method and path, the one role each route requires (declared in its
row: `role`, and `own_runs` / `public_as` where they apply), and the OpenAPI 3.1 document built from that
table and the pydantic models (the role as each operation's `x-mcphost-role`). Does not own what a handler
does (`_endpoints`, `_artifacts`), authentication and the role check (`_middleware` finds the key,
`_access` checks the role) or the MCP endpoint (`app.py` mounts the facts server's route).

Invariants:
- `routes()` and `openapi()` both read `_ENDPOINTS`, so the document cannot drift from the routes served.
- Every row names its role (a keyword without default: a row without one does not import), and every
  route `routes()` returns checks it before its handler runs and carries it (`guard.declared_access`).
- The document is built once per process, on the first request to `/openapi.json` or `/docs`; `/docs`
  renders that same document (`_docs`), so the page cannot drift from it either.
- Every operation has a unique `operationId` (its handler's name) and one tag (the first path segment
  under `/v1`, `meta` outside it), so client generators produce usable names.

Size: past 600 lines because the route table is one tuple, a row per route with its role and answer
models, so that every route the host serves, and who may call it, is read in one place.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from mcphost import __version__
from mcphost.api._access import check_access
from mcphost.api._approvals import decide_approval, list_approvals, show_approval
from mcphost.api._artifacts import artifact_content, artifact_metadata, upload_artifact
from mcphost.api._channel_status import ChannelsView, list_channels
from mcphost.api._channels import receive_channel
from mcphost.api._conversations import (
    conversation_events,
    conversation_transcript,
    delete_conversation,
    list_conversations,
)
from mcphost.api._deliveries import list_deliveries, redeliver
from mcphost.api._docs import DOCS_HEADERS, render_docs
from mcphost.api._endpoints import (
    cancel_run,
    delete_state,
    healthz,
    ingest_event,
    list_agents,
    list_runners,
    list_runs,
    list_state,
    metrics,
    run_audit,
    run_records,
    run_results,
    show_run,
    show_state,
)
from mcphost.api._explain import explain_event
from mcphost.api._hooks import receive_hook
from mcphost.api._http import parse_query
from mcphost.api._models import (
    Admitted,
    AgentsView,
    ApprovalsPage,
    ApprovalsQuery,
    AuditPage,
    AuditQuery,
    CancelAnswer,
    CancelBody,
    ConversationsPage,
    ConversationsQuery,
    DecisionBody,
    DeliveriesPage,
    DeliveriesQuery,
    ErrorBody,
    EventsPage,
    EventsPageQuery,
    Health,
    HookIgnored,
    IngestQuery,
    KnowledgeSearchAnswer,
    KnowledgeSearchQuery,
    KnowledgeView,
    PageQuery,
    QueryModel,
    ResultsPage,
    ResultsQuery,
    RunnersView,
    RunRecords,
    RunsPage,
    RunsQuery,
    RunView,
    RunWaited,
    ScheduleDeleted,
    SchedulesPage,
    SchedulesQuery,
    StateDeleted,
    StateListQuery,
    StateOwnerQuery,
    StatePage,
    StateValue,
    StreamEnd,
    ToolsQuery,
    ToolsView,
    TranscriptPage,
    UploadQuery,
)
from mcphost.api._resources import list_knowledge, list_tools, search_knowledge
from mcphost.api._runtime import runtime_routes
from mcphost.api._runtimes import (
    RunRuntimeView,
    RuntimesView,
    RuntimeView,
    disable_runtime,
    drain_runtime,
    enable_runtime,
    list_runtimes,
    run_runtime,
)
from mcphost.api._schedules import (
    create_schedule,
    delete_schedule,
    list_schedules,
    pause_schedule,
    resume_schedule,
    show_schedule,
)
from mcphost.api._usage import RunUsage, UsageAnswer, UsageQuery, run_usage, usage
from mcphost.common.timestamps import schemas_with_iso
from mcphost.config import PublicEndpoint
from mcphost.explain import ExplainRequest, Explanation
from mcphost.guard import Access, declare_access
from mcphost.models import AgentEventEnvelope
from mcphost.protocol import RESULT_TYPES, ArtifactRef, JSONObject
from mcphost.protocol.results import (
    ActionRequested,
    ArtifactCreated,
    InteractionRequested,
    MessageCompleted,
    MessageDelta,
    RunCompleted,
    RunFailed,
    StateUpdated,
    ToolCallCompleted,
    ToolCallStarted,
)
from mcphost.schedules import ScheduleStatus
from mcphost.stores import ApprovalRecord, ArtifactRecord, ConversationDeleted, DeliveryRecord
from mcphost.timetable import ScheduleSpec

# -- routes and OpenAPI ------------------------------------------------------------------------------

_BINARY: JSONObject = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
_RESULT_MODELS: tuple[type[BaseModel], ...] = (
    MessageDelta,
    MessageCompleted,
    ToolCallStarted,
    ToolCallCompleted,
    ArtifactCreated,
    StateUpdated,
    ActionRequested,
    InteractionRequested,
    RunCompleted,
    RunFailed,
)
"""Every result type (`mcphost.protocol.AgentRunResult`): what a stream's result events carry."""


def _sse_event(name: JSONObject, data: JSONObject, description: str, *, with_id: bool = False) -> JSONObject:
    properties: JSONObject = {
        "event": name,
        "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": data},
    }
    if with_id:
        properties["id"] = {"type": "string", "pattern": "^[0-9]+$", "description": "The result's `seq`."}
    return {
        "type": "object",
        "description": description,
        "properties": properties,
        "required": ["event", "data", *(["id"] if with_id else [])],
    }


def _ref(name: str) -> JSONObject:
    return {"$ref": f"#/components/schemas/{name}"}


_SSE: JSONObject = {
    "text/event-stream": {
        # OpenAPI 3.1 reads an event stream's `schema` as the schema of one event (3.2's `itemSchema`);
        # `data` is JSON text, typed by `contentSchema`.
        "schema": {
            "description": "One SSE event: `event: run` first (ingest only), then one event per result named "
            "by its type (`event: message.delta`, `id: <seq>`), then `event: end`, or `event: error` when "
            "the stream cannot go on. Resume with `Last-Event-ID`.",
            "oneOf": [
                _sse_event({"const": "run"}, _ref("Admitted"), "The run the event was admitted as."),
                _sse_event(
                    {"enum": sorted(RESULT_TYPES)},
                    {
                        "allOf": [
                            {"oneOf": [_ref(m.__name__) for m in _RESULT_MODELS]},
                            {"properties": {"seq": {"type": "integer", "minimum": 1}}, "required": ["seq"]},
                        ]
                    },
                    "A result, named by its type, with its host sequence as `seq` and `id`.",
                    with_id=True,
                ),
                _sse_event({"const": "end"}, _ref("StreamEnd"), "The run ended; nothing follows."),
                _sse_event({"const": "error"}, _ref("ErrorBody"), "The stream cannot go on; resume later."),
            ],
        },
    }
}
_TEXT: JSONObject = {"text/plain": {"schema": {"type": "string"}}}


_HTML: JSONObject = {"text/html": {"schema": {"type": "string"}}}


@functools.cache
def _document() -> JSONObject:
    return openapi()


@functools.cache
def _page() -> str:
    return render_docs(_document())


async def openapi_document(request: Request) -> Response:
    parse_query(request, QueryModel)
    return JSONResponse(_document())


async def docs_page(request: Request) -> Response:
    parse_query(request, QueryModel)
    return HTMLResponse(_page(), headers=DOCS_HEADERS)


@dataclass(frozen=True)
class _Endpoint:
    """One route and its OpenAPI operation: `routes()` and `openapi()` read the same table."""

    method: str
    path: str
    handler: Callable[[Request], Awaitable[Response]]
    summary: str
    ok: int
    answer: str | JSONObject
    """A component schema name (JSON), or the content map itself."""
    errors: tuple[int, ...] = ()
    query: type[BaseModel] | None = None
    body: str | JSONObject | None = None
    headers: tuple[str, ...] = ()
    role: Access = field(kw_only=True)
    """What the route requires (`guard.Access`): a key of this role or one that reaches it
    (`guard.ROLE_REACHES`), or `public` (no key) or `signed` (the sender's signature,
    `/v1/hooks/{source}`). Every route names one; `_access.check_access` enforces it."""
    own_runs: bool = False
    """A `sender` key may use it too, on the runs its events created (others: 404; lists: its own)."""
    public_as: PublicEndpoint | None = None
    """The `[host] public` entry that lets it answer without a key."""
    partial: bool = False
    """Also answers 206 (a byte range) with the same content."""
    stream: bool = False
    """Also answers 200 with `text/event-stream` (an SSE stream of the run's results)."""
    ignored: str | None = None
    """Also answers 200 with this component: a request taken and deliberately not acted on."""
    waited: str | None = None
    """With `wait=true`, answers 200 with this component (the run ended), or 202 with it (the wait timed
    out)."""

    @property
    def tag(self) -> str:
        """The OpenAPI tag: the first path segment under `/v1` (`runs`, `artifacts`, ...), else `meta`."""
        return self.path.split("/")[2] if self.path.startswith("/v1/") else "meta"


_ENDPOINTS: tuple[_Endpoint, ...] = (
    _Endpoint("POST", "/v1/events", ingest_event, "Ingest an event; with stream=true, the run's results as SSE",
              202, "Admitted", (400, 404, 409, 413, 503), IngestQuery, "AgentEventEnvelope", stream=True, role="sender",
              waited="RunWaited"),
    _Endpoint("POST", "/v1/hooks/{source}", receive_hook,
              "A signed webhook from a [hooks.<source>] sender, admitted as an event (authenticated by its "
              "signature: Standard Webhooks headers, X-Hub-Signature-256 or a bearer secret; not the API key)",
              202, "Admitted", (400, 401, 404, 409, 413, 503), body={"application/json": {"schema": {"type": "object"}}},
              headers=("webhook-id", "webhook-timestamp", "webhook-signature", "X-Hub-Signature-256",
                       "X-GitHub-Delivery", "X-GitHub-Event", "Idempotency-Key"), role="signed",
              ignored="HookIgnored"),
    _Endpoint("POST", "/v1/channels/{channel_id}", receive_channel,
              "A Slack, Telegram or Discord request to a [channels.<id>] bot, admitted as an event (authenticated "
              "by the platform's signature, not the API key); answered 200 with the platform's acknowledgement",
              200, {"application/json": {"schema": {"type": "object"}}}, (400, 401, 404, 413, 503),
              body={"application/json": {"schema": {"type": "object"}}, "application/x-www-form-urlencoded": {"schema": {"type": "object"}}},
              headers=("X-Slack-Signature", "X-Slack-Request-Timestamp", "X-Slack-Retry-Num",
                       "X-Telegram-Bot-Api-Secret-Token", "X-Signature-Ed25519", "X-Signature-Timestamp"),
              role="signed"),
    _Endpoint("GET", "/v1/channels", list_channels,
              "The configured chat channels: platform, event types and agents, and from the database their "
              "newest admitted and ignored event with counts, and their replies' newest delivery, pending "
              "and dead counts and last error (never a credential)", 200, "ChannelsView", (400,), role="reader"),
    _Endpoint("GET", "/v1/runs", list_runs, "Runs, newest first", 200, "RunsPage", (400,), RunsQuery, role="reader", own_runs=True),
    _Endpoint("GET", "/v1/runs/{run_id}", show_run, "A run and its grant (never its token)", 200, "RunView", (404,), role="reader", own_runs=True),
    _Endpoint("GET", "/v1/runs/{run_id}/results", run_results,
              "The run's results: SSE (resumable), or JSON with Accept: application/json",
              200, "ResultsPage", (400, 404), ResultsQuery, headers=("Last-Event-ID",), stream=True, role="reader", own_runs=True),
    _Endpoint("POST", "/v1/runs/{run_id}/cancel", cancel_run, "Cancel a run (an inspection grant is revoked)",
              202, "CancelAnswer", (400, 404, 409, 413), body="CancelBody", role="operator", own_runs=True),
    _Endpoint("GET", "/v1/runs/{run_id}/audit", run_audit, "The run's MCP call audit", 200, "AuditPage",
              (400, 404), AuditQuery, role="reader"),
    _Endpoint("GET", "/v1/runs/{run_id}/runtime", run_runtime,
              "Where the run ran: the runtime of its latest claim (null: on the host itself), the fence and "
              "attempt, when it was claimed and its first result arrived, its lease renewals, the events of "
              "every claim (claimed, requeued, lost, output, ended) and the artifact of its runner's output",
              200, "RunRuntimeView", (400, 404), role="reader"),
    _Endpoint("GET", "/v1/runs/{run_id}/records", run_records,
              "What the run left: the context it was started with (without its token), its event-log entries "
              "and transcript rows", 200, "RunRecords", (400, 404), role="reader"),
    _Endpoint("GET", "/v1/runs/{run_id}/usage", run_usage,
              "The run's host model calls, a row per attempt (model, tokens, cost, latency, time to first "
              "token, status, fallback attempt), oldest first", 200, "RunUsage", (400, 404), role="reader"),
    _Endpoint("GET", "/v1/conversations", list_conversations,
              "Conversations, newest activity (newest run) first; by id prefix, agent or actor", 200,
              "ConversationsPage", (400,), ConversationsQuery, role="reader"),
    _Endpoint("DELETE", "/v1/conversations/{conversation_id}", delete_conversation,
              "Delete a conversation: its runs (results, audit, recordings), event log, transcript, "
              "conversation state, approvals, deliveries and artifacts with their blobs; 409 (nothing "
              "deleted) while a run of it is queued or running or an approval of it still decides one",
              200, "ConversationDeleted", (400, 404, 409), role="operator"),
    _Endpoint("GET", "/v1/conversations/{conversation_id}/transcript", conversation_transcript,
              "A page of a conversation's transcript", 200, "TranscriptPage", (400,), PageQuery, role="reader"),
    _Endpoint("GET", "/v1/conversations/{conversation_id}/events", conversation_events,
              "A page of a conversation's event log", 200, "EventsPage", (400,), EventsPageQuery, role="reader"),
    _Endpoint("GET", "/v1/state/{scope}", list_state,
              "A page of one owner's state values in key order (the query names the owner's ids, as the "
              "scope's owner is made for a run)", 200, "StatePage", (400,), StateListQuery, role="reader"),
    _Endpoint("GET", "/v1/state/{scope}/{key}", show_state,
              "One state value (the query names the owner's ids); a value nested too deep to be served is "
              "`unservable` with no value", 200, "StateValue", (400, 404), StateOwnerQuery, role="reader"),
    _Endpoint("DELETE", "/v1/state/{scope}/{key}", delete_state,
              "Delete one state value (also one too deep to be served); the query names the owner's ids",
              200, "StateDeleted", (400, 404), StateOwnerQuery, role="admin"),
    _Endpoint("GET", "/v1/usage", usage, "Host model calls totalled by agent, actor, model, conversation or day",
              200, "UsageAnswer", (400,), UsageQuery, role="reader"),
    _Endpoint("GET", "/v1/schedules", list_schedules,
              "A page of schedules (config ones first, then the API's, each by id) with their next and newest "
              "fire times", 200, "SchedulesPage", (400,), SchedulesQuery, role="reader"),
    _Endpoint("POST", "/v1/schedules", create_schedule, "Create a schedule (stored; fires on every replica once)",
              201, "ScheduleStatus", (400, 404, 409, 413), body="ScheduleSpec", role="operator"),
    _Endpoint("GET", "/v1/schedules/{schedule_id}", show_schedule, "One schedule", 200, "ScheduleStatus", (400, 404), role="reader"),
    _Endpoint("DELETE", "/v1/schedules/{schedule_id}", delete_schedule,
              "Delete a schedule created through the API (config ones are read-only)", 200, "ScheduleDeleted",
              (400, 404, 409), role="operator"),
    _Endpoint("POST", "/v1/schedules/{schedule_id}/pause", pause_schedule, "Pause a schedule created through the API",
              200, "ScheduleStatus", (400, 404, 409), role="operator"),
    _Endpoint("POST", "/v1/schedules/{schedule_id}/resume", resume_schedule,
              "Resume a paused schedule created through the API", 200, "ScheduleStatus", (400, 404, 409), role="operator"),
    _Endpoint("GET", "/v1/deliveries", list_deliveries,
              "Outbound webhook deliveries, newest first (status=dead: the dead-letter list)", 200,
              "DeliveriesPage", (400,), DeliveriesQuery, role="reader"),
    _Endpoint("POST", "/v1/deliveries/{delivery_id}/redeliver", redeliver,
              "Send a delivery again (same webhook-id), due now", 202, "DeliveryRecord", (400, 404), role="operator"),
    _Endpoint("GET", "/v1/approvals", list_approvals,
              "Approvals, newest first (status=pending: what waits for a decision)", 200, "ApprovalsPage", (400,),
              ApprovalsQuery, role="reader"),
    _Endpoint("GET", "/v1/approvals/{approval_id}", show_approval, "One approval", 200, "ApprovalRecord", (400, 404), role="reader"),
    _Endpoint("POST", "/v1/approvals/{approval_id}", decide_approval,
              "Approve or deny (idempotent; the other decision, or approving an expired one, is 409)", 200,
              "ApprovalRecord", (400, 404, 409, 413), body="DecisionBody", role="operator"),
    _Endpoint("POST", "/v1/explain", explain_event,
              "Dry run: the agent an event would bind to (and why the others do not), its grant layer by layer, "
              "and for each named tool, resource or state scope 'allowed' or the layer that removed it and the "
              "key that would add it. Nothing is stored or run", 200, "Explanation", (400, 404, 413),
              body="ExplainRequest", role="operator"),
    _Endpoint("GET", "/v1/agents", list_agents,
              "The configured agents: the events and hooks that bind to each, its runner and the tools and "
              "knowledge bases its config grants (no prompt or runner config)", 200, "AgentsView", (400,), role="reader"),
    _Endpoint("GET", "/v1/knowledge", list_knowledge,
              "Every configured knowledge base: its sources, stored documents and chunks, when it was last "
              "ingested, whether it is ready, and the agents whose config names it", 200, "KnowledgeView",
              (400,), role="reader"),
    _Endpoint("GET", "/v1/knowledge/{kb_id}/search", search_knowledge,
              "Search a knowledge base as the per-run knowledge_retrieve tool does (any configured one: the "
              "API key stands in for a run grant); 404 when it is unknown or not ingested yet", 200,
              "KnowledgeSearchAnswer", (400, 404), KnowledgeSearchQuery, role="reader"),
    _Endpoint("GET", "/v1/tools", list_tools,
              "The upstream tool servers ([tools.<server>]): transport and target (never headers or env), "
              "state and last error, their tools with an input summary, and the agents whose globs allow "
              "each", 200, "ToolsView", (400,), ToolsQuery, role="reader"),
    _Endpoint("GET", "/v1/runners", list_runners, "Runners, rejected manifests and plugin processes", 200,
              "RunnersView", role="reader"),
    _Endpoint("POST", "/v1/artifacts", upload_artifact,
              "Upload an artifact (raw body, or multipart/form-data with a 'file' part) for input.attachments",
              201, "ArtifactRef", (400, 413), UploadQuery,
              {**_BINARY, "multipart/form-data": {"schema": {"type": "object", "properties": {"file": {"type": "string", "format": "binary"}}}}}, role="sender"),
    _Endpoint("GET", "/v1/artifacts/{artifact_id}", artifact_metadata, "An artifact's metadata", 200,
              "ArtifactRecord", (404,), role="reader"),
    _Endpoint("GET", "/v1/artifacts/{artifact_id}/content", artifact_content,
              "An artifact's bytes; a single byte range answers 206", 200, _BINARY, (404, 416), headers=("Range",),
              partial=True, role="reader"),
    _Endpoint("GET", "/v1/runtimes", list_runtimes, "The registered runtimes: state, liveness, slots in use and the "
              "runs they hold, labels, capabilities", 200, "RuntimesView", (400,), role="operator"),
    _Endpoint("POST", "/v1/runtimes/{runtime}/drain", drain_runtime, "Drain a runtime: it finishes its runs and "
              "claims no new ones", 200, "RuntimeView", (400, 404), role="operator"),
    _Endpoint("POST", "/v1/runtimes/{runtime}/disable", disable_runtime, "Disable a runtime: its token is refused "
              "and the runs it holds go back to the queue when their leases lapse", 200, "RuntimeView", (400, 404),
              role="operator"),
    _Endpoint("POST", "/v1/runtimes/{runtime}/enable", enable_runtime, "Let a drained or disabled runtime claim "
              "runs again", 200, "RuntimeView", (400, 404), role="operator"),
    _Endpoint("GET", "/healthz", healthz, "Liveness (503 while draining)", 200, "Health", (503,), role="public"),
    _Endpoint("GET", "/metrics", metrics, "Prometheus text metrics", 200, _TEXT, role="reader", public_as="metrics"),
    _Endpoint("GET", "/openapi.json", openapi_document, "This document", 200, {"application/json": {}}, role="reader", public_as="openapi"),
    _Endpoint("GET", "/docs", docs_page, "This document as a web page (self-contained: no scripts, no CDN)", 200,
              _HTML, role="reader", public_as="docs"),
)  # fmt: skip


TAGS: dict[str, str] = {
    "events": "Events in: each admitted event is one agent run.",
    "hooks": "Signed webhooks from configured senders, admitted as events.",
    "channels": "Slack, Telegram and Discord bots: signed platform requests, admitted as events; each "
    "channel's state.",
    "runs": "Runs, their results (JSON pages or a resumable SSE stream), cancellation and MCP call audit.",
    "conversations": "Conversations by newest activity, each one's transcript and event log, deleting one.",
    "state": "State values kept for runs: read an owner's values, delete one.",
    "schedules": "Schedules that fire events.",
    "deliveries": "Outbound webhook deliveries.",
    "approvals": "Human approvals of requested actions: list, read, decide.",
    "explain": "Dry runs: the binding and grant an event would get, and why a target is (not) allowed.",
    "usage": "Host model calls totalled: tokens and cost by agent, actor, model, conversation or day.",
    "agents": "The configured agents an event can bind to.",
    "knowledge": "The knowledge bases agents may search, and an operator's search of them.",
    "tools": "The upstream tool servers the host exposes to agents, with their state.",
    "runners": "The runners the plugins registered, and the plugin processes.",
    "artifacts": "Files: upload, metadata, downloads with byte ranges.",
    "runtimes": "Registered runtimes (worker machines that claim remote runs): list, drain, disable, enable.",
    "meta": "Liveness, metrics and this document (no API key).",
}
"""Every tag an operation has, in the order a reader meets them."""


def _guarded(endpoint: _Endpoint) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint's handler behind the check of its role."""

    async def guarded(request: Request) -> Response:
        check_access(request, endpoint.role, own_runs=endpoint.own_runs, public_as=endpoint.public_as)
        return await endpoint.handler(request)

    return guarded


def routes() -> list[BaseRoute]:
    """Every route of the API, each behind its role and marked with it (`guard.declare_access`); the MCP
    endpoint is mounted by `app.py`."""
    return [
        *(
            declare_access(Route(e.path, _guarded(e), methods=[e.method], name=e.handler.__name__), e.role)
            for e in _ENDPOINTS
        ),
        *runtime_routes(),
    ]


ROLES_DESCRIPTION = (
    "A bearer API key ([[api_keys]] or [host] api_key). Each operation's x-mcphost-role names the role it "
    "requires: an admin key reaches every operation; an operator key those of operator and reader; a "
    "reader key those of reader; a sender key those of sender, and those marked x-mcphost-own-runs for "
    "the runs its events created (another run is 404). A key that does not reach an operation gets 403 "
    "naming the role. 'public' needs no key; 'signed' is authenticated by the sender's signature; "
    "x-mcphost-public names the [host] public entry that opens an operation to requests without a key."
)


def _content(what: str | JSONObject) -> JSONObject:
    return (
        {"application/json": {"schema": {"$ref": f"#/components/schemas/{what}"}}}
        if isinstance(what, str)
        else what
    )


def _parameters(endpoint: _Endpoint) -> list[JSONObject]:
    out: list[JSONObject] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"{(\w+)}", endpoint.path)
    ]
    if endpoint.query is not None:
        # Referenced types (RunStatus) are among the component schemas `openapi()` publishes.
        schema = endpoint.query.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, prop in schema.get("properties", {}).items():
            param: JSONObject = {
                "name": name,
                "in": "query",
                "required": name in schema.get("required", []),
                "schema": {k: v for k, v in prop.items() if k not in ("title", "description")},
            }
            if "description" in prop:
                param["description"] = prop["description"]
            out.append(param)
    out += [
        {"name": h, "in": "header", "required": False, "schema": {"type": "string"}} for h in endpoint.headers
    ]
    return out


def _operation(endpoint: _Endpoint) -> JSONObject:
    ok = _content(endpoint.answer)
    if endpoint.stream and endpoint.ok == 200:  # one status, two media types (Accept chooses)
        ok = {**_SSE, **ok}
    responses: JSONObject = {str(endpoint.ok): {"description": "success", "content": ok}}
    if endpoint.stream and endpoint.ok != 200:  # a query parameter turns the answer into a stream
        responses["200"] = {
            "description": "the run's results as they are stored (`stream=true`)",
            "content": _SSE,
        }
    if endpoint.waited is not None:  # `wait=true`: the run as it ended (200), or as it stands (202)
        waited = _content(endpoint.waited)
        responses["200"] = {
            "description": "the run's results as SSE (`stream=true`), or the ended run (`wait=true`)",
            "content": {**_SSE, **waited},
        }
        either = {"oneOf": [ok["application/json"]["schema"], waited["application/json"]["schema"]]}
        responses[str(endpoint.ok)]["content"] = {"application/json": {"schema": either}}
    if endpoint.ignored is not None:
        responses["200"] = {
            "description": "taken, no run (a ping, an event not selected)",
            "content": _content(endpoint.ignored),
        }
    if endpoint.partial:
        responses["206"] = {"description": "the requested byte range", "content": ok}
    keyed = endpoint.role not in ("public", "signed")
    for status in sorted({*endpoint.errors, *((401, 403) if keyed else ())}):
        responses[str(status)] = {"description": "error", "content": _content("ErrorBody")}
    op: JSONObject = {
        "operationId": endpoint.handler.__name__,
        "tags": [endpoint.tag],
        "summary": endpoint.summary,
        "responses": dict(sorted(responses.items())),
    }
    if params := _parameters(endpoint):
        op["parameters"] = params
    if endpoint.body is not None:
        op["requestBody"] = {"required": endpoint.body != "CancelBody", "content": _content(endpoint.body)}
    if not keyed:
        op["security"] = []
    op["x-mcphost-role"] = endpoint.role
    if endpoint.own_runs:
        op["x-mcphost-own-runs"] = True
    if endpoint.public_as is not None:
        op["x-mcphost-public"] = endpoint.public_as
    return op


_SCHEMA_MODELS: tuple[type[BaseModel], ...] = (
    ArtifactRef,
    ArtifactRecord,
    Admitted,
    RunWaited,
    StreamEnd,
    HookIgnored,
    RunView,
    RunRecords,
    RunsPage,
    ResultsPage,
    CancelAnswer,
    TranscriptPage,
    EventsPage,
    ConversationsPage,
    ConversationDeleted,
    AuditPage,
    StateDeleted,
    StateValue,
    StatePage,
    SchedulesPage,
    ScheduleStatus,
    ScheduleDeleted,
    RunnersView,
    AgentsView,
    ChannelsView,
    KnowledgeView,
    KnowledgeSearchAnswer,
    ToolsView,
    Health,
    ErrorBody,
    DeliveriesPage,
    DeliveryRecord,
    ApprovalsPage,
    ApprovalRecord,
    Explanation,
    *_RESULT_MODELS,
    RuntimesView,
    RuntimeView,
    RunRuntimeView,
    UsageAnswer,
    RunUsage,
)


def openapi() -> JSONObject:
    """The OpenAPI 3.1 document of the API; component schemas come from the pydantic models."""
    modes: list[tuple[type[BaseModel], JsonSchemaMode]] = [(m, "serialization") for m in _SCHEMA_MODELS]
    modes.append((AgentEventEnvelope, "validation"))
    modes.append((CancelBody, "validation"))
    modes.append((ScheduleSpec, "validation"))
    modes.append((DecisionBody, "validation"))
    modes.append((ExplainRequest, "validation"))
    _, top = models_json_schema(modes, ref_template="#/components/schemas/{model}")
    paths: dict[str, JSONObject] = {}
    for endpoint in _ENDPOINTS:
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(endpoint)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "mcphost",
            "version": __version__,
            "description": "Events in, one agent run per event. Each run's MCP endpoint, /runs/{run_id}/mcp, "
            "takes the run token and is not part of this API. Errors are {error: {code, message, details}}.",
        },
        "components": {
            "schemas": schemas_with_iso(top.get("$defs", {})),
            "securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer", "description": ROLES_DESCRIPTION}
            },
        },
        "security": [{"apiKey": []}],
        "tags": [{"name": name, "description": text} for name, text in TAGS.items()],
        "paths": paths,
    }
