"""The runtime protocol (docs/protocol.md §12): `/v1/runtime/register|heartbeat|claim` and
`/v1/runtime/runs/{run_id}/results|output|end`, authenticated by a runtime token only.

Owns authenticating a runtime (`Authorization: Bearer <runtime token>`: an API key or a run token is
refused 401 here, and a runtime token anywhere else), parsing its bodies (`runtimes/wire.py`, capped and
depth-checked before any model sees them) and answering from the queue. Does not own the queue
(`stores/dispatch.py`) or what the host does with posted results (`runtimes/remote.py`).

Invariants:
- Every refusal is a HostError (401 unknown token, 403 disabled runtime, 400/413 bad body, 409 with
  `details.reason` for a run not held, a stale fence or a sequence gap): never a 500 for bad input.
- A claim long-polls at most `wait_s` (≤ 30 s): woken at once by a run queued in this process, else
  looking again every `CLAIM_POLL_S`; a runtime whose client went away claims nothing. The claim's
  own transaction checks the runtime is still `online` (a drain takes effect at once); the answer's
  state and a removal are read again every `CLAIM_POLL_S`, not on every wake.
- A claim's context carries the claim's fenced MCP token, never the run's own token.
- A run's output is kept as an artifact of the run only while the posting runtime holds it under that
  fence (checked before the bytes are stored and again when they are recorded).
- A claim's `projection` (the agent's secrets, its workspace on this runtime, its skills' files) is
  built for the answer and never stored; a run whose projection cannot be built fails with the reason.
"""

from __future__ import annotations

import json
import time

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from mcphost.api._http import parse_json, parse_query, path_id, read_body
from mcphost.api._models import QueryModel
from mcphost.api._state import api_state
from mcphost.context import with_token
from mcphost.errors import ForbiddenError, UnauthorizedError, UnavailableError
from mcphost.feed import Signal
from mcphost.guard import declare_access
from mcphost.projection import ProjectionError, Projector
from mcphost.protocol import AgentRunContext, ProtocolModel, RunProjection
from mcphost.runtimes.fence import fenced_token
from mcphost.runtimes.remote import RemoteRuns
from mcphost.runtimes.wire import (
    MAX_BODY_BYTES,
    MAX_OUTPUT_BYTES,
    RUNTIME_PREFIX,
    ClaimAnswer,
    ClaimBody,
    ClaimedRun,
    EndAnswer,
    EndBody,
    HeartbeatAnswer,
    HeartbeatBody,
    HeldAnswer,
    OutputAnswer,
    OutputBody,
    RegisterAnswer,
    RegisterBody,
    ResultsAnswer,
    ResultsBody,
)
from mcphost.stores import RuntimeRecord
from mcphost.stores.dispatch import Claim, PostedResult

CLAIM_POLL_S = 0.25
"""How often a waiting claim looks at the queue when nothing in this process woke it."""
SMALL_BODY_BYTES = 256 * 1024
"""The cap of every body but a results batch."""


def _remote(request: Request) -> RemoteRuns:
    remote = api_state(request).orchestrator.remote
    if remote is None:
        raise UnavailableError("This host executes no remote runs.")
    return remote


async def _runtime(request: Request) -> RuntimeRecord:
    value = request.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise UnauthorizedError(
            "The runtime protocol needs Authorization: Bearer <runtime token> (the token `mcphost runtimes "
            "add NAME` printed)."
        )
    found = await api_state(request).stores.runtimes.authenticate(token)
    if found is None:
        raise UnauthorizedError(
            "Not a runtime token: unknown, or its runtime was removed. API keys and run tokens are not "
            "accepted here; register a runtime with `mcphost runtimes add NAME`."
        )
    if found.state == "disabled":
        raise ForbiddenError(
            f"Runtime {found.name!r} is disabled; an operator enables it with `mcphost runtimes enable "
            f"{found.name}`.",
            details={"runtime": found.name},
        )
    return found


def _answer(model: ProtocolModel) -> Response:
    return JSONResponse(model.model_dump(mode="json"))


