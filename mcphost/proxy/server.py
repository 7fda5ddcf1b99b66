"""`ModelProxy`: the per-run model endpoints, in the providers' own wire formats.

Routes (under `MODELS_PATH` = `/runs/{run_id}/models`):
- `POST /anthropic/v1/messages` — Anthropic Messages, streamed (SSE) or not; `GET /anthropic/v1/models`.
- `POST /openai/v1/chat/completions`, `POST /openai/v1/responses` — OpenAI Chat Completions and
  Responses, streamed or not; `POST /openai/v1/embeddings` — OpenAI Embeddings, for models of kind
  `embedding` (checked by `llm.embedding.body_problem`); `GET /openai/v1/models`.
The same routes under `/sessions/{session_id}/models` serve a warm session's current run, authenticated
by the session token (`_session.py` names the run; everything after is the run's own path).

Owns authenticating a model request (Host/Origin by the host's `HttpGuard`, then the run's token as
`x-api-key` or `Authorization: Bearer`, compared in constant time with the stored hash, and the grant
still active), the grant check (`grants.check` of `model:ID:invoke|stream|embed`), the budget reservation
(`stores.usage`, for agents with a model budget), relaying the call upstream through the model's
fallback chain (`llm.upstream`), and recording each attempt with its usage and cost (`_usage.UsageWriter`,
after the answer is relayed). Does not own the models' config or prices (`llm.catalog`), the wire
details (`llm.wire`), or the store. A recorded run's calls go into its recording, and a replay's are
answered from one without an upstream (`_tape.ModelTape`). Size: past 600 lines because one call's path
(token, grant, reservation, relay through the fallback chain, usage) is shared by three wire formats and
the model tools (`opened`), and splitting it would pass the call's private state between modules.

The request path, in order: the grant (from memory while the run executes on this process, else one
read of the runs table), the body, the reservation (one write transaction, only with a budget), the
upstream call on the shared client's pooled connections, the answer relayed as it comes; then the
call's usage handed to the writer, which batches the rows of many calls into one transaction.

Invariants:
- Every refusal and every failure is answered in the endpoint's own error shape (`wire.error_body`),
  never a 500: bad bodies 400/413, a token that is not the run's 401, a model not granted 403, a spent
  budget 429 naming its key, an upstream that fails, hangs or answers garbage 502/504. A stream that
  breaks after it started ends with the API's own error event (`wire.stream_error`).
- A request is passed upstream as the client sent it but for its `model` (the upstream's name) and,
  on a streamed Chat Completions request without it, `stream_options.include_usage` (so the usage can
  be counted). Only `upstream.PASSED_HEADERS` reach the upstream; the run token never does.
- A call at an endpoint whose format the model's provider does not speak is translated
  (`llm.translate`, LiteLLM's functions): the usage, the tape and the error
  shapes then see the client's format only. Without the `translate` extra it is refused (501).
- Every wait is bounded: the upstream's by the model's timeouts, the whole call by the run's deadline;
  a run that ends closes its calls' upstream streams (`end_run`).
- A token is refused once its run has ended, on every replica: a grant is trusted from memory only while
  the orchestrator says the run executes here (it stops saying so as the run's close begins, before the
  end is recorded); otherwise it is read from the runs table for each request.
- Every attempt gets a usage row, and a run's rows are written before its end is recorded: the
  orchestrator calls `settle` as a run begins to close (and `end_run` waits for calls that ended since).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import anyio
import httpx2
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from mcphost import tracing
from mcphost.errors import BudgetExceededError, RunNotFoundError, StorageUnavailableError, UnavailableError
from mcphost.grants import refusal, token_matches
from mcphost.guard import HttpGuard, declare_access
from mcphost.llm import ModelConfig, ModelFacts, WireFormat, fallback_chain, model_facts
from mcphost.llm.embedding import body_problem
from mcphost.llm.translate import (
    TranslationError,
    TranslationUnavailableError,
    translated_response,
    translating,
)
from mcphost.llm.upstream import Attempt, UpstreamFailedError, open_first
from mcphost.llm.wire import Api, ErrorKind, SseReader, StreamUsage, Usage, error_body, stream_error, usage_of
from mcphost.models import RunGrant
from mcphost.protocol import JSONObject
from mcphost.proxy._body import BodyRefusedError, parse_body, read_body
from mcphost.proxy._session import SessionRefusedError, no_run_message, session_run
from mcphost.proxy._spans import record_call
from mcphost.proxy._tape import ModelReplayAnswers, ModelTape, Refusal
from mcphost.proxy._usage import UsageWriter
from mcphost.stores import GrantRecord, Stores
from mcphost.stores.usage import AttemptEnd, CallStart, FinishedCall, ModelBudget
from mcphost.warm import SESSION_MODELS_PATH, WarmSessions

logger = logging.getLogger(__name__)

MODELS_PATH = "/runs/{run_id}/models"
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_OUTPUT_TOKENS = 4096
"""The output a call is reserved for when its body names no maximum."""
BYTES_PER_TOKEN = 3
"""A cautious estimate of a request's input tokens from its size (for its reservation only)."""
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")
_RELAYED_HEADERS = ("request-id", "x-request-id")
_WIRE_OF: Mapping[Api, WireFormat] = {
    "anthropic": "anthropic",
    "chat": "openai",
    "responses": "openai",
    "embeddings": "openai",
}
_OUT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")

