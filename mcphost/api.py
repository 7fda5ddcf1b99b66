"""The HTTP API under `/v1` (DESIGN §7): event ingest, runs, resumable result streams, facts reads,
artifacts, runners, `/healthz`, `/metrics` and `/openapi.json`.

Owns the routes, what each accepts (pydantic query and body models with `extra="forbid"`) and the shape of
each answer (the response models below, which `/openapi.json` publishes). Does not own authentication,
error responses or the composition of the host: `app.py` checks the API key, maps every `HostError` to
its JSON error response in one place, and builds the `ApiState` the routes read. Endpoints raise; they
never build an error response.

Invariants:
- Input is validated before anything is stored: a refused request changes nothing. Bodies are read
  with a size cap enforced while streaming (`Content-Length` is checked first, the byte count always),
  so an oversized body is refused with 413 without being buffered; uploads stream to disk, capped.
- Result streams read the results store, never a live queue: a stream that resumes after host sequence
  N (`Last-Event-ID`, else `?after=N`) gets every later result exactly once, in order. Each result is one
  SSE event whose `id` is its sequence; admission (`event: run`) and the end marker (`event: end`) carry no
  id, so they never move a client's resume point. A stream ends after the run's terminal result.
- A stream's producer, its keep-alive and its disconnect watch live in one task group owned by the
  response (`EventStream`); a client that goes away cancels all three.
- Metrics are this process's counters (Prometheus text, rendered here): runs that ended here by status
  and their durations, MCP calls by tool and outcome, active runs, plugin restarts.
"""

from __future__ import annotations

import email.message
import email.utils
import json
import logging
import re
import time
import types
import urllib.parse
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Literal, TypeVar, Union, get_args, get_origin

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.json_schema import JsonSchemaMode, models_json_schema
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from mcphost import __version__
from mcphost.context import mcp_url
from mcphost.errors import ConflictError, HostError, InvalidArgumentError, PayloadTooLargeError
from mcphost.models import ID_PATTERN, AgentEventEnvelope, Run, RunStatus
from mcphost.orchestrator import Orchestrator
from mcphost.plugins import PluginProcess
from mcphost.protocol import ArtifactRef, JSONObject
from mcphost.registry import RunnerRegistry
from mcphost.stores import ArtifactRecord, AuditRecord, StoredEvent, Stores, TranscriptRecord

logger = logging.getLogger(__name__)

MAX_EVENT_BODY_BYTES = 4 * 1024 * 1024
"""An event's `input.text` may be 256 KiB of characters, up to six JSON bytes each when escaped."""
MAX_SMALL_BODY_BYTES = 64 * 1024
DEFAULT_MAX_UPLOAD_BYTES = 100 * 1024 * 1024
MULTIPART_OVERHEAD_BYTES = 1024 * 1024
"""Room for part headers and small form fields around an uploaded file."""
KEEPALIVE_S = 15.0
"""An SSE comment is sent when a stream has been quiet this long (proxies close idle connections)."""
RESULTS_PAGE_LIMIT = 1000
_MIME = re.compile(r"^[A-Za-z0-9][\w.+-]{0,99}/[A-Za-z0-9][\w.+-]{0,99}(\s*;.{0,95})?$")
_ASCII_NAME = re.compile(r"^[\x20-\x7e]*$")


class RangeNotSatisfiableError(InvalidArgumentError):
    """A `Range` the artifact cannot satisfy (HTTP only; belongs in `errors.py` once it has a second user)."""

    status = 416


class UnavailableError(HostError):
    """The host is draining for shutdown and takes no new work (HTTP only, like the above)."""

    code = "runtime_error"
    status = 503


# -- state the routes read ---------------------------------------------------------------------------


@dataclass
class ApiLimits:
    """Body size limits (bytes)."""

    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    max_event_bytes: int = MAX_EVENT_BODY_BYTES


@dataclass
class ApiState:
    """What the routes need of the host; `app.py` builds it and puts it in `app.state.api`."""

    stores: Stores
    orchestrator: Orchestrator
    registry: RunnerRegistry[PluginProcess]
    metrics: HostMetrics
    end_grant: Callable[[str, str], Awaitable[Run]]
    """Ends a runner-less run (an inspection grant): (run_id, reason) → the cancelled run."""
    limits: ApiLimits = field(default_factory=ApiLimits)
    draining: bool = False
    """Set when the server stops taking new events (graceful shutdown)."""


def api_state(request: Request) -> ApiState:
    state = request.app.state.api
    assert isinstance(state, ApiState), "app.state.api is set by app.py before requests are served"
    return state


# -- metrics -----------------------------------------------------------------------------------------