async def register(request: Request) -> Response:
    runtime = await _runtime(request)
    parse_query(request, QueryModel)
    body = parse_json(RegisterBody, await read_body(request, SMALL_BODY_BYTES))
    remote = _remote(request)
    record = await api_state(request).stores.runtimes.register(
        runtime.runtime_id,
        capabilities=body.capabilities.model_dump(mode="json"),
        slots=body.slots,
        labels=body.labels,
    )
    return _answer(
        RegisterAnswer(
            runtime_id=record.runtime_id,
            name=record.name,
            state=record.state,
            labels=record.effective_labels,
            lease_s=remote.lease_s,
            heartbeat_s=remote.heartbeat_s,
        )
    )


async def heartbeat(request: Request) -> Response:
    runtime = await _runtime(request)
    parse_query(request, QueryModel)
    body = parse_json(HeartbeatBody, await read_body(request, SMALL_BODY_BYTES))
    remote = _remote(request)
    kept, lost = await api_state(request).stores.dispatch.heartbeat(
        runtime, [(r.run_id, r.fence) for r in body.runs], lease_s=remote.lease_s
    )
    return _answer(
        HeartbeatAnswer(
            state=runtime.state,
            runs=[HeldAnswer(run_id=k.run_id, fence=k.fence, cancel=k.cancel_reason) for k in kept],
            lost=lost,
            lease_s=remote.lease_s,
            heartbeat_s=remote.heartbeat_s,
        )
    )


async def claim(request: Request) -> Response:
    runtime = await _runtime(request)
    parse_query(request, QueryModel)
    body = parse_json(ClaimBody, await read_body(request, SMALL_BODY_BYTES))
    state = api_state(request)
    remote = _remote(request)
    until = time.monotonic() + body.wait_s
    read_at = time.monotonic()
    woken = False
    while True:
        ticket = remote.queued.ticket()
        if runtime.state != "online":
            return _answer(ClaimAnswer(run=None, state=runtime.state))
        projector = state.orchestrator.projector
        workspaces = projector.workspaces_of(runtime.name) if projector is not None else frozenset[str]()
        claimed = await state.stores.dispatch.claim(
            runtime, lease_s=remote.lease_s, look=not woken, workspaces=workspaces
        )
        if claimed is not None:
            try:
                projection = await anyio.to_thread.run_sync(_projection, projector, claimed, runtime)
            except ProjectionError as exc:
                await _fail_claimed(request, runtime, claimed, exc.message)
                continue  # that run failed with the reason; look for another
            ctx = AgentRunContext.model_validate(claimed.context)
            token = fenced_token(claimed.token_hash, claimed.run_id, claimed.fence)
            run = ClaimedRun(
                run_id=claimed.run_id,
                runner_id=claimed.runner_id,
                fence=claimed.fence,
                attempt=claimed.attempt,
                lease_until=claimed.lease_until,
                deadline_at=claimed.deadline_at,
                context=with_token(ctx, token).model_dump(mode="json"),
                projection=projection,
            )
            # Dumped once, here: the projection (secrets included) is in this answer only.
            return _answer(ClaimAnswer(run=run, state=runtime.state))
        remaining = until - time.monotonic()
        if remaining <= 0:
            return _answer(ClaimAnswer(run=None, state=runtime.state))
        await Signal.wait(ticket, min(remaining, CLAIM_POLL_S))
        woken = ticket.is_set()  # a run was queued here: claim without looking first
        if await request.is_disconnected():
            return _answer(ClaimAnswer(run=None, state=runtime.state))
        if time.monotonic() - read_at < CLAIM_POLL_S:
            continue  # woken by a queued run: claim it at once (the runtime was read just now)
        refreshed = await state.stores.runtimes.authenticate_id(runtime.runtime_id)
        if refreshed is None:
            raise UnauthorizedError("Not a runtime token: its runtime was removed while it waited.")
        runtime, read_at = refreshed, time.monotonic()


def _projection(projector: Projector | None, claimed: Claim, runtime: RuntimeRecord) -> RunProjection | None:
    """The claimed run's projection for this runtime (its agent's secrets, workspace, skill files)."""
    if projector is None or claimed.agent_id is None:
        return None
    agent = projector.agent(claimed.agent_id)
    if agent is None:
        raise ProjectionError(
            f"Agent {claimed.agent_id!r} of run {claimed.run_id!r} is not configured on this host any more."
        )
    return projector.remote(agent, runtime.name)


