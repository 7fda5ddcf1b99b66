"""The endpoints for events, runs, state, runners, `/healthz` and `/metrics`.

Owns what each of these routes does: admission of an event (202, its results as SSE with
`?stream=true`, or the ended run with `?wait=true`), run reads, result pages and resumable result
streams, cancellation, audit pages, what a run left (`run_records`), the configured agents, reading an
owner's state values and deleting one (an operator's way out of a value no run can use), the runner
registry view, liveness and metrics, and what a `sender` key's request sees of runs (its own:
`_access.own_run`, `created_by` on its lists and admissions). Does not own artifacts (`_artifacts`),
conversations (`_conversations`), the route table or OpenAPI (`_routes`), authentication, the role
check or error responses (`_middleware`, `_access`, `_errors`). Endpoints raise; they never build an error response.

Invariants:
- Input is validated before anything is stored: a refused request changes nothing.
- Result streams read the results store, never a live queue: a stream that resumes after host sequence
  N (`Last-Event-ID`, else `?after=N`) gets every later result exactly once, in order. Each result is one
  SSE event named by its type (`event: message.delta`) whose `id` is its sequence; admission
  (`event: run`) and the end marker (`event: end`) carry no id, so they never move a client's resume
  point. A stream ends after the run's terminal result.
- A result stream never ends in silence: after its results it sends `event: end` (the run's final status
  and error), or, when the stream cannot go on (the store keeps failing), `event: error` with a code and
  a short message (`storage_unavailable`, `runtime_error`); the client resumes from its last id.
- A `wait=true` admission waits at most `timeout_s` and never cancels its run: when the wait ends first
  it answers 202 with the run as it stands (`done: false`).
- While the host drains, ingest and `/healthz` answer 503. While the storage probe (`Stores.health`,
  cached for a second) finds `data_dir` or the database gone or unwritable, `/healthz` answers 503
  `storage_unavailable` with the reason (and `_middleware` refuses `/v1` and MCP requests the same way).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import cast

import anyio
from sse_starlette import ServerSentEvent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcphost import __version__, tracing
from mcphost.api._access import caller_of, own_run
from mcphost.api._http import (
    EventStream,
    Last,
    json_event,
    parse_json,
    parse_model,
    parse_query,
    path_id,
    read_body,
    result_event,
)
from mcphost.api._models import (
    DEFAULT_WAIT_S,
    RESULTS_PAGE_LIMIT,
    Admitted,
    AgentInfo,
    AgentsView,
    Attempt,
    AuditPage,
    AuditQuery,
    CancelAnswer,
    CancelBody,
    GrantSummary,
    Health,
    IngestQuery,
    PluginInfo,
    QueryModel,
    RejectedInfo,
    ResultsPage,
    ResultsQuery,
    RunnerInfo,
    RunnersView,
    RunRecords,
    RunsPage,
    RunsQuery,
    RunView,
    RunWaited,
    StateDeleted,
    StateListQuery,
    StateOwnerQuery,
    StatePage,
    StatePath,
    StateScopePath,
    StateValue,
)
from mcphost.api._state import ApiState, api_state
from mcphost.common.timestamps import json_with_iso
from mcphost.context import mcp_url
from mcphost.errors import (
    ConflictError,
    ForbiddenError,
    HostError,
    InvalidArgumentError,
    NotFoundError,
    StorageUnavailableError,
    UnavailableError,
)
from mcphost.guard import Caller
from mcphost.ingress import check_client_event_id
from mcphost.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from mcphost.models import AgentEventEnvelope, Run
from mcphost.protocol import JSONObject
from mcphost.stores import MAX_RUN_SEQ
from mcphost.stores.results import StoredResult
from mcphost.stores.state import owner_from_ids

logger = logging.getLogger("mcphost.api")

MAX_SMALL_BODY_BYTES = 64 * 1024
STREAM_FAILED: JSONObject = {
    "code": "runtime_error",
    "message": "The host failed while streaming this run's results (it was logged); resume with "
    "Last-Event-ID.",
    "details": {},
}


async def _result_events(
    state: ApiState, run_id: str, after: int
) -> AsyncGenerator[ServerSentEvent | bytes, None]:
    """The run's results after `after` as SSE events (the results at hand together, encoded as one
    chunk: one write), then `event: end` with the final status (`Last`: it ends the body in its write)."""
    try:
        async for batch in state.orchestrator.result_batches(run_id, after=after):
            yield b"".join(result_event(item.seq, item.payload).encode() for item in batch)
        run = await state.orchestrator.wait(run_id)  # ended: results() stops only then
        end: JSONObject = {"run_id": run_id, "status": run.status.value}
        if run.error is not None:
            end["error"] = run.error.model_dump(mode="json")
        yield Last(json_event(end, event="end").encode())  # with the end of the body: one write
    except HostError as exc:
        # The response has started: the failure can only be told inside the stream.
        logger.warning("result stream of run %s stopped: %s", run_id, exc.__cause__ or exc.message)
        yield json_event({"error": exc.to_dict()}, event="error")
    except Exception:
        logger.exception("result stream of run %s failed", run_id)
        yield json_event({"error": STREAM_FAILED}, event="error")


def _wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "").lower()
    return "application/json" in accept and "text/event-stream" not in accept


def _resume_point(request: Request, query: ResultsQuery) -> int:
    last = request.headers.get("last-event-id")
    if last is None or not last.strip():
        return query.after
    value = last.strip()
    if not (value.isascii() and value.isdigit() and len(value) <= 10 and int(value) <= MAX_RUN_SEQ):
        raise InvalidArgumentError(
            "header Last-Event-ID: expected a result sequence number "
            f"(a whole number from 0 to {MAX_RUN_SEQ}), got {value[:40]!r}."
        )
    return int(value)


# -- endpoints: events and runs ----------------------------------------------------------------------


async def ingest_event(request: Request) -> Response:
    state = api_state(request)
    query = parse_query(request, IngestQuery)
    event = parse_json(AgentEventEnvelope, await read_body(request, state.limits.max_event_bytes))
    check_client_event_id(event.event_id)  # hooks, schedules and continuations have their own ids
    if state.draining:
        raise UnavailableError(
            "The host is shutting down and takes no new events; retry on another replica or after it restarts."
        )
    caller = caller_of(request)
    if caller.agents:
        _check_agent(state, event, caller)
    # A W3C trace context of the caller becomes the ingest span's parent; a malformed one is ignored.
    admission = await state.orchestrator.submit(
        event, parent=tracing.accept(request.headers), created_by=caller.key
    )
    run = admission.run
    if caller.own_runs_only and run.created_by != caller.key:  # nothing was stored: the event had a run
        raise ConflictError(
            f"Event id {event.event_id!r} is taken by another key's event; send this event with an "
            "event_id of its own.",
            details={"event_id": event.event_id},
        )
    state.metrics.event_admitted(created=admission.created)
    answer = Admitted(run_id=run.run_id, event_id=run.event_id, status=run.status, created=admission.created)
    location = {"Location": f"/v1/runs/{run.run_id}"}
    if query.wait:
        waited = await _wait_for(state, run, answer, query.timeout_s or DEFAULT_WAIT_S)
        status = 200 if waited.done else 202
        return JSONResponse(json_with_iso(waited), status_code=status, headers=location)
    if not query.stream:
        return JSONResponse(json_with_iso(answer), status_code=202, headers=location)

    return EventStream(
        _result_events(state, run.run_id, 0),
        first=json_event(json_with_iso(answer), event="run"),
        headers={**location, "X-Run-Id": run.run_id},
    )


WAIT_RESULTS = 1000
"""At most this many results in a `wait=true` answer (deltas left out)."""
WAIT_SCAN_PAGES = 10
"""At most this many pages' worth (`RESULTS_PAGE_LIMIT` each) of results, deltas included, are read for one
answer; the rest are left to `GET /v1/runs/{run_id}/results`."""


class _Collected:
    """What a `wait=true` answer holds of a run's results, gathered from a live follow or store pages."""

    def __init__(self) -> None:
        self.results: list[JSONObject] = []
        self.message: JSONObject | None = None
        self.after = 0
        self.scanned = 0
        self.full = False
        """A bound was reached (`WAIT_RESULTS` kept or `WAIT_SCAN_PAGES` read): the rest is not read."""

    def add(self, item: StoredResult) -> bool:
        """Keep `item` (a delta only moves `after`); False once a bound is reached."""
        if self.scanned == WAIT_SCAN_PAGES * RESULTS_PAGE_LIMIT:
            self.full = True
            return False
        self.scanned += 1
        if item.type != "message.delta":
            if len(self.results) == WAIT_RESULTS:
                self.full = True
                return False
            self.results.append({"seq": item.seq, **item.payload})
            self.message = _message_of(item.type, item.payload) or self.message
        self.after = item.seq
        return True