DURATION_BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_TERMINAL = ("completed", "failed", "cancelled")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class HostMetrics:
    """This process's counters, rendered as Prometheus text exposition (format 0.0.4)."""

    def __init__(self) -> None:
        self.runs_ended: Counter[str] = Counter()
        self.events_admitted: Counter[str] = Counter()
        self.mcp_calls: Counter[tuple[str, str]] = Counter()
        self._buckets = [0] * len(DURATION_BUCKETS)
        self._duration_sum = 0.0
        self._duration_count = 0

    def run_ended(self, run: Run) -> None:
        """Count a run that reached a terminal status on this process."""
        self.runs_ended[run.status.value] += 1
        if run.ended_at is not None:
            duration = max(run.ended_at - (run.started_at or run.created_at), 0.0)
            self._duration_sum += duration
            self._duration_count += 1
            for i, bound in enumerate(DURATION_BUCKETS):
                if duration <= bound:
                    self._buckets[i] += 1

    def mcp_call(self, tool: str, outcome: str) -> None:
        self.mcp_calls[(tool, outcome)] += 1

    def render(self, *, active_runs: int, plugins: Sequence[tuple[str, int, bool]]) -> str:
        """The exposition; `plugins` are (name, restarts, up)."""
        out: list[str] = []

        def head(name: str, kind: str, text: str) -> None:
            out.append(f"# HELP {name} {text}")
            out.append(f"# TYPE {name} {kind}")

        head("mcphost_runs_total", "counter", "Runs that ended on this process, by final status.")
        for status in _TERMINAL:
            out.append(f'mcphost_runs_total{{status="{status}"}} {self.runs_ended[status]}')
        head("mcphost_runs_active", "gauge", "Runs queued or running on this process.")
        out.append(f"mcphost_runs_active {active_runs}")
        head("mcphost_events_admitted_total", "counter", "Events accepted by POST /v1/events.")
        for outcome in ("created", "replayed"):
            out.append(
                f'mcphost_events_admitted_total{{outcome="{outcome}"}} {self.events_admitted[outcome]}'
            )
        head("mcphost_run_duration_seconds", "histogram", "Run duration from start (or admission) to end.")
        # `run_ended` counts a run in every bucket whose bound it is within, so counts are cumulative.
        for bound, count in zip(DURATION_BUCKETS, self._buckets, strict=True):
            out.append(f'mcphost_run_duration_seconds_bucket{{le="{bound:g}"}} {count}')
        out.append(f'mcphost_run_duration_seconds_bucket{{le="+Inf"}} {self._duration_count}')
        out.append(f"mcphost_run_duration_seconds_sum {self._duration_sum:.6f}")
        out.append(f"mcphost_run_duration_seconds_count {self._duration_count}")
        head(
            "mcphost_mcp_calls_total",
            "counter",
            "Per-run MCP calls served by this process, by tool and outcome.",
        )
        for (tool, outcome), count in sorted(self.mcp_calls.items()):
            out.append(
                f'mcphost_mcp_calls_total{{tool="{_label(tool)}",outcome="{_label(outcome)}"}} {count}'
            )
        head("mcphost_plugin_restarts_total", "counter", "Restarts of each plugin process.")
        for name, restarts, _ in plugins:
            out.append(f'mcphost_plugin_restarts_total{{plugin="{_label(name)}"}} {restarts}')
        head("mcphost_plugin_up", "gauge", "1 when the plugin process is running.")
        for name, _, up in plugins:
            out.append(f'mcphost_plugin_up{{plugin="{_label(name)}"}} {int(up)}')
        return "\n".join(out) + "\n"


# -- request and response models ---------------------------------------------------------------------


