"""The facts MCP server proper: one SDK `Server` for every run, and the pipeline each call goes through.

Owns the low-level `mcp.server.lowlevel.Server` with its handlers (tools, resources, prompts), the call
pipeline (grant → deadline → rate and budget → permission → arguments → handler → audit) and the
registry of in-flight calls that `cancel_run` cancels. Does not authenticate HTTP requests or own
sessions (`server.py` does and puts the authenticated `RunAccess` into the request scope).

Why the low-level `Server` and not `MCPServer`: `tools/list` must be cut per run from tools built once,
every failure must be a PROTOCOL §5 `is_error` result with structured content, and `MCPServer`
configures process-wide logging, which only the CLI (`mcphost/cli/`) may do.

Invariants:
- Every `tools/call`, `resources/read` and `prompts/get` — allowed, refused, failed or cancelled —
  writes exactly one audit row (run, tool, SHA-256 of the canonical arguments, bytes in/out, outcome
  ok|error|refused, code, duration) before the answer goes out. The row is written under a shield with a
  bounded wait (group-committed by `AuditWriter`), so a call cancelled by its client or by `cancel_run`
  is still audited; a failure to write it is logged, never turned into a different answer. Each row
  is counted once written (`on_call`: the host's MCP-call metric), refused HTTP requests included.
- Checks run in a fixed order before any handler: the grant is active (`unauthorized`), the deadline has
  not passed (`deadline_exceeded`), the run is within its rate and budgets (`rate_limited`), the tool is
  in the grant (`unauthorized`; an unknown name is `not_found`), the arguments validate
  (`invalid_argument`, which includes arguments nested deeper than `MAX_JSON_DEPTH`, for facts and
  host tools alike); then a call marked `ask` waits for a person's approval (`_approvals.py`:
  `approval_denied`, or `deadline_exceeded` while waiting), or, in a run that parks, answers
  `approval_pending` and parks the run. Handlers then check scope. Nothing is
  written before all of these pass (but the approval itself).
- A handler never leaks internals: `HostError`s become their code and message; any other exception is
  logged with its traceback and answered as `runtime_error` with a fixed message.
- `cancel_run(run_id)` cancels the cancel scope of each of the run's in-flight calls; the call answers
  `cancelled` (is_error) and is audited with that code.

Size: past 600 lines because tools, resources and prompts go through one pipeline (`FactsDispatch`):
the fixed order of checks, the one audit row and the cancellation above are written once for all three
kinds of request; the handlers, arguments, limits, grants and audit writer are already modules of their own.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Generator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ValidationError

from mcphost import __version__, tracing
from mcphost.common.validation import problems
from mcphost.errors import HostError
from mcphost.facts import _artifacts, _run, _skills
from mcphost.facts._approvals import await_approval
from mcphost.facts._audit import AuditWriter
from mcphost.facts._call import Call
from mcphost.facts._context import load_context
from mcphost.facts._grants import GrantCache, RunAccess
from mcphost.facts._limits import LimitRegistry
from mcphost.facts._results import ToolCallError, digest_arguments, error_result, ok_result
from mcphost.facts._tools import FACTS_TOOLS, input_schema
from mcphost.facts.providers import (
    ContextProvider,
    HostToolProvider,
    KnowledgeRetriever,
    ModelCaller,
    ReplayAnswers,
    RunParker,
)
from mcphost.grants import allows_host_tool, refusal
from mcphost.models import RunGrant
from mcphost.projection import Projector
from mcphost.protocol import (
    MAX_JSON_DEPTH,
    STRICT_CONTEXT,
    JSONObject,
    JSONValue,
    is_error_code,
    is_json_object,
    json_depth,
    nesting_message,
    unstorable,
)
from mcphost.recording import TOOLS_LIST, recorded_tool_name, storable_arguments
from mcphost.stores import AuditEntry, RecordedCallEntry, Stores
from mcphost.stores.audit import CallOutcome

logger = logging.getLogger(__name__)

ACCESS_KEY = "mcphost.facts.access"
"""The ASGI scope key under which `server.py` puts the request's authenticated `RunAccess`."""