MAX_CACHED_GRANTS = 10_000
OnCall = Callable[[str, str, tuple[int, int, int], float], None]
"""Called after each finished call with (model id, agent id, (input, output, cached) tokens, cost)."""
RunTrace = Callable[[str], Awaitable[tracing.Carrier | None]]
"""The W3C context of a run's span (the span around its runner), None when unknown."""


class _RefusedError(Exception):
    def __init__(self, status: int, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind: ErrorKind = kind
        self.message = message


@dataclass
class _Call:
    """One authenticated, granted call in flight."""

    run_id: str
    grant: RunGrant
    api: Api
    model_id: str
    body: JSONObject
    streamed: bool
    start: CallStart
    call_id: str | None
    """The call's `reserved` row, None when its agent has no model budget (nothing was reserved)."""
    created_at: float
    trace: tracing.Carrier | None = None
    """Where the call's span hangs: the run's span at the wire endpoints, None (the current span) for
    the model tools."""


def _token(headers: Headers) -> str | None:
    key = headers.get("x-api-key", "").strip()
    if key:
        return key
    scheme, _, token = headers.get("authorization", "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _a(kind: str) -> str:
    return f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"


def _reply(api: Api, status: int, kind: ErrorKind, message: str) -> JSONResponse:
    return JSONResponse(error_body(api, kind, message), status_code=status)


class ModelProxy:
    """The per-run model endpoints of every run, over the host's `[models]` and the runs' grants."""

    def __init__(
        self,
        stores: Stores,
        models: Mapping[str, ModelConfig],
        *,
        budgets: Mapping[str, ModelBudget] | None = None,
        guard: HttpGuard | None = None,
        on_call: OnCall | None = None,
        replay: ModelReplayAnswers | None = None,
        executing: Callable[[str], bool] | None = None,
        warm: WarmSessions | None = None,
        run_trace: RunTrace | None = None,
    ) -> None:
        """`executing(run_id)`: the run is executing on this process and its close has not begun (the
        orchestrator's word); such a run's grant is read once and then checked in memory. Without it,
        every request reads the grant from the runs table. `warm`: the warm sessions whose model routes
        (`/sessions/{session_id}/models/...`) this serves (None: those paths are 404). `run_trace(run_id)`:
        the run's span context, which the `chat {model}` span of a call at the wire endpoints is a child
        of (else the context stored with the grant, its ingest span)."""
        self._stores = stores
        self._warm = warm
        self._tape = ModelTape(stores, replay)
        self._models = dict(models)
        self._budgets = {agent: b for agent, b in (budgets or {}).items() if b.any}
        """The agents with a model budget: only their calls are reserved before the upstream is called."""
        self._guard = guard or HttpGuard()
        self._on_call = on_call
        self._executing = executing
        self._run_trace = run_trace
        self._providers = {m: entry.provider for m, entry in self._models.items()}
        self._grants: dict[str, GrantRecord] = {}
        """Grants of runs executing here, as read from the runs table (`_authenticate`)."""
        self._writer = UsageWriter(stores.usage)
        self._facts: dict[str, ModelFacts] = {}
        self._client: httpx2.AsyncClient | None = None
        self._open: dict[str, set[httpx2.Response]] = {}
        """Upstream responses being relayed, by run: closed when the run ends."""
        routes: list[tuple[str, str, Api]] = [
            ("/anthropic/v1/messages", "POST", "anthropic"),
            ("/anthropic/v1/models", "GET", "anthropic"),
            ("/openai/v1/chat/completions", "POST", "chat"),
            ("/openai/v1/responses", "POST", "responses"),
            ("/openai/v1/embeddings", "POST", "embeddings"),
            ("/openai/v1/models", "GET", "chat"),
        ]
        self._routes: list[BaseRoute] = [
            declare_access(
                Route(base + path, endpoint=self._endpoint(api), methods=[method], name=f"{name}_{i}"),
                "run-token",  # the run's token, or the warm session's: not an API key
            )
            for base, name in (
                (MODELS_PATH, "mcphost_models"),
                (SESSION_MODELS_PATH, "mcphost_session_models"),
            )
            for i, (path, method, api) in enumerate(routes)
        ]

    @property
    def routes(self) -> list[BaseRoute]:
        return list(self._routes)

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[ModelProxy]:
        """Serve calls: owns the upstream HTTP client (its connections are closed on exit; none without
        `[models]`, where no call can reach an upstream: its TLS context costs a start ~50 ms) and the
        usage writer (what it holds is written on exit)."""
        async with self._writer.running(), AsyncExitStack() as stack:
            if self._models:
                self._client = await stack.enter_async_context(
                    httpx2.AsyncClient(follow_redirects=False, trust_env=False)
                )
            try:
                yield self
            finally:
                self._client = None

    async def settle(self, run_id: str) -> None:
        """The run begins to close: forget its grant here and return once its calls' usage rows are written."""
        self._grants.pop(run_id, None)
        await self._writer.settle(run_id)

    async def end_run(self, run_id: str) -> None:
        """The run ended: close the upstream streams its calls are relaying (each ends with an error event),
        and wait for the usage rows of calls that ended since `settle`."""
        self._grants.pop(run_id, None)
        for response in self._open.pop(run_id, set()):
            await response.aclose()
        await self._writer.settle(run_id)

    def facts(self, model_id: str) -> ModelFacts:
        found = self._facts.get(model_id)
        if found is None:
            found = self._facts[model_id] = model_facts(self._models[model_id])
        return found

    def _endpoint(self, api: Api) -> _Asgi:
        async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
            response = await self._handle(api, scope, receive)
            await response(scope, receive, send)

        return _Asgi(endpoint)

    # -- one request -------------------------------------------------------------------------------------

    async def _handle(self, api: Api, scope: Scope, receive: Receive) -> Response:
        headers = Headers(scope=scope)
        try:
            run_id, grant = await self._authenticate(api, scope, headers)
        except _RefusedError as refused:  # not the run's request: neither recorded nor replayed
            return _reply(api, refused.status, refused.kind, refused.message)
        if scope["method"] == "GET":
            return self._list(api, grant)
        raw: bytes | None = None
        body: JSONObject | None = None
        try:
            try:
                raw = await read_body(headers, receive)
                body = parse_body(raw)
            except BodyRefusedError as refused:
                raise _RefusedError(refused.status, refused.kind, refused.message) from None
            model_id = self._granted(api, grant, body)
            response = await self._call(
                api, run_id, grant, model_id, body, headers, str(scope.get("query_string", b""), "latin-1")
            )
        except _RefusedError as refused:
            # The host's own refusal of the run's request: recorded and replayed like an answer.
            reply = _reply(api, refused.status, refused.kind, refused.message)
            return await self._tape.refused(api, run_id, grant.record, Refusal(raw, body, reply))
        if grant.record and not isinstance(response, StreamingResponse):  # streams: `_relay`
            await self._tape.record_whole(api, run_id, model_id, body, response.status_code, response.body)
        return response

    async def _authenticate(self, api: Api, scope: Scope, headers: Headers) -> tuple[str, RunGrant]:
        site = self._guard.site_refusal(headers)
        if site is not None:
            raise _RefusedError(site.status, "permission", site.message)
        params = scope.get("path_params", {})
        if "session_id" in params:
            return await self._session(str(params["session_id"]), headers)
        run_id = str(params.get("run_id", ""))
        if not _RUN_ID.match(run_id):
            raise _RefusedError(404, "not_found", f"run {run_id[:100]!r} does not exist")
        record = await self._read_grant(run_id)
        token = _token(headers)
        if token is None:
            raise _RefusedError(
                401,
                "authentication",
                "missing credential: send the run token as x-api-key or Authorization: Bearer",
            )
        if not token_matches(token, record.grant.token_hash):
            raise _RefusedError(401, "authentication", "the credential is not this run's token")
        if not record.active:
            raise _RefusedError(
                401, "authentication", f"run {run_id} is not active: its token was revoked when it ended"
            )
        return run_id, record.grant

    async def _session(self, session_id: str, headers: Headers) -> tuple[str, RunGrant]:
        """The warm session's current run and its grant, when the credential is the session's token."""
        try:
            run_id = await session_run(self._warm, session_id, _token(headers))
        except SessionRefusedError as refused:
            raise _RefusedError(refused.status, refused.kind, refused.message) from None
        record = await self._read_grant(run_id)
        if not record.active:  # the run ended between the two reads
            raise _RefusedError(403, "permission", no_run_message(session_id))
        return run_id, record.grant

    async def _read_grant(self, run_id: str) -> GrantRecord:
        try:
            return await self._grant(run_id)
        except RunNotFoundError:
            raise _RefusedError(404, "not_found", f"run {run_id} does not exist") from None
        except StorageUnavailableError as exc:
            logger.warning("could not read the grant of run %s: %s", run_id, exc.__cause__ or exc.message)
            raise _RefusedError(503, "upstream", "the host cannot read run grants right now; retry") from None

    async def _grant(self, run_id: str) -> GrantRecord:
        """The run's grant record: from memory while the run executes here (its close, which the
        orchestrator begins before it records the end, turns `executing` false), else the runs table."""
        local = self._executing is not None and self._executing(run_id)
        record = self._grants.get(run_id) if local else None
        if record is not None and record.grant.deadline_at > time.time():
            return record
        record = await self._stores.runs.grant(run_id)
        if local and record.active:
            if len(self._grants) >= MAX_CACHED_GRANTS:
                self._grants.clear()
            self._grants[run_id] = record
        return record

    def _list(self, api: Api, grant: RunGrant) -> Response:
        wire = _WIRE_OF[api]
        ids = [m for m in sorted(grant.models) if m in self._models and self._models[m].wire == wire]
        if wire == "anthropic":
            data = [
                {"type": "model", "id": m, "display_name": m, "created_at": "1970-01-01T00:00:00Z"}
                for m in ids
            ]
            return JSONResponse(
                {
                    "data": data,
                    "has_more": False,
                    "first_id": ids[0] if ids else None,
                    "last_id": ids[-1] if ids else None,
                }
            )
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": m, "object": "model", "created": 0, "owned_by": "mcphost"} for m in ids],
            }
        )

    def _granted(self, api: Api, grant: RunGrant, body: JSONObject) -> str:
        """The id of the host model the body names, when the run may call it so at this endpoint."""
        model_id = str(body["model"]).removeprefix("host:")
        how = "embed" if api == "embeddings" else "stream" if body.get("stream") is True else "invoke"
        if model_id not in grant.models or how not in grant.model_calls:
            message, _ = refusal(grant, f"model:{model_id[:64]}:{how}", f"{how} model {model_id[:64]!r}")
            raise _RefusedError(403, "permission", message)
        entry = self._models.get(model_id)
        if entry is None:
            raise _RefusedError(
                404, "not_found", f"model {model_id!r} is granted but no longer configured on this host"
            )
        wanted = "embedding" if api == "embeddings" else "chat"
        if entry.kind != wanted:
            raise _RefusedError(
                400,
                "invalid_request",
                f"model {model_id!r} is {_a(entry.kind)} model, not {_a(wanted)} model",
            )
        problem = body_problem(body) if api == "embeddings" else None
        if problem is not None:
            raise _RefusedError(400, "invalid_request", problem)
        return model_id

    async def _begin(self, api: Api, run_id: str, grant: RunGrant, model_id: str, body: JSONObject) -> _Call:
        """A granted call's start: its usage facts and, when its agent has a model budget, its reservation.

        Raises:
            BudgetExceededError: a budget has no room for the call.
            StorageUnavailableError: the reservation could not be written.
        """
        agent_id = grant.layers.agent_id if grant.layers is not None else (grant.binding_id or "")
        budget = self._budgets.get(agent_id)
        tokens, usd = (0, 0.0) if budget is None else self._reservation(model_id, body, len(json.dumps(body)))
        streamed = body.get("stream") is True
        start = CallStart(
            run_id=run_id,
            agent_id=agent_id,
            actor_id=grant.actor_id,
            conversation_id=grant.conversation_id,
            model_id=model_id,
            upstream_model=self._models[model_id].model,
            kind=self._models[model_id].kind,
            api=api,
            streamed=streamed,
            reserved_tokens=tokens,
            reserved_usd=usd,
        )
        created_at = time.time()
        call_id = None if budget is None else await self._stores.usage.reserve(start, budget)
        return _Call(run_id, grant, api, model_id, body, streamed, start, call_id, created_at)

    def _reservation(self, model_id: str, body: JSONObject, size: int) -> tuple[int, float]:
        out = (
            0
            if self._models[model_id].kind == "embedding"
            else next(
                (v for f in _OUT_FIELDS if isinstance(v := body.get(f), int) and v > 0),
                DEFAULT_MAX_OUTPUT_TOKENS,
            )
        )
        out = min(out, 10**9)
        inp = size // BYTES_PER_TOKEN
        facts = self.facts(model_id)
        return inp + out, facts.cost_usd(input_tokens=inp, output_tokens=out, cached_tokens=0)

    async def _call(
        self,
        api: Api,
        run_id: str,
        grant: RunGrant,
        model_id: str,
        body: JSONObject,
        headers: Headers,
        query: str,
    ) -> Response:
        replayed = self._tape.replayed(api, run_id, model_id, body)
        if replayed is not None:  # a replay: answered from the recording, never upstream
            return replayed
        client = self._client
        if client is None:
            raise _RefusedError(503, "upstream", "the host's model endpoints are not running")
        streamed = body.get("stream") is True
        if api == "chat" and streamed and "stream_options" not in body:
            body = {**body, "stream_options": {"include_usage": True}}
        try:
            sent_api, sent, translation = await translating(api, self._models[model_id], model_id, body)
        except TranslationUnavailableError as exc:
            raise _RefusedError(501, "upstream", str(exc)) from None
        except TranslationError as exc:
            raise _RefusedError(400, "invalid_request", str(exc)) from None
        if translation is not None:  # the client's query and headers are its own API's
            query, headers = "", Headers()
        try:
            call = await self._begin(api, run_id, grant, model_id, body)
        except BudgetExceededError as exc:
            raise _RefusedError(429, "rate_limit", exc.message) from None
        except StorageUnavailableError:
            raise _RefusedError(
                503, "upstream", "the host cannot record model calls right now; retry"
            ) from None
        if tracing.enabled():
            call.trace = await self._trace_parent(run_id, grant)
        entry = self._models[model_id]
        chain = [(m, self._models[m]) for m in fallback_chain(self._models, model_id)]
        passed = {k.lower(): v for k, v in headers.items()}
        remaining = grant.deadline_at - time.time()
        attempts: list[Attempt] = []
        try:
            with anyio.fail_after(max(0.0, remaining)):
                attempts, response = await open_first(client, chain, sent_api, sent, query, passed)
            if translation is not None:
                response = translated_response(translation, response)
        except UpstreamFailedError as failed:
            self._finish(call, failed.attempts, None, None)
            status = {"rate_limit": 429, "timeout": 504}.get(failed.kind, 502)
            said = "; ".join(a.error or "" for a in failed.attempts)
            return _reply(api, status, failed.kind, f"every model of the chain failed: {said}")
        except TimeoutError:
            failed_attempt = Attempt(model_id=model_id, upstream_model=entry.model, attempt=len(attempts) + 1)
            failed_attempt.status, failed_attempt.error = "failed", "the run's deadline passed"
            self._finish(call, [*attempts, failed_attempt], None, None)
            return _reply(
                api, 504, "timeout", f"the run's deadline passed before model {model_id!r} answered"
            )
        kind = response.headers.get("content-type", "")
        if streamed and response.status_code == 200 and kind.startswith("text/event-stream"):
            return self._relay(call, attempts, response)
        return await self._whole(call, attempts, response)

    async def _trace_parent(self, run_id: str, grant: RunGrant) -> tracing.Carrier | None:
        found = await self._run_trace(run_id) if self._run_trace is not None else None
        return found or tracing.carrier_of(grant.traceparent, grant.tracestate)

    async def _whole(self, call: _Call, attempts: list[Attempt], response: httpx2.Response) -> Response:
        """Read a whole answer, then answer it (the upstream's own 4xx included) with its usage recorded."""
        last = attempts[-1]
        raw = bytearray()
        try:
            async for chunk in response.aiter_raw():
                raw.extend(chunk)
                if len(raw) > MAX_RESPONSE_BYTES:
                    raise _RefusedError(
                        502,
                        "upstream",
                        f"model {last.model_id!r} answered more than {MAX_RESPONSE_BYTES} bytes",
                    )
        except httpx2.TimeoutException:
            last.status, last.error_kind = "failed", "timeout"
            last.error = f"model {last.model_id!r} stopped answering mid-body"
        except httpx2.TransportError as exc:
            last.status, last.error_kind = "failed", "upstream"
            last.error = f"model {last.model_id!r} broke off its answer: {type(exc).__name__}"
        except _RefusedError as refused:
            last.status, last.error = "failed", refused.message
        finally:
            await response.aclose()
        if last.status == "failed":
            self._finish(call, attempts, None, None)
            return _reply(
                call.api,
                504 if last.error_kind == "timeout" else 502,
                last.error_kind or "upstream",
                last.error or "",
            )
        try:
            payload = json.loads(bytes(raw))
        except (ValueError, RecursionError):
            last.status = "failed"
            last.error = (
                f"model {last.model_id!r} answered HTTP {response.status_code} with a body that is not JSON"
            )
            self._finish(call, attempts, None, None)
            return _reply(call.api, 502, "upstream", last.error)
        usage = usage_of(call.api, payload) if response.status_code == 200 else None
        if response.status_code != 200:
            last.status = "failed"
            last.error = f"model {last.model_id!r} answered HTTP {response.status_code}"
        self._finish(call, attempts, usage, None)
        headers = {h: v for h in _RELAYED_HEADERS if (v := response.headers.get(h)) is not None}
        return Response(
            bytes(raw), status_code=response.status_code, media_type="application/json", headers=headers
        )

    def _relay(self, call: _Call, attempts: list[Attempt], response: httpx2.Response) -> Response:
        """Relay a stream as it arrives, reading its usage on the way."""
        self._open.setdefault(call.run_id, set()).add(response)

        async def chunks() -> AsyncGenerator[bytes]:
            last = attempts[-1]
            reader, usage = SseReader(), StreamUsage(call.api)
            first: float | None = None
            try:
                async for chunk in response.aiter_raw():
                    if first is None:
                        first = time.monotonic()
                    for event, data in reader.feed(chunk):
                        usage.feed(event, data)
                    yield chunk
                if not usage.finished:
                    last.status = "failed"
                    last.error = usage.error or f"model {last.model_id!r} ended its stream before the end"
                    if usage.error is None:
                        yield stream_error(call.api, "upstream", last.error)
            except (httpx2.TimeoutException, httpx2.TransportError, httpx2.StreamError) as exc:
                last.status = "failed"
                ended = call.run_id not in self._open or response not in self._open.get(call.run_id, set())
                if ended:
                    last.error = f"run {call.run_id} ended while model {last.model_id!r} was streaming"
                elif isinstance(exc, httpx2.TimeoutException):
                    last.error = f"model {last.model_id!r} sent nothing for {self._models[last.model_id].timeout_s:g} s"
                else:
                    last.error = f"model {last.model_id!r} broke off its stream: {type(exc).__name__}"
                yield stream_error(
                    call.api,
                    "timeout" if isinstance(exc, httpx2.TimeoutException) else "upstream",
                    last.error,
                )
            finally:
                with anyio.CancelScope(shield=True):
                    self._open.get(call.run_id, set()).discard(response)
                    await response.aclose()
                    self._finish(call, attempts, usage.usage, first)

        headers = {h: v for h in _RELAYED_HEADERS if (v := response.headers.get(h)) is not None}
        relayed: AsyncIterator[bytes] = chunks()
        if call.grant.record:
            relayed = self._tape.tee(call.api, call.run_id, call.model_id, call.body, relayed)
        return StreamingResponse(
            relayed, media_type="text/event-stream", headers={**headers, "cache-control": "no-cache"}
        )

    def _finish(self, call: _Call, attempts: list[Attempt], usage: Usage | None, first: float | None) -> None:
        """Hand the call's attempts (the last with its usage and cost) to the usage writer and count it."""
        now = time.monotonic()
        ends: list[AttemptEnd] = []
        for index, attempt in enumerate(attempts):
            is_last = attempt is attempts[-1]
            # an attempt that failed lasted until the next one started
            ended = now if is_last else attempts[index + 1].started
            found = usage if is_last and usage is not None else Usage()
            facts = self.facts(attempt.model_id)
            cost = facts.cost_usd(
                input_tokens=found.input_tokens,
                output_tokens=found.output_tokens,
                cached_tokens=found.cached_tokens,
            )
            ends.append(
                AttemptEnd(
                    model_id=attempt.model_id,
                    upstream_model=attempt.upstream_model,
                    attempt=attempt.attempt,
                    status=attempt.status,
                    http_status=attempt.http_status,
                    error=attempt.error,
                    response_model=found.model,
                    input_tokens=found.input_tokens,
                    output_tokens=found.output_tokens,
                    cached_tokens=found.cached_tokens,
                    cost_usd=cost,
                    latency_ms=(ended - attempt.started) * 1000,
                    ttft_ms=((first if first is not None else now) - attempt.started) * 1000
                    if is_last
                    else None,
                )
            )
        self._writer.add(
            FinishedCall(
                start=call.start, call_id=call.call_id, created_at=call.created_at, attempts=tuple(ends)
            )
        )
        record_call(call.start, call.created_at, attempts, ends, self._providers, call.trace)
        last = ends[-1]
        if self._on_call is not None:
            agent = (
                call.grant.layers.agent_id if call.grant.layers is not None else (call.grant.binding_id or "")
            )
            self._on_call(
                last.model_id,
                agent,
                (last.input_tokens, last.output_tokens, last.cached_tokens),
                last.cost_usd,
            )

    @asynccontextmanager
    async def opened(
        self, api: Api, run_id: str, grant: RunGrant, model_id: str, body: JSONObject
    ) -> AsyncGenerator[OpenCall]:
        """One call of a granted host model for the MCP model tools (`mcphost.proxy.calls`), through the
        same budget reservation, fallback chain and usage rows as the wire endpoints: reserve, open the
        first model of the chain that answers, hand its open answer to the caller to read, then record
        every attempt with the usage the caller set. The caller bounds the whole call (the run's deadline).

        Raises:
            BudgetExceededError: a budget has no room for the call (nothing was sent upstream).
            UpstreamFailedError: every model of the chain failed.
        """
        client = self._client
        if client is None:
            raise UnavailableError("the host's model endpoints are not running")
        entry = self._models[model_id]
        call = await self._begin(api, run_id, grant, model_id, body)
        chain = [(m, self._models[m]) for m in fallback_chain(self._models, model_id)]
        attempts: list[Attempt] = []
        found: OpenCall | None = None
        try:
            attempts, response = await open_first(client, chain, api, body, "", {})
            found = OpenCall(response, attempts)
            try:
                yield found
            finally:
                with anyio.CancelScope(shield=True):
                    await response.aclose()
        except UpstreamFailedError as failed:
            attempts = failed.attempts
            raise
        except anyio.get_cancelled_exc_class():
            ended = "the call was cancelled or the run's deadline passed before the model answered"
            if found is not None:
                found.fail(ended, "timeout")
            else:
                attempts = [Attempt(model_id, entry.model, 1, status="failed", error=ended)]
            raise
        finally:
            if (
                not attempts
            ):  # open_first raised what it does not catch: still one row, not a held reservation
                attempts = [Attempt(model_id, entry.model, 1, status="failed", error="the call failed")]
            self._finish(call, attempts, found.usage if found else None, found.first if found else None)


@dataclass
class OpenCall:
    """A host model call opened for the MCP model tools (`ModelProxy.opened`): the answer of the model of
    the chain that answered, still unread, and what the reader found."""

    response: httpx2.Response
    attempts: list[Attempt]
    usage: Usage | None = None
    first: float | None = None
    """When the first streamed byte arrived (`time.monotonic()`), for the time to first token."""

    def fail(self, message: str, kind: ErrorKind = "upstream") -> None:
        """Record the answer as unusable: the last attempt failed with `message`."""
        last = self.attempts[-1]
        last.status, last.error, last.error_kind = "failed", message, kind


class _Asgi:
    """A plain ASGI callable, which Starlette's `Route` passes the raw call to (a function would be
    called as a request/response endpoint)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)