async def _wait_for(state: ApiState, run: Run, admitted: Admitted, timeout_s: float) -> RunWaited:
    """Wait up to `timeout_s` for the run to end (never cancelling it), collecting its results as they
    come: a run executing on this process is followed in memory (`Orchestrator.results`), as a result
    stream follows it, so an answer in time reads nothing back from the store. When the wait times out
    first, the results persisted by then are read from the store after the last one followed."""
    got = _Collected()
    followed = False
    with anyio.move_on_after(timeout_s):
        async with aclosing(state.orchestrator.results(run.run_id)) as items:
            async for item in items:
                if not got.add(item):
                    break
            else:
                followed = True  # to the run's end
        run = await state.orchestrator.wait(run.run_id)
    if not run.status.is_terminal:
        run = await state.stores.runs.get(run.run_id)
    while not followed and not got.full:
        page = await state.stores.results.list(run.run_id, after=got.after, limit=RESULTS_PAGE_LIMIT)
        if not all(got.add(item) for item in page) or len(page) < RESULTS_PAGE_LIMIT:
            break
    return RunWaited(
        run_id=run.run_id,
        event_id=run.event_id,
        status=run.status,
        created=admitted.created,
        done=run.status.is_terminal,
        run=run,
        results=got.results,
        results_complete=not got.full,
        next_after=got.after,
        message=got.message,
    )