AUDIT_WRITE_TIMEOUT_S = 10.0
REFUSED_RPC_CODE = -32010
"""JSON-RPC code of a refused resource read or prompt (implementation-defined band)."""

INSTRUCTIONS = (
    "mcphost facts for one agent run: the run's context, its conversation's history and events, "
    "artifacts, state, storage and knowledge. Start with run_context (or the context you were given); "
    "page history backwards from context.latest_cursor. Failed calls return {code, message, retryable}."
)

ResultT = TypeVar("ResultT", bound=BaseModel)


def _access_of(ctx: ServerRequestContext[Any, Any]) -> RunAccess:
    request = ctx.request
    scope: object = getattr(request, "scope", None)
    # An ASGI scope is a dict with str keys; the SDK types the request loosely.
    access = cast("dict[str, object]", scope).get(ACCESS_KEY) if isinstance(scope, dict) else None
    if not isinstance(access, RunAccess):
        # Only reachable when the SDK server is mounted without FactsServer's authenticating endpoint.
        raise MCPError(types.INVALID_REQUEST, "This MCP server is reachable only at /runs/{run_id}/mcp.")
    return access


def _trace_of(ctx: ServerRequestContext[Any, Any], meta: object) -> tuple[dict[str, str], str | None]:
    """The W3C context a request carries in `_meta` (the MCP convention; empty when none or malformed)
    and the request's MCP session id. Only called while tracing is on."""
    headers: object = getattr(ctx.request, "headers", None)
    session = (
        cast("Mapping[str, str]", headers).get("mcp-session-id") if isinstance(headers, Mapping) else None
    )
    found = tracing.accept(cast("Mapping[str, str]", meta)) if isinstance(meta, Mapping) else {}
    return found, session if isinstance(session, str) and len(session) <= 200 else None


def _check_depth(arguments: dict[str, Any]) -> None:
    """Refuse arguments nested past `MAX_JSON_DEPTH` (after the grant check: a tool the run may not
    call is `unauthorized` whatever its arguments)."""
    if json_depth(arguments) > MAX_JSON_DEPTH:
        raise ToolCallError(
            "invalid_argument",
            nesting_message("arguments") + ".",
            details={"field": "arguments", "max_depth": MAX_JSON_DEPTH},
        )


def _arguments_error(error: ValidationError) -> ToolCallError:
    found = problems(error, root="(arguments)")
    summary = "; ".join(str(p) for p in found[:5])
    details: list[JSONValue] = [{"field": p.where, "message": p.what} for p in found[:20]]
    return ToolCallError("invalid_argument", f"Invalid arguments: {summary}.", details={"errors": details})


def _rpc_error(failure: ToolCallError, *, uri: str | None = None) -> MCPError:
    """The JSON-RPC error for a failed `resources/read` or `prompts/get`; a read's `data` names its `uri`
    (the spec asks it of a missing resource; every failed read carries it)."""
    if failure.code in ("invalid_argument", "not_found", "payload_too_large"):
        code = types.INVALID_PARAMS
    elif failure.refused or failure.code == "cancelled":
        code = REFUSED_RPC_CODE
    else:
        code = types.INTERNAL_ERROR
    data = failure.to_dict() if uri is None else {**failure.to_dict(), "uri": uri}
    return MCPError(code, f"{failure.code}: {failure.message}", data=data)