class _Query(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class IngestQuery(_Query):
    stream: bool = False
    """Answer with an SSE stream of the run's results instead of 202."""


class RunsQuery(_Query):
    conversation_id: str | None = Field(default=None, pattern=ID_PATTERN)
    status: RunStatus | None = None
    limit: int = Field(default=50, ge=1, le=100)
    cursor: str | None = Field(default=None, max_length=500)


class ResultsQuery(_Query):
    after: int = Field(default=0, ge=0)
    """Resume after this host sequence (`Last-Event-ID` wins when both are given)."""
    limit: int = Field(default=RESULTS_PAGE_LIMIT, ge=1, le=10_000)
    """Page size of the JSON answer (SSE streams everything)."""


class PageQuery(_Query):
    before: str | None = Field(default=None, max_length=500)
    after: str | None = Field(default=None, max_length=500)
    limit: int = Field(default=50, ge=1, le=100)
    thread_id: str | None = Field(default=None, pattern=ID_PATTERN)


class EventsPageQuery(PageQuery):
    event_type: list[str] | None = Field(default=None, max_length=20)
    """Only these event types (repeat the parameter for several)."""


class AuditQuery(_Query):
    after: int = Field(default=0, ge=0)
    limit: int = Field(default=100, ge=1, le=1000)


class UploadQuery(_Query):
    name: str | None = Field(default=None, max_length=255)
    """File name (default: the multipart part's filename)."""
    mime_type: str | None = Field(default=None, max_length=200, pattern=_MIME.pattern)
    """Media type (default: the part's or the request's Content-Type)."""
    conversation_id: str | None = Field(default=None, pattern=ID_PATTERN)
    """The conversation the artifact belongs to: that conversation's runs may read it."""


class ConversationPath(_Query):
    conversation_id: str = Field(pattern=ID_PATTERN)


class CancelBody(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    reason: str | None = Field(default=None, max_length=500)
    """Why; recorded in the run's error details."""


class _Answer(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)


class Admitted(_Answer):
    run_id: str
    event_id: str
    status: RunStatus
    created: bool
    """False when the event_id was seen before: this is the existing run."""


class GrantSummary(_Answer):
    """What a run may touch (PROTOCOL §6), without its token hash."""

    runner_id: str | None
    binding_id: str | None
    conversation_id: str | None
    thread_id: str | None
    actor_id: str | None
    tools: list[str]
    host_tool_globs: list[str]
    knowledge_bases: list[str]
    state_read: list[str]
    state_write: list[str]
    storage_areas: list[str]
    artifact_create: bool
    deadline_at: float
    revoked: bool
    active: bool


class RunView(_Answer):
    run: Run
    grant: GrantSummary
    mcp_url: str
    """The run's MCP endpoint (it answers only while the grant is active, with the run token)."""


class RunsPage(_Answer):
    items: list[Run]
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


# -- parsing -----------------------------------------------------------------------------------------

ModelT = TypeVar("ModelT", bound=BaseModel)


def _invalid(exc: ValidationError, where: str) -> InvalidArgumentError:
    """A ValidationError as a 400 naming the field (inputs are not echoed)."""
    errors: list[JSONObject] = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False)[:20]:
        loc = ".".join(str(p) for p in (where, *err["loc"]))
        errors.append({"loc": loc, "msg": err["msg"], "type": err["type"]})
    first = errors[0]
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return InvalidArgumentError(f"{first['loc']}: {first['msg']}{more}", details={"errors": errors})


def parse_model(model: type[ModelT], data: object, where: str) -> ModelT:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc, where) from None


def parse_json(model: type[ModelT], raw: bytes, where: str = "body") -> ModelT:
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise _invalid(exc, where) from None


def _is_list(annotation: object) -> bool:
    if get_origin(annotation) is list:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_is_list(arg) for arg in get_args(annotation))
    return False


def parse_query(request: Request, model: type[ModelT]) -> ModelT:
    """Query parameters through `model`; repeated parameters only for list fields."""
    data: dict[str, str | list[str]] = {}
    for key, value in request.query_params.multi_items():
        info = model.model_fields.get(key)
        if info is not None and _is_list(info.annotation):
            existing = data.setdefault(key, [])
            assert isinstance(existing, list)
            existing.append(value)
        elif key in data:
            raise InvalidArgumentError(f"query.{key}: given more than once; pass it once.")
        else:
            data[key] = value
    return parse_model(model, data, "query")


async def _capped(request: Request, limit: int) -> AsyncIterator[bytes]:
    """The request body, refused with 413 as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        if chunk:
            yield chunk


def _too_large(limit: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"The request body exceeds the limit of {limit} bytes; send less.", details={"max_bytes": limit}
    )


async def read_body(request: Request, limit: int) -> bytes:
    return b"".join([chunk async for chunk in _capped(request, limit)])


# -- SSE ---------------------------------------------------------------------------------------------


def sse(data: str, *, event: str | None = None, event_id: str | None = None) -> bytes:
    """One server-sent event (`data` must be a single line, as compact JSON is)."""
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event is not None:
        lines.append(f"event: {event}")
    lines.append(f"data: {data}")
    return ("\n".join(lines) + "\n\n").encode()


def _compact(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class EventStream(Response):
    """An SSE response: events from `events`, keep-alive comments while quiet, stopped on disconnect."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncGenerator[bytes, None], *, headers: dict[str, str] | None = None) -> None:
        super().__init__(
            content=None,
            status_code=200,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no", **(headers or {})},
        )
        self._events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        await send({"type": "http.response.start", "status": self.status_code, "headers": headers})
        outbox, inbox = anyio.create_memory_object_stream[bytes](16)

        async def produce() -> None:
            async with outbox, aclosing(self._events) as events:
                async for chunk in events:
                    await outbox.send(chunk)

        async def watch(scope_to_cancel: anyio.CancelScope) -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            scope_to_cancel.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            tg.start_soon(watch, tg.cancel_scope)
            async with inbox:
                # A first comment gets the status and headers to the client before any result exists.
                await send({"type": "http.response.body", "body": b": stream open\n\n", "more_body": True})
                while True:
                    chunk = b": keepalive\n\n"
                    with anyio.move_on_after(KEEPALIVE_S):
                        try:
                            chunk = await inbox.receive()
                        except anyio.EndOfStream:
                            break
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()