def _message_of(kind: str, payload: JSONObject) -> JSONObject | None:
    """The assistant message a `message.completed` or `run.completed` result carries, if any."""
    data = payload.get("data")
    if kind not in ("message.completed", "run.completed") or not isinstance(data, dict):
        return None
    message = cast("JSONObject", data).get("message")
    return cast("JSONObject", message) if isinstance(message, dict) else None


def _check_agent(state: ApiState, event: AgentEventEnvelope, caller: Caller) -> None:
    """A sender key limited to `agents` posts only events that bind to one of them."""
    try:
        agent_id = state.bindings.resolve(event).agent.id
    except HostError:
        return  # the admission says why (or answers a replay with its run, which must be this key's)
    if agent_id not in caller.agents:
        raise ForbiddenError(
            f"Key {caller.key!r} may post events only for the agents {sorted(caller.agents)!r}; this event "
            f"binds to {agent_id!r}. Address one of those agents ([[api_keys]] agents).",
            details={"key": caller.key, "agent_id": agent_id, "agents": sorted(caller.agents)},
        )


async def list_runs(request: Request) -> Response:
    state = api_state(request)
    query = parse_query(request, RunsQuery)
    caller = caller_of(request)
    page = await state.stores.runs.list(
        created_by=caller.key if caller.own_runs_only else None,
        conversation_id=query.conversation_id,
        status=query.status,
        agent_id=query.agent,
        since=query.since.timestamp() if query.since else None,
        until=query.until.timestamp() if query.until else None,
        limit=query.limit,
        cursor=query.cursor,
    )
    answer = RunsPage(items=page.items, next_cursor=page.next_cursor, has_more=page.has_more)
    return JSONResponse(json_with_iso(answer))