class _InFlight:
    """The cancel scopes of every run's calls in progress."""

    def __init__(self) -> None:
        self._scopes: dict[str, set[anyio.CancelScope]] = {}
        self._idle: dict[str, anyio.Event] = {}

    @contextmanager
    def track(self, run_id: str) -> Generator[anyio.CancelScope]:
        with anyio.CancelScope() as scope:
            scopes = self._scopes.setdefault(run_id, set())
            scopes.add(scope)
            try:
                yield scope
            finally:
                scopes.discard(scope)
                if not scopes:
                    self._scopes.pop(run_id, None)
                    idle = self._idle.pop(run_id, None)
                    if idle is not None:
                        idle.set()

    def cancel(self, run_id: str) -> int:
        scopes = self._scopes.get(run_id, set())
        for scope in scopes:
            scope.cancel()
        return len(scopes)

    async def wait_idle(self, run_id: str) -> None:
        """Return once the run has no call in progress."""
        if self._scopes.get(run_id):
            await self._idle.setdefault(run_id, anyio.Event()).wait()

    def count(self, run_id: str) -> int:
        return len(self._scopes.get(run_id, ()))


class FactsDispatch:
    """The SDK server and the per-call pipeline shared by every run."""

    def __init__(
        self,
        stores: Stores,
        grants: GrantCache,
        limits: LimitRegistry,
        *,
        context_provider: ContextProvider | None = None,
        host_tools: HostToolProvider | None = None,
        knowledge: KnowledgeRetriever | None = None,
        models: ModelCaller | None = None,
        on_call: Callable[[str, str], None] | None = None,
        replay: ReplayAnswers | None = None,
        park: RunParker | None = None,
        skills: Projector | None = None,
    ) -> None:
        self._stores = stores
        self._park = park
        self._skills = skills
        self._broken_skills: set[str] = set()
        """Granted skills whose folder broke after start, already warned about (`_skills.list_resources`)."""
        self._on_call = on_call
        self._replay = replay
        self._grants = grants
        self._limits = limits
        self._context_provider = context_provider
        self._host_tools = host_tools
        self._knowledge = knowledge
        self._models = models
        self._inflight = _InFlight()
        self.audit = AuditWriter(stores.audit, timeout_s=AUDIT_WRITE_TIMEOUT_S)
        """Group-committing audit writer; `FactsServer.running()` runs its task."""
        self.server: Server[Any] = Server(
            "mcphost",
            version=__version__,
            title="mcphost run facts",
            instructions=INSTRUCTIONS,
            get_tool_input_schema=input_schema,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_resource_templates,
            on_read_resource=self._read_resource,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
        )

    def cancel_run(self, run_id: str) -> int:
        """Cancel the run's in-flight calls; how many there were."""
        return self._inflight.cancel(run_id)

    async def wait_idle(self, run_id: str) -> None:
        """Return once the run has no call in progress (bound it with a timeout)."""
        await self._inflight.wait_idle(run_id)

    def in_flight(self, run_id: str) -> int:
        return self._inflight.count(run_id)

    # -- the pipeline ----------------------------------------------------------------------------------

    async def _admit(self, access: RunAccess) -> Call:
        record = await self._grants.get(access.run_id)
        if record is None or not record.active:
            raise ToolCallError(
                "unauthorized", f"Run {access.run_id!r} is not active; its grant ended with it."
            )
        grant = record.grant
        if time.time() >= grant.deadline_at:
            raise ToolCallError(
                "deadline_exceeded",
                f"Run {access.run_id!r} passed its deadline; finish with what you have.",
                details={"deadline_at": grant.deadline_at},
            )
        (await self._limits.of(grant)).take()
        return Call(
            run_id=access.run_id,
            grant=grant,
            stores=self._stores,
            load_context=lambda: load_context(self._stores, grant, self._context_provider),
            knowledge=self._knowledge,
            models=self._models,
            park=self._park,
        )

    async def _execute(
        self,
        access: RunAccess,
        tool: str,
        arguments: dict[str, Any],
        action: Callable[[Call], Awaitable[tuple[ResultT, int]]],
        kind: type[ResultT],
        *,
        request: ServerRequestContext[Any, Any],
        meta: object = None,
    ) -> tuple[ResultT, int] | ToolCallError:
        """`_run_call` inside the call's span when tracing is on."""
        if not tracing.enabled():
            return await self._run_call(access, tool, arguments, action, kind)
        method = tool if "/" in tool else "tools/call"
        found, session = _trace_of(request, meta)
        attributes: dict[str, str | int | float | bool] = {
            tracing.RUN_ID: access.run_id,
            tracing.MCP_METHOD: method,
        }
        if method == "tools/call":
            attributes[tracing.TOOL_NAME] = tool[:200]
            attributes[tracing.OPERATION] = "execute_tool"
        if session is not None:
            attributes[tracing.MCP_SESSION] = session
        if access.session_id is not None:
            # A warm process keeps the trace context it was spawned with (an earlier run's): its calls
            # hang under the run the session serves now, not under whatever its `_meta` names.
            attributes[tracing.WARM_SESSION] = access.session_id
            found = {}
        name = f"tools/call {tool[:200]}" if method == "tools/call" else method
        parent = found or await self._trace_parent(access)
        with tracing.span(name, parent=parent, kind="server", attributes=attributes) as current:
            outcome = await self._run_call(access, tool, arguments, action, kind)
            if isinstance(outcome, ToolCallError):
                tracing.annotate(current, {tracing.OUTCOME: "refused" if outcome.refused else "error"})
                tracing.fail(current, outcome.code)
            else:
                tracing.annotate(current, {tracing.OUTCOME: "ok"})
            return outcome

    async def _trace_parent(self, access: RunAccess) -> dict[str, str] | None:
        """Where a call without `_meta.traceparent` hangs in the run's trace: the span around the runner
        (the context this process gave it), else the run's ingest span (a run of another replica)."""
        ctx = await self._context_provider(access.run_id) if self._context_provider is not None else None
        if ctx is not None and ctx.runtime.traceparent is not None:
            found = {tracing.TRACEPARENT: ctx.runtime.traceparent}
            if ctx.runtime.tracestate is not None:
                found[tracing.TRACESTATE] = ctx.runtime.tracestate
            return found
        grant = access.record.grant
        if grant.traceparent is not None:
            return {tracing.TRACEPARENT: grant.traceparent}
        return None

    async def _run_call(
        self,
        access: RunAccess,
        tool: str,
        arguments: Any,
        action: Callable[[Call], Awaitable[tuple[ResultT, int]]],
        kind: type[ResultT],
    ) -> tuple[ResultT, int] | ToolCallError:
        """Admit, run `action` (or, on a replay, take the recorded answer) as a cancellable in-flight
        call of the run, record it when the run is recorded, audit. Raises only the cancellation of the
        request itself (after auditing it)."""
        started = time.perf_counter()
        digest, bytes_in = digest_arguments(arguments)
        outcome: tuple[ResultT, int] | ToolCallError
        try:
            call = await self._admit(access)
            done: tuple[ResultT, int] | None = None
            with self._inflight.track(access.run_id):
                if self._replay is not None:
                    done = _replayed(self._replay, access.run_id, tool, arguments, kind)
                else:
                    done = await action(call)
            outcome = done or ToolCallError(
                "cancelled", f"Run {access.run_id!r} ended while this call was running."
            )
        except ToolCallError as failure:
            outcome = failure
        except HostError as error:
            outcome = ToolCallError.of(error)
        except UnicodeError:
            outcome = ToolCallError("invalid_argument", "Strings must be valid Unicode (no lone surrogates).")
        except anyio.get_cancelled_exc_class():
            failure = ToolCallError("cancelled", "The client cancelled this call.")
            await self._audit(access.run_id, tool, digest, bytes_in, failure, started)
            raise
        except Exception:
            logger.exception("facts call %s of run %s failed", tool, access.run_id)
            outcome = ToolCallError(
                "runtime_error", "The host failed to answer this call (it was logged); retry later."
            )
        if access.record.grant.record and self._replay is None:
            await self._record(access.run_id, tool, arguments, outcome)
        await self._audit(access.run_id, tool, digest, bytes_in, outcome, started)
        return outcome

    async def _record(
        self, run_id: str, tool: str, arguments: JSONObject, outcome: tuple[BaseModel, int] | ToolCallError
    ) -> None:
        """Store the call and its answer in the run's recording (bounded, shielded like the audit row;
        a failure is logged, never turned into a different answer)."""
        if isinstance(outcome, ToolCallError):
            result, answer = "error", outcome.to_dict()
        else:
            result, answer = "ok", outcome[0].model_dump(mode="json", by_alias=True, exclude_none=True)
        if json_depth(answer) > MAX_JSON_DEPTH or unstorable(answer) is not None:
            failure = ToolCallError("runtime_error", "The answer of this call could not be recorded.")
            result, answer = "error", failure.to_dict()
        entry = RecordedCallEntry(
            run_id=run_id,
            tool=recorded_tool_name(tool),
            arguments=storable_arguments(arguments),
            outcome=result,
            answer=answer,
        )
        with anyio.CancelScope(shield=True), anyio.move_on_after(AUDIT_WRITE_TIMEOUT_S) as bound:
            try:
                await self._stores.recordings.append(entry)
            except Exception:
                logger.exception("could not record call %s of run %s", entry.tool, run_id)
        if bound.cancelled_caught:
            logger.warning("recording call %s of run %s timed out", entry.tool, run_id)

    async def _audit(
        self,
        run_id: str,
        tool: str,
        digest: str,
        bytes_in: int,
        outcome: tuple[BaseModel, int] | ToolCallError,
        started: float,
    ) -> None:
        if isinstance(outcome, ToolCallError):
            bytes_out = len(f"{outcome.code}: {outcome.message}".encode())
            result, code = ("refused" if outcome.refused else "error"), outcome.code
        else:
            bytes_out, result, code = outcome[1], "ok", None
            if isinstance(outcome[0], types.CallToolResult) and outcome[0].is_error:
                result, code = "error", _host_tool_code(outcome[0])
        if result == "ok":
            self._limits.record(run_id, bytes_out)
        await self._write_audit(run_id, tool, digest, bytes_in, bytes_out, result, code, started)

    async def audit_refusal(
        self, run_id: str, method: str, body: bytes, bytes_out: int, started: float
    ) -> None:
        """Audit an HTTP request to the run's endpoint that was refused before MCP saw it."""
        digest = hashlib.sha256(body).hexdigest()
        await self._write_audit(
            run_id, f"http {method}", digest, len(body), bytes_out, "refused", "unauthorized", started
        )

    async def _write_audit(
        self,
        run_id: str,
        tool: str,
        digest: str,
        bytes_in: int,
        bytes_out: int,
        outcome: CallOutcome,
        code: str | None,
        started: float,
    ) -> None:
        elapsed = time.perf_counter() - started
        entry = AuditEntry(
            run_id=run_id,
            tool="".join(c if c.isprintable() else "?" for c in tool)[:200],
            args_digest=digest,
            bytes_in=bytes_in,
            bytes_out=bytes_out,
            outcome=outcome,
            code=code,
            duration_ms=round(elapsed * 1000, 3),
            started_at=time.time() - elapsed,
        )
        await self.audit.write(entry)
        if self._on_call is not None:
            self._on_call(entry.tool, entry.outcome)

    # -- tools -----------------------------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        access = _access_of(ctx)
        grant = access.record.grant
        recorded = self._replay.tool_list() if self._replay is not None else None
        if recorded is not None:
            return types.ListToolsResult.model_validate(recorded)
        tools = [spec.tool for name, spec in FACTS_TOOLS.items() if name in grant.tools]
        if self._host_tools is not None and grant.host_tool_globs:
            upstream = await self._host_tools.list_tools(grant)
            tools.extend(t for t in upstream if _allows_host_tool(grant, t.name))
        result = types.ListToolsResult(tools=tools)
        if grant.record and self._replay is None:
            await self._record(access.run_id, TOOLS_LIST, {}, (result, 0))
        return result

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        access = _access_of(ctx)
        arguments: dict[str, Any] = params.arguments or {}
        progress = _progress_sink(ctx, params.meta)
        outcome = await self._execute(
            access,
            params.name,
            arguments,
            lambda call: self._invoke(call, params.name, arguments, progress),
            types.CallToolResult,
            request=ctx,
            meta=params.meta,
        )
        if isinstance(outcome, ToolCallError):
            return error_result(outcome)[0]
        return outcome[0]

    async def _invoke(
        self,
        call: Call,
        name: str,
        arguments: dict[str, Any],
        progress: Callable[[str], Awaitable[None]] | None = None,
    ) -> tuple[types.CallToolResult, int]:
        spec = FACTS_TOOLS.get(name)
        if spec is None:
            return await self._invoke_host_tool(call, name, arguments)
        if name not in call.grant.tools:
            message, details = refusal(call.grant, f"tool:{name}", f"call {name!r}")
            raise ToolCallError("unauthorized", message, details=details)
        _check_depth(arguments)
        problem = unstorable(arguments)
        if problem is not None:
            field = problem.path or "(arguments)"
            raise ToolCallError(
                "invalid_argument",
                f"Invalid arguments: {problem.message()}.",
                details={"errors": [{"field": field, "message": problem.reason}]},
            )
        try:
            # Under STRICT_CONTEXT the protocol's argument models (the model tools') refuse unknown fields
            # at every level, as the facts tools' own models do.
            args = spec.args.model_validate(arguments, context=STRICT_CONTEXT)
        except ValidationError as error:
            raise _arguments_error(error) from None
        await await_approval(call, name, arguments)
        call.progress = progress
        answer = await spec.handler(call, args)
        if not isinstance(answer, spec.answer):  # a programming error; answered as runtime_error
            raise AssertionError(f"{name} answered {type(answer).__name__}, not {spec.answer.__name__}")
        return ok_result(answer)

    async def _invoke_host_tool(
        self, call: Call, name: str, arguments: dict[str, Any]
    ) -> tuple[types.CallToolResult, int]:
        if "__" not in name:
            raise ToolCallError("not_found", f"There is no tool {name[:100]!r}; tools/list shows the tools.")
        if not _allows_host_tool(call.grant, name):
            message, details = refusal(call.grant, f"tool:{name}", f"call {name[:100]!r}")
            raise ToolCallError("unauthorized", message, details=details)
        if self._host_tools is None:
            raise ToolCallError("not_found", f"Host tool {name[:100]!r} is not available on this host.")
        _check_depth(arguments)
        await await_approval(call, name, arguments)
        result = await self._host_tools.call_tool(call.grant, name, arguments)
        return result, len(result.model_dump_json(by_alias=True, exclude_none=True).encode())

    # -- resources and prompts -------------------------------------------------------------------------

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        access = _access_of(ctx)
        context = types.Resource(
            uri=_run.CONTEXT_URI,
            name="run_context",
            title="Run context",
            description="This run's context (the same JSON as the run_context tool).",
            mime_type="application/json",
        )
        resources = [context]
        if self._skills is not None:
            try:
                call = await self._admit(access)
                resources += await _skills.list_resources(call, self._skills, self._broken_skills)
            except ToolCallError as exc:
                raise _rpc_error(exc) from None
        return types.ListResourcesResult(resources=resources)

    async def _list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        grant = _access_of(ctx).record.grant
        templates: list[types.ResourceTemplate] = []
        if "artifacts_read" in grant.tools:
            templates.append(
                types.ResourceTemplate(
                    uri_template=_artifacts.ARTIFACT_URI_PREFIX + "{artifact_id}",
                    name="artifact",
                    title="Artifact",
                    description="An artifact of this run or its conversation (at most 1 MiB; "
                    "use artifacts_read for larger ones).",
                )
            )
        return types.ListResourceTemplatesResult(resource_templates=templates)

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        access = _access_of(ctx)
        uri = str(params.uri)

        async def read(call: Call) -> tuple[types.ReadResourceResult, int]:
            if uri == _run.CONTEXT_URI:
                result = await _run.context_resource(call)
            elif uri.startswith(_artifacts.ARTIFACT_URI_PREFIX):
                result = await _artifacts.read_resource(call, uri)
            elif uri.startswith(_skills.SKILL_URI_PREFIX) and self._skills is not None:
                result = await _skills.read_resource(call, self._skills, uri)
            else:
                raise ToolCallError(
                    "not_found", f"There is no resource {uri[:100]!r}; resources/list shows them."
                )
            return result, len(result.model_dump_json(by_alias=True, exclude_none=True).encode())

        outcome = await self._execute(
            access,
            "resources/read",
            {"uri": uri[:1000]},
            read,
            types.ReadResourceResult,
            request=ctx,
            meta=params.meta,
        )
        if isinstance(outcome, ToolCallError):
            raise _rpc_error(outcome, uri=uri)
        return outcome[0]

    async def _list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        _access_of(ctx)
        prompt = types.Prompt(
            name="instructions",
            title="Agent instructions",
            description="The agent's static prompt and the descriptions of its skills.",
        )
        return types.ListPromptsResult(prompts=[prompt])

    async def _get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        access = _access_of(ctx)
        name = params.name

        async def get(call: Call) -> tuple[types.GetPromptResult, int]:
            if name != "instructions":
                raise ToolCallError(
                    "not_found", f"There is no prompt {name[:100]!r}; prompts/list shows them."
                )
            result = await _run.instructions(call)
            return result, len(result.model_dump_json(by_alias=True, exclude_none=True).encode())

        arguments = {"name": name, "arguments": params.arguments or {}}
        outcome = await self._execute(
            access, "prompts/get", arguments, get, types.GetPromptResult, request=ctx, meta=params.meta
        )
        if isinstance(outcome, ToolCallError):
            raise _rpc_error(outcome)
        return outcome[0]