async def _closing(chunks: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    """`chunks`, closed (shielded) however iteration ends, so a file or connection behind it is released."""
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True):
                await aclose()


async def _result_events(state: ApiState, run_id: str, after: int) -> AsyncGenerator[bytes, None]:
    """The run's results after `after` as SSE events, then `event: end` with the final status."""
    try:
        async for item in state.orchestrator.results(run_id, after=after):
            yield sse(_compact({"seq": item.seq, **item.payload}), event_id=str(item.seq))
        run = await state.stores.runs.get(run_id)
        end: JSONObject = {"run_id": run_id, "status": run.status.value}
        if run.error is not None:
            end["error"] = run.error.model_dump(mode="json")
        yield sse(_compact(end), event="end")
    except HostError as exc:
        # The response has started: the failure can only be told inside the stream.
        logger.warning("result stream of run %s stopped: %s", run_id, exc.message)
        yield sse(_compact({"error": exc.to_dict()}), event="error")


def _wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "").lower()
    return "application/json" in accept and "text/event-stream" not in accept


def _resume_point(request: Request, query: ResultsQuery) -> int:
    last = request.headers.get("last-event-id")
    if last is None or not last.strip():
        return query.after
    value = last.strip()
    if not value.isdigit() or len(value) > 18:
        raise InvalidArgumentError(
            f"header Last-Event-ID: expected a result sequence number (a whole number >= 0), got {value[:40]!r}."
        )
    return int(value)


# -- endpoints: events and runs ----------------------------------------------------------------------


async def ingest_event(request: Request) -> Response:
    state = api_state(request)
    query = parse_query(request, IngestQuery)
    event = parse_json(AgentEventEnvelope, await read_body(request, state.limits.max_event_bytes))
    if state.draining:
        raise UnavailableError(
            "The host is shutting down and takes no new events; retry on another replica or after it restarts."
        )
    admission = await state.orchestrator.submit(event)
    state.metrics.events_admitted["created" if admission.created else "replayed"] += 1
    run = admission.run
    answer = Admitted(run_id=run.run_id, event_id=run.event_id, status=run.status, created=admission.created)
    location = {"Location": f"/v1/runs/{run.run_id}"}
    if not query.stream:
        return JSONResponse(answer.model_dump(mode="json"), status_code=202, headers=location)

    async def events() -> AsyncGenerator[bytes, None]:
        yield sse(_compact(answer.model_dump(mode="json")), event="run")
        async with aclosing(_result_events(state, run.run_id, 0)) as results:
            async for chunk in results:
                yield chunk

    return EventStream(events(), headers={**location, "X-Run-Id": run.run_id})


async def list_runs(request: Request) -> Response:
    state = api_state(request)
    query = parse_query(request, RunsQuery)
    page = await state.stores.runs.list(
        conversation_id=query.conversation_id, status=query.status, limit=query.limit, cursor=query.cursor
    )
    answer = RunsPage(items=page.items, next_cursor=page.next_cursor, has_more=page.has_more)
    return JSONResponse(answer.model_dump(mode="json"))


async def show_run(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, _Query)
    run_id = str(request.path_params["run_id"])
    run = await state.stores.runs.get(run_id)
    record = await state.stores.runs.grant(run_id)
    grant = record.grant
    summary = GrantSummary(
        runner_id=grant.runner_id,
        binding_id=grant.binding_id,
        conversation_id=grant.conversation_id,
        thread_id=grant.thread_id,
        actor_id=grant.actor_id,
        tools=sorted(grant.tools),
        host_tool_globs=list(grant.host_tool_globs),
        knowledge_bases=sorted(grant.knowledge_bases),
        state_read=sorted(grant.state_read),
        state_write=sorted(grant.state_write),
        storage_areas=sorted(grant.storage_areas),
        artifact_create=grant.artifact_create,
        deadline_at=grant.deadline_at,
        revoked=record.revoked,
        active=record.active and time.time() < grant.deadline_at,
    )
    answer = RunView(run=run, grant=summary, mcp_url=mcp_url(state.orchestrator.public_url, run_id))
    return JSONResponse(answer.model_dump(mode="json"))


async def run_results(request: Request) -> Response:
    state = api_state(request)
    query = parse_query(request, ResultsQuery)
    after = _resume_point(request, query)
    run_id = str(request.path_params["run_id"])
    run = await state.stores.runs.get(run_id)  # 404 before any stream starts
    if _wants_json(request):
        items = await state.stores.results.list(run_id, after=after, limit=query.limit)
        # Read the status after the page: a terminal run read here has every result already stored.
        run = await state.stores.runs.get(run_id)
        next_after = items[-1].seq if items else after
        answer = ResultsPage(
            run_id=run_id,
            status=run.status,
            results=[{"seq": item.seq, **item.payload} for item in items],
            next_after=next_after,
            complete=run.status.is_terminal and len(items) < query.limit,
        )
        return JSONResponse(answer.model_dump(mode="json"))
    return EventStream(_result_events(state, run.run_id, after), headers={"X-Run-Id": run.run_id})