async def show_run(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, QueryModel)
    run_id = path_id(request, "run_id")
    run = own_run(request, await state.stores.runs.get(run_id))
    record = await state.stores.runs.grant(run_id)
    grant = record.grant
    summary = GrantSummary.of(
        grant,
        runner_id=grant.runner_id,
        binding_id=grant.binding_id,
        conversation_id=grant.conversation_id,
        thread_id=grant.thread_id,
        actor_id=grant.actor_id,
        deadline_at=grant.deadline_at,
        revoked=record.revoked,
        active=record.active and time.time() < grant.deadline_at,
        layers=grant.layers,
    )
    attempts = [
        Attempt(
            run_id=a.run_id,
            attempt=a.attempt,
            status=a.status,
            error=a.error,
            created_at=a.created_at,
            ended_at=a.ended_at,
        )
        for a in await state.stores.runs.attempts(run.event_id)
    ]
    answer = RunView(
        run=run, grant=summary, mcp_url=mcp_url(state.orchestrator.public_url, run_id), attempts=attempts
    )
    return JSONResponse(json_with_iso(answer))


async def run_results(request: Request) -> Response:
    state = api_state(request)
    query = parse_query(request, ResultsQuery)
    after = _resume_point(request, query)
    run_id = path_id(request, "run_id")
    run = own_run(request, await state.stores.runs.get(run_id))  # 404 before any stream starts
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
        return JSONResponse(json_with_iso(answer))
    return EventStream(_result_events(state, run.run_id, after), headers={"X-Run-Id": run.run_id})


async def cancel_run(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, QueryModel)
    raw = await read_body(request, MAX_SMALL_BODY_BYTES)
    body = parse_json(CancelBody, raw) if raw.strip() else CancelBody()
    run_id = path_id(request, "run_id")
    run = own_run(request, await state.stores.runs.get(run_id))
    if run.status.is_terminal:
        raise _conflict_terminal(run)
    run = await state.orchestrator.cancel(run_id, reason=body.reason or "cancelled through the API")
    answer = CancelAnswer(run_id=run_id, status=run.status, cancel_requested=not run.status.is_terminal)
    return JSONResponse(json_with_iso(answer), status_code=202)


def _conflict_terminal(run: Run) -> HostError:
    return ConflictError(
        f"Run {run.run_id!r} is already {run.status}; there is nothing to cancel.",
        details={"run_id": run.run_id, "status": run.status.value},
    )


async def run_records(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, QueryModel)
    run_id = path_id(request, "run_id")
    context = await state.stores.runs.context(run_id)  # 404 for an unknown run
    answer = RunRecords(
        run_id=run_id,
        context=context,
        events=await state.stores.events.for_run(run_id, limit=1000),
        transcript=await state.stores.transcript.for_run(run_id, limit=1000),
    )
    return JSONResponse(json_with_iso(answer))


async def run_audit(request: Request) -> Response:
    state = api_state(request)
    query = parse_query(request, AuditQuery)
    run_id = path_id(request, "run_id")
    await state.stores.runs.get(run_id)
    items = await state.stores.audit.list(run_id, after=query.after, limit=min(query.limit + 1, 1000))
    has_more = len(items) > query.limit
    kept = items[: query.limit]
    answer = AuditPage(items=kept, next_after=kept[-1].seq if kept else query.after, has_more=has_more)
    return JSONResponse(json_with_iso(answer))


# -- endpoints: state --------------------------------------------------------------------------------