def _progress_sink(
    ctx: ServerRequestContext[Any, Any], meta: object
) -> Callable[[str], Awaitable[None]] | None:
    """Sends each message as the next progress notification of the request, when its `_meta` asks for
    progress (a progress token); None otherwise."""
    if not isinstance(meta, Mapping):
        return None
    found = cast("Mapping[str, object]", meta)
    if found.get("progress_token") is None and found.get("progressToken") is None:
        return None
    sent = 0

    async def send(message: str) -> None:
        nonlocal sent
        sent += 1
        await ctx.session.report_progress(sent, None, message)

    return send


def _replayed(
    replay: ReplayAnswers, run_id: str, tool: str, arguments: JSONObject, kind: type[ResultT]
) -> tuple[ResultT, int]:
    """The recorded answer of a replayed call, as the handler would have given it."""
    outcome, answer = replay.answer(run_id, tool, arguments)
    if outcome == "error":
        code, message = answer.get("code"), answer.get("message")
        details = answer.get("details")
        raise ToolCallError(
            code if isinstance(code, str) and is_error_code(code) else "runtime_error",
            message if isinstance(message, str) else "The recorded call failed.",
            retryable=answer.get("retryable") is True,
            details=details if is_json_object(details) else None,
        )
    try:
        result = kind.model_validate(answer)
    except ValidationError:
        raise ToolCallError(
            "runtime_error", f"The recorded answer of {tool[:100]!r} is not a valid result."
        ) from None
    return result, len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


def _allows_host_tool(grant: RunGrant, name: str) -> bool:
    return name not in FACTS_TOOLS and "__" in name and (name in grant.tools or allows_host_tool(grant, name))


def _host_tool_code(result: types.CallToolResult) -> str:
    structured: object = result.structured_content
    code = structured.get("code") if is_json_object(structured) else None
    return code if isinstance(code, str) and len(code) <= 64 else "runtime_error"