async def cancel_run(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, _Query)
    raw = await read_body(request, MAX_SMALL_BODY_BYTES)
    body = parse_json(CancelBody, raw) if raw.strip() else CancelBody()
    run_id = str(request.path_params["run_id"])
    run = await state.stores.runs.get(run_id)
    if run.status.is_terminal:
        raise _conflict_terminal(run)
    reason = body.reason or "cancelled through the API"
    if run.runner_id is None:
        run = await state.end_grant(run_id, reason)
    else:
        run = await state.orchestrator.cancel(run_id, reason=reason)
    answer = CancelAnswer(run_id=run_id, status=run.status, cancel_requested=not run.status.is_terminal)
    return JSONResponse(answer.model_dump(mode="json"), status_code=202)


def _conflict_terminal(run: Run) -> HostError:
    return ConflictError(
        f"Run {run.run_id!r} is already {run.status}; there is nothing to cancel.",
        details={"run_id": run.run_id, "status": run.status.value},
    )


async def run_audit(request: Request) -> Response:
    state = api_state(request)
    query = parse_query(request, AuditQuery)
    run_id = str(request.path_params["run_id"])
    await state.stores.runs.get(run_id)
    items = await state.stores.audit.list(run_id, after=query.after, limit=min(query.limit + 1, 1000))
    has_more = len(items) > query.limit
    kept = items[: query.limit]
    answer = AuditPage(items=kept, next_after=kept[-1].seq if kept else query.after, has_more=has_more)
    return JSONResponse(answer.model_dump(mode="json"))


# -- endpoints: conversations ------------------------------------------------------------------------


async def conversation_transcript(request: Request) -> Response:
    state = api_state(request)
    path = parse_model(ConversationPath, dict(request.path_params), "path")
    query = parse_query(request, PageQuery)
    page = await state.stores.transcript.page(
        path.conversation_id, query.thread_id, before=query.before, after=query.after, limit=query.limit
    )
    answer = TranscriptPage(
        items=page.items, next_cursor=page.next_cursor, prev_cursor=page.prev_cursor, has_more=page.has_more
    )
    return JSONResponse(answer.model_dump(mode="json"))


async def conversation_events(request: Request) -> Response:
    state = api_state(request)
    path = parse_model(ConversationPath, dict(request.path_params), "path")
    query = parse_query(request, EventsPageQuery)
    page = await state.stores.events.page(
        path.conversation_id,
        query.thread_id,
        before=query.before,
        after=query.after,
        limit=query.limit,
        event_types=query.event_type,
    )
    answer = EventsPage(
        items=page.items, next_cursor=page.next_cursor, prev_cursor=page.prev_cursor, has_more=page.has_more
    )
    return JSONResponse(answer.model_dump(mode="json"))


# -- endpoints: runners, health, metrics -------------------------------------------------------------


async def list_runners(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, _Query)
    registry = state.registry
    answer = RunnersView(
        runners=[
            RunnerInfo(id=r.manifest.id, name=r.manifest.name, plugin=r.plugin.spec.name)
            for r in registry.runners()
        ],
        rejected=[
            RejectedInfo(id=r.runner_id, plugin=r.plugin, reason=r.reason) for r in registry.rejected()
        ],
        plugins=[
            PluginInfo(
                name=p.name,
                command=list(p.command),
                state=p.state,
                pid=p.pid,
                restarts=p.restarts,
                last_error=p.last_error,
                runners=list(p.runners),
            )
            for p in registry.plugins()
        ],
    )
    return JSONResponse(answer.model_dump(mode="json"))


async def healthz(request: Request) -> Response:
    state = api_state(request)
    if state.draining:
        raise UnavailableError("The host is shutting down.")
    answer = Health(
        status="ok",
        version=__version__,
        host_id=state.orchestrator.host_id,
        active_runs=len(state.orchestrator.active_run_ids()),
    )
    return JSONResponse(answer.model_dump(mode="json"))


async def metrics(request: Request) -> Response:
    state = api_state(request)
    plugins = [(p.name, p.restarts, p.state == "running") for p in state.registry.plugins()]
    text = state.metrics.render(active_runs=len(state.orchestrator.active_run_ids()), plugins=plugins)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")


# -- endpoints: artifacts ----------------------------------------------------------------------------


def _header_params(name: str, value: str) -> email.message.Message:
    message = email.message.Message()
    message[name] = value
    return message