async def _fail_claimed(request: Request, runtime: RuntimeRecord, claimed: Claim, why: str) -> None:
    """End a claimed run whose projection cannot be built as its runtime would: one `run.failed`
    result with the reason, then its end (the host executing it journals them as any)."""
    failed = {
        "type": "run.failed",
        "run_id": claimed.run_id,
        "sequence": 1,
        "timestamp": time.time(),
        "data": {"code": "runtime_error", "message": why[:8000], "retryable": False},
    }
    dispatch = api_state(request).stores.dispatch
    item = PostedResult(seq=1, nbytes=_compact_size(failed), dropped=False, result=failed)
    await dispatch.post_results(runtime.runtime_id, claimed.run_id, claimed.fence, 1, [item])
    await dispatch.post_end(runtime.runtime_id, claimed.run_id, claimed.fence, "failed", 1)
    _remote(request).posted(claimed.run_id)


def _compact_size(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


async def post_results(request: Request) -> Response:
    runtime = await _runtime(request)
    parse_query(request, QueryModel)
    run_id = path_id(request, "run_id")
    body = parse_json(ResultsBody, await read_body(request, MAX_BODY_BYTES))
    items: list[PostedResult] = []
    for offset, item in enumerate(body.results):
        if item.dropped:
            posted = PostedResult(
                seq=body.first_seq + offset, nbytes=item.nbytes or 0, dropped=True, result={"run_id": run_id}
            )
        else:
            posted = PostedResult(
                seq=body.first_seq + offset,
                nbytes=_compact_size(item.result),
                dropped=False,
                result=item.result,
            )
        items.append(posted)
    through, cancel = await api_state(request).stores.dispatch.post_results(
        runtime.runtime_id, run_id, body.fence, body.first_seq, items, body.end
    )
    _remote(request).posted(run_id)
    return _answer(ResultsAnswer(accepted_through=through, cancel=cancel))


OUTPUT_MIME = "text/plain; charset=utf-8"


def output_text(body: OutputBody) -> bytes:
    """The artifact's bytes: the output, after a line saying what was cut before it (if anything)."""
    head = ""
    if body.cut_bytes or body.cut_lines:
        head = (
            f"[mcphost: {body.cut_bytes} earlier bytes in {body.cut_lines} lines were cut on the runtime; "
            f"the newest {MAX_OUTPUT_BYTES} bytes at most are kept]\n"
        )
    return (head + body.text).encode()


async def post_output(request: Request) -> Response:
    runtime = await _runtime(request)
    parse_query(request, QueryModel)
    run_id = path_id(request, "run_id")
    body = parse_json(OutputBody, await read_body(request, MAX_BODY_BYTES))
    stores = api_state(request).stores
    await stores.dispatch.check_held(runtime.runtime_id, run_id, body.fence)
    data = output_text(body)
    stored = await stores.artifacts.put_bytes(
        data,
        name=f"runtime-output-{run_id}-{body.fence}.log",
        mime_type=OUTPUT_MIME,
        max_bytes=MAX_OUTPUT_BYTES + 1024,
        owner_run_id=run_id,
    )
    await stores.dispatch.post_output(
        runtime.runtime_id,
        run_id,
        body.fence,
        artifact_id=stored.artifact_id,
        size=stored.size,
        cut_bytes=body.cut_bytes,
    )
    return _answer(OutputAnswer(artifact_id=stored.artifact_id, size=stored.size))


async def post_end(request: Request) -> Response:
    runtime = await _runtime(request)
    parse_query(request, QueryModel)
    run_id = path_id(request, "run_id")
    body = parse_json(EndBody, await read_body(request, SMALL_BODY_BYTES))
    await api_state(request).stores.dispatch.post_end(
        runtime.runtime_id, run_id, body.fence, body.status, body.last_seq
    )
    _remote(request).posted(run_id)
    return _answer(EndAnswer(run_id=run_id))


def runtime_routes() -> list[BaseRoute]:
    """The runtime protocol's routes, each marked `runtime-token` (the API guard lets their prefix
    through; each handler authenticates the runtime itself)."""
    table = (
        ("register", register),
        ("heartbeat", heartbeat),
        ("claim", claim),
        ("runs/{run_id}/results", post_results),
        ("runs/{run_id}/output", post_output),
        ("runs/{run_id}/end", post_end),
    )
    return [
        declare_access(
            Route(RUNTIME_PREFIX + path, handler, methods=["POST"], name=f"runtime_{handler.__name__}"),
            "runtime-token",
        )
        for path, handler in table
    ]