async def show_state(request: Request) -> Response:
    """One state value of an owner (the ids in the query make the owner, as for a run's grant)."""
    state = api_state(request)
    path = parse_model(StatePath, dict(request.path_params), "path")
    query = parse_query(request, StateOwnerQuery)
    owner = owner_from_ids(path.scope, query.model_dump())
    entry = await state.stores.state.get(path.scope, owner, path.key)
    if entry is None:
        raise NotFoundError(
            f"No {path.scope!r} state value {path.key!r} for owner {list(owner)!r}; check the ids "
            f"(GET /v1/state/{path.scope} lists what an owner holds).",
            details={"scope": path.scope, "key": path.key, "owner": list(owner)},
        )
    answer = StateValue(
        scope=path.scope,
        key=entry.key,
        owner=list(owner),
        value=entry.value,
        size=entry.size,
        updated_at=entry.updated_at,
        unservable=entry.unservable,
    )
    return JSONResponse(json_with_iso(answer))


async def list_state(request: Request) -> Response:
    """A page of an owner's state values in key order."""
    state = api_state(request)
    path = parse_model(StateScopePath, dict(request.path_params), "path")
    query = parse_query(request, StateListQuery)
    owner = owner_from_ids(path.scope, query.model_dump(exclude={"prefix", "limit", "cursor"}))
    page = await state.stores.state.list(
        path.scope, owner, prefix=query.prefix, limit=query.limit, cursor=query.cursor
    )
    answer = StatePage(
        scope=path.scope,
        owner=list(owner),
        items=list(page.items),
        next_cursor=page.next_cursor,
        has_more=page.has_more,
    )
    return JSONResponse(json_with_iso(answer))


async def delete_state(request: Request) -> Response:
    """Delete one state value, whatever it holds (also one too deep to be served)."""
    state = api_state(request)
    path = parse_model(StatePath, dict(request.path_params), "path")
    query = parse_query(request, StateOwnerQuery)
    owner = owner_from_ids(path.scope, query.model_dump())
    if not await state.stores.state.delete(path.scope, owner, path.key):
        raise NotFoundError(
            f"No {path.scope!r} state value {path.key!r} for owner {list(owner)!r}; check the ids "
            "(`mcphost state list` shows what an owner holds).",
            details={"scope": path.scope, "key": path.key, "owner": list(owner)},
        )
    logger.info("state value %r of scope %r owner %r deleted over the API", path.key, path.scope, owner)
    answer = StateDeleted(scope=path.scope, key=path.key, owner=list(owner), deleted=True)
    return JSONResponse(json_with_iso(answer))


# -- endpoints: runners, health, metrics -------------------------------------------------------------


async def list_runners(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, QueryModel)
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
    return JSONResponse(json_with_iso(answer))


async def list_agents(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, QueryModel)
    answer = AgentsView(
        agents=[
            AgentInfo(
                id=a.id,
                runner=a.runner,
                event_types=list(a.event_types),
                match=dict(a.match),
                concurrency=a.concurrency,
                timeout_s=a.timeout_s,
                hooks=[
                    source
                    for source, hook in sorted(state.hooks.items())
                    if hook.agent == a.id
                    or (hook.agent is None and ("*" in a.event_types or hook.event_type in a.event_types))
                ],
                tools=list(a.resources.tools),
                knowledge_bases=list(a.resources.knowledge_bases),
            )
            for a in state.bindings.agents
        ]
    )
    return JSONResponse(json_with_iso(answer))


async def healthz(request: Request) -> Response:
    state = api_state(request)
    if state.draining:
        raise UnavailableError("The host is shutting down.")
    health = await state.stores.health.check()  # cached for a second: polling stays cheap
    if health.reason is not None:
        raise StorageUnavailableError(
            f"The host's storage is unavailable: {health.reason}", details={"reason": health.reason}
        )
    answer = Health(
        status="ok",
        version=__version__,
        host_id=state.orchestrator.host_id,
        active_runs=len(state.orchestrator.active_run_ids()),
    )
    return JSONResponse(json_with_iso(answer))


async def metrics(request: Request) -> Response:
    state = api_state(request)
    plugins = [(p.name, p.restarts, p.state == "running") for p in state.registry.plugins()]
    text = state.metrics.render(active_runs=len(state.orchestrator.active_run_ids()), plugins=plugins)
    return Response(text, media_type=METRICS_CONTENT_TYPE)