def _param(message: email.message.Message, header: str, key: str) -> str | None:
    value = message.get_param(key, header=header)
    if value is None or isinstance(value, str):
        return value
    return email.utils.collapse_rfc2231_value(value)


def _malformed(why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"body: malformed multipart/form-data: {why}.")


class _Multipart:
    """A streaming `multipart/form-data` reader: each part's headers, then its bytes as a stream."""

    HEADER_LIMIT = 16 * 1024
    FIELD_LIMIT = 4 * 1024

    def __init__(self, chunks: AsyncIterator[bytes], boundary: str) -> None:
        self._chunks = chunks
        self._delimiter = b"\r\n--" + boundary.encode("latin-1")
        self._buf = bytearray(b"\r\n")  # so the first boundary matches the delimiter as well
        self._done = False

    async def _fill(self) -> None:
        try:
            self._buf += await anext(self._chunks)
        except StopAsyncIteration:
            raise _malformed("the body ended before the closing boundary") from None

    async def _until(self, marker: bytes, limit: int) -> bytes:
        start = 0
        while (index := self._buf.find(marker, start)) < 0:
            if len(self._buf) > limit:
                raise _malformed("a preamble or part header block is too long")
            start = max(len(self._buf) - len(marker) + 1, 0)
            await self._fill()
        taken = bytes(self._buf[:index])
        del self._buf[: index + len(marker)]
        return taken

    async def _after_delimiter(self) -> None:
        while len(self._buf) < 2:
            await self._fill()
        mark = bytes(self._buf[:2])
        del self._buf[:2]
        if mark == b"--":
            self._done = True
        elif mark != b"\r\n":
            raise _malformed("a boundary is not followed by a line break")

    async def start(self) -> None:
        await self._until(self._delimiter, 64 * 1024)
        await self._after_delimiter()

    async def next_part(self) -> email.message.Message | None:
        """The next part's headers, or None after the closing boundary."""
        if self._done:
            return None
        while len(self._buf) < 2:
            await self._fill()
        if self._buf.startswith(b"\r\n"):
            del self._buf[:2]
            raw = b""
        else:
            raw = await self._until(b"\r\n\r\n", self.HEADER_LIMIT)
        headers = email.message.Message()
        for line in raw.decode("utf-8", errors="replace").split("\r\n"):
            name, sep, value = line.partition(":")
            if not sep:
                raise _malformed(f"part header line {line[:60]!r} has no colon")
            headers[name.strip()] = value.strip()
        return headers

    async def body(self) -> AsyncGenerator[bytes, None]:
        """The current part's bytes, up to the next boundary."""
        keep = len(self._delimiter) - 1
        while (index := self._buf.find(self._delimiter)) < 0:
            if len(self._buf) > keep:
                piece = bytes(self._buf[: len(self._buf) - keep])
                del self._buf[: len(piece)]
                yield piece
            await self._fill()
        if index:
            yield bytes(self._buf[:index])
        del self._buf[: index + len(self._delimiter)]
        await self._after_delimiter()

    async def field(self) -> str:
        data = bytearray()
        async for piece in self.body():
            data += piece
            if len(data) > self.FIELD_LIMIT:
                raise _malformed(f"a form field is longer than {self.FIELD_LIMIT} bytes")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise _malformed("a form field is not UTF-8") from None


@dataclass
class _Upload:
    chunks: AsyncIterator[bytes]
    query: UploadQuery
    filename: str | None
    content_type: str | None


async def _multipart_upload(
    request: Request, query_data: dict[str, str], limit: int, boundary: str
) -> _Upload:
    reader = _Multipart(_capped(request, limit), boundary)
    await reader.start()
    fields: dict[str, str] = dict(query_data)
    while (headers := await reader.next_part()) is not None:
        disposition = headers.get("content-disposition")
        if disposition is None:
            raise _malformed("a part has no Content-Disposition")
        params = _header_params("content-disposition", disposition)
        name = _param(params, "content-disposition", "name")
        filename = params.get_filename()
        if filename is not None or name == "file":
            query = parse_model(UploadQuery, fields, "form")
            return _Upload(reader.body(), query, filename, headers.get("content-type"))
        if name is None:
            raise _malformed("a part has no name")
        if name not in UploadQuery.model_fields:
            known = ", ".join(["file", *UploadQuery.model_fields])
            raise InvalidArgumentError(f"form.{name[:50]}: unknown form field; known: {known}.")
        if name in fields:
            raise InvalidArgumentError(
                f"form.{name}: given more than once (in the query or the form); pass it once."
            )
        fields[name] = await reader.field()
    raise InvalidArgumentError(
        "form.file: the multipart body has no file part; send the file as a part named 'file'."
    )


async def upload_artifact(request: Request) -> Response:
    state = api_state(request)
    cap = state.limits.max_upload_bytes
    query_data: dict[str, str] = {}
    for key, value in request.query_params.multi_items():
        if key in query_data:
            raise InvalidArgumentError(f"query.{key}: given more than once; pass it once.")
        query_data[key] = value
    content_type = request.headers.get("content-type", "")
    if content_type.lower().startswith("multipart/form-data"):
        boundary = _param(_header_params("content-type", content_type), "content-type", "boundary")
        if not boundary or len(boundary) > 70:
            raise InvalidArgumentError(
                "header Content-Type: multipart/form-data needs a boundary of 1 to 70 characters."
            )
        parse_model(UploadQuery, query_data, "query")
        upload = await _multipart_upload(request, query_data, cap + MULTIPART_OVERHEAD_BYTES, boundary)
    else:
        upload = _Upload(
            _capped(request, cap), parse_model(UploadQuery, query_data, "query"), None, content_type or None
        )
    mime = upload.query.mime_type or (upload.content_type or "").strip() or "application/octet-stream"
    if not _MIME.match(mime):
        raise InvalidArgumentError(
            f"Content-Type {mime[:100]!r} is not a media type such as 'text/plain'; pass mime_type."
        )
    name = upload.query.name or upload.filename
    if name is not None and len(name) > 255:
        raise InvalidArgumentError("The file name is longer than 255 characters; pass a shorter name.")
    record = await state.stores.artifacts.put_stream(
        upload.chunks, name=name, mime_type=mime, max_bytes=cap, conversation_id=upload.query.conversation_id
    )
    logger.info("artifact %s stored: %d bytes", record.artifact_id, record.size)
    return JSONResponse(
        record.to_ref().model_dump(mode="json"),
        status_code=201,
        headers={"Location": f"/v1/artifacts/{record.artifact_id}"},
    )


async def artifact_metadata(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, _Query)
    record = await state.stores.artifacts.get(str(request.path_params["artifact_id"]))
    return JSONResponse(record.model_dump(mode="json"))


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(start, stop) of a single `bytes=` range, None to send everything.

    Another unit, or several ranges, are answered with the whole content (RFC 9110 lets a server ignore
    Range); a `bytes=` range that is malformed or starts past the end is `RangeNotSatisfiableError`.
    """
    if header is None:
        return None
    unit, sep, spec = header.strip().partition("=")
    if not sep or unit.strip().lower() != "bytes":
        return None
    if "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    first, last = first.strip(), last.strip()
    unsatisfiable = RangeNotSatisfiableError(
        f"Range {header[:100]!r} cannot be satisfied: the artifact has {size} bytes.",
        details={"size": size},
    )
    if not dash or not (first or last) or not (first or "0").isdigit() or not (last or "0").isdigit():
        raise unsatisfiable
    if not first:  # suffix: the last N bytes
        count = int(last)
        if count == 0 or size == 0:
            raise unsatisfiable
        return max(size - count, 0), size
    start = int(first)
    stop = size if not last else min(int(last) + 1, size)
    if start >= size or (last and int(last) < start):
        raise unsatisfiable
    return start, stop


def _disposition(name: str | None) -> str:
    if not name:
        return "attachment"
    fallback = name if _ASCII_NAME.match(name) and '"' not in name and "\\" not in name else "download"
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{urllib.parse.quote(name, safe='')}"


async def artifact_content(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, _Query)
    artifact_id = str(request.path_params["artifact_id"])
    record: ArtifactRecord = await state.stores.artifacts.get(artifact_id)
    span = parse_range(request.headers.get("range"), record.size)
    start, stop = span if span is not None else (0, record.size)
    record, chunks = await state.stores.artifacts.open_range(artifact_id, start, stop - start)
    headers = {
        "Accept-Ranges": "bytes",
        "Content-Length": str(stop - start),
        "ETag": f'"{record.sha256}"',
        "Content-Disposition": _disposition(record.name),
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox",
        "Cache-Control": "private, no-cache",
        "Content-Type": record.mime_type,  # as stored: no charset is guessed for text types
    }
    if span is not None:
        headers["Content-Range"] = f"bytes {start}-{stop - 1}/{record.size}"

    return StreamingResponse(_closing(chunks), status_code=206 if span is not None else 200, headers=headers)


# -- routes and OpenAPI ------------------------------------------------------------------------------

_BINARY: JSONObject = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
_SSE: JSONObject = {
    "text/event-stream": {
        "schema": {"type": "string"},
        "description": "One event per result (`id: <seq>`, `data: {seq, type, run_id, data, ...}`), then "
        "`event: end` with `{run_id, status, error?}`. Resume with `Last-Event-ID`.",
    }
}
_TEXT: JSONObject = {"text/plain": {"schema": {"type": "string"}}}


_OPENAPI_CACHE: list[JSONObject] = []


async def openapi_endpoint(request: Request) -> Response:
    parse_query(request, _Query)
    if not _OPENAPI_CACHE:
        _OPENAPI_CACHE.append(openapi())
    return JSONResponse(_OPENAPI_CACHE[0])


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
    public: bool = False
    """Outside `/v1`: no API key."""


_ENDPOINTS: tuple[_Endpoint, ...] = (
    _Endpoint("POST", "/v1/events", ingest_event, "Ingest an event; with stream=true, the run's results as SSE",
              202, "Admitted", (400, 404, 409, 413, 503), IngestQuery, "AgentEventEnvelope"),
    _Endpoint("GET", "/v1/runs", list_runs, "Runs, newest first", 200, "RunsPage", (400,), RunsQuery),
    _Endpoint("GET", "/v1/runs/{run_id}", show_run, "A run and its grant (never its token)", 200, "RunView", (404,)),
    _Endpoint("GET", "/v1/runs/{run_id}/results", run_results,
              "The run's results: SSE (resumable), or JSON with Accept: application/json",
              200, "ResultsPage", (400, 404), ResultsQuery, headers=("Last-Event-ID",)),
    _Endpoint("POST", "/v1/runs/{run_id}/cancel", cancel_run, "Cancel a run (an inspection grant is revoked)",
              202, "CancelAnswer", (400, 404, 409, 413), body="CancelBody"),
    _Endpoint("GET", "/v1/runs/{run_id}/audit", run_audit, "The run's MCP call audit", 200, "AuditPage",
              (400, 404), AuditQuery),
    _Endpoint("GET", "/v1/conversations/{conversation_id}/transcript", conversation_transcript,
              "A page of a conversation's transcript", 200, "TranscriptPage", (400,), PageQuery),
    _Endpoint("GET", "/v1/conversations/{conversation_id}/events", conversation_events,
              "A page of a conversation's event log", 200, "EventsPage", (400,), EventsPageQuery),
    _Endpoint("GET", "/v1/runners", list_runners, "Runners, rejected manifests and plugin processes", 200,
              "RunnersView"),
    _Endpoint("POST", "/v1/artifacts", upload_artifact,
              "Upload an artifact (raw body, or multipart/form-data with a 'file' part) for input.attachments",
              201, "ArtifactRef", (400, 413), UploadQuery,
              {**_BINARY, "multipart/form-data": {"schema": {"type": "object", "properties": {"file": {"type": "string", "format": "binary"}}}}}),
    _Endpoint("GET", "/v1/artifacts/{artifact_id}", artifact_metadata, "An artifact's metadata", 200,
              "ArtifactRecord", (404,)),
    _Endpoint("GET", "/v1/artifacts/{artifact_id}/content", artifact_content,
              "An artifact's bytes; a single byte range answers 206", 200, _BINARY, (404, 416), headers=("Range",)),
    _Endpoint("GET", "/healthz", healthz, "Liveness (503 while draining)", 200, "Health", (503,), public=True),
    _Endpoint("GET", "/metrics", metrics, "Prometheus text metrics", 200, _TEXT, public=True),
    _Endpoint("GET", "/openapi.json", openapi_endpoint, "This document", 200, {"application/json": {}}, public=True),
)  # fmt: skip


def routes() -> list[BaseRoute]:
    """Every route of the API (the MCP endpoint is mounted by `app.py`)."""
    return [Route(e.path, e.handler, methods=[e.method]) for e in _ENDPOINTS]


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
    if endpoint.handler is run_results or endpoint.handler is ingest_event:
        ok = {**_SSE, **ok}
    responses: JSONObject = {str(endpoint.ok): {"description": "success", "content": ok}}
    for status in sorted({*endpoint.errors, *(() if endpoint.public else (401,))}):
        responses[str(status)] = {"description": "error", "content": _content("ErrorBody")}
    op: JSONObject = {"summary": endpoint.summary, "responses": responses}
    if params := _parameters(endpoint):
        op["parameters"] = params
    if endpoint.body is not None:
        op["requestBody"] = {"required": endpoint.body != "CancelBody", "content": _content(endpoint.body)}
    if endpoint.public:
        op["security"] = []
    return op


_SCHEMA_MODELS: tuple[type[BaseModel], ...] = (
    ArtifactRef,
    ArtifactRecord,
    Admitted,
    RunView,
    RunsPage,
    ResultsPage,
    CancelAnswer,
    TranscriptPage,
    EventsPage,
    AuditPage,
    RunnersView,
    Health,
    ErrorBody,
)


def openapi() -> JSONObject:
    """The OpenAPI 3.1 document of the API; component schemas come from the pydantic models."""
    modes: list[tuple[type[BaseModel], JsonSchemaMode]] = [(m, "serialization") for m in _SCHEMA_MODELS]
    modes.append((AgentEventEnvelope, "validation"))
    modes.append((CancelBody, "validation"))
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
            "schemas": top.get("$defs", {}),
            "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"apiKey": []}],
        "paths": paths,
    }
