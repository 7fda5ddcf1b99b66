"""`RunAPI`: a typed async client of the run's own MCP server (`ctx.context.mcp`, PROTOCOL §7).

```python
async with RunAPI(ctx.context.mcp) as api:          # serve() does this for you: `out.api`
    page = await api.history_page(before_cursor=ctx.context.latest_cursor, limit=10)
    await api.state_set("conversation", "topic", "pie")
```

Owns one MCP connection per run, built on the `mcp` SDK's `Client` over Streamable HTTP (`httpx2`), the
mapping of tool answers to their models (`mcphost.protocol.facts`, the same models the host answers with), and
the mapping of every failure to one
exception, `RunAPIError`, carrying a PROTOCOL §5 code. Does not decide what to call (runners do) and
never touches the host but through the URL and bearer token of `MCPAccess`.

Invariants:
- The connection is opened lazily by the first call and lives in a task owned by this object's task
  group, so whichever task makes the first call, the SDK client is entered and left by the same task.
  Leaving `async with RunAPI(...)` closes it inside a cancellation shield with a bounded wait.
- The protocol era comes from `MCPAccess.protocol_versions`: the newest stateless revision this SDK
  speaks when the host offers one (no handshake, no session), else the handshake era.
- Every failure a call can meet surfaces as `RunAPIError`: an `is_error` tool result keeps the host's
  `{code, message, retryable, details}`; a refused token (401) is `unauthorized`; a call slower than
  `timeout_s` is `deadline_exceeded`; an unreachable server is `runner.mcp_unavailable`. A connection
  that failed once fails every later call the same way, without retrying.
- Given the run's W3C trace context (`ctx.runtime.traceparent`, which `serve()` passes), every request
  carries it in `_meta`, so the host parents each call's span to the span around the run.
- The bearer token is sent, never logged, and never part of an error message.
- The `mcp` SDK and `httpx2` are imported when the first connection opens, not with this module: every
  plugin imports the runner SDK, and a runner that never calls the run API (echo) should not pay a
  second of start-up for them. A runner that does (`AgentRunner.calls_run_api`) has them imported on a
  background thread as its plugin starts serving (`CONNECTION_MODULES`, `_plugin_server.py`).

Size: past 600 lines because `RunAPI` has one typed method per tool of the run's MCP server (21, each
the tool's arguments in Python and its answer model), over the one connection and error mapping above;
the methods are the SDK's surface, and split across modules they would only be re-joined here.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar, cast

import anyio
import anyio.abc
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcphost.common.excgroups import sole_leaf
from mcphost.protocol import (
    AgentRunContext,
    JSONObject,
    JSONValue,
    MCPAccess,
    ProtocolModel,
    StateScope,
    is_json_object,
)
from mcphost.protocol.facts import (
    ArtifactChunk,
    ArtifactMetadata,
    Deleted,
    EventPage,
    EventRecord,
    HistoryPage,
    HistorySearch,
    KnowledgeBase,
    KnowledgeBases,
    KnowledgeChunk,
    KnowledgeHits,
    StateList,
    StateValue,
    StateWritten,
    StorageArea,
    StorageList,
    StorageValue,
    StorageWritten,
    TranscriptRole,
)
from mcphost.protocol.inference import (
    EmbeddingAnswer,
    ModelInvocation,
    ModelMessage,
    ModelsList,
    ModelTool,
    RerankAnswer,
)

if TYPE_CHECKING:
    import mcp_types as types
    from mcp import Client
    from mcp.shared.dispatcher import ProgressFnT
    from mcp.shared.exceptions import MCPError

logger = logging.getLogger("mcphost_runners.sdk")

ModelT = TypeVar("ModelT", bound=BaseModel)
T = TypeVar("T")

CONNECTION_MODULES = ("httpx2", "mcp_types", "mcp", "mcp.client.streamable_http", "mcp.shared.exceptions")
"""What opening a connection imports (`_connection`), warmed ahead of the first run when a runner asks."""

DEFAULT_TIMEOUT_S = 60.0
"""How long one call may take before it fails with `deadline_exceeded`."""
CLOSE_TIMEOUT_S = 5.0
"""How long closing the connection may take (ending a handshake-era session is one request)."""
_CONNECT_TIMEOUT_S = 10.0
_LIST_PAGES = 20

_RPC_CODES: dict[int, str] = {
    -32001: "unauthorized",  # the facts server's 401 body; the SDK's own timeout never reaches here
    -32010: "unauthorized",  # a refused resource read or prompt
    -32602: "invalid_argument",
    -32601: "not_found",
}


class RunTool(ProtocolModel):
    """A tool the run may call: a facts tool or a granted host tool (`<server>__<tool>`)."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    input_schema: JSONObject = Field(default_factory=dict)


class ToolResult(ProtocolModel):
    """A successful tool call: its text blocks joined, and its structured content when it has one."""

    model_config = ConfigDict(frozen=True)

    text: str
    structured_content: JSONObject | None = None


class RunAPIError(Exception):
    """A run API call failed; `code` is a PROTOCOL §5 code (`not_found`, `unauthorized`, ...)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        details: JSONObject | None = None,
        tool: str | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = retryable
        self.details: JSONObject = details or {}
        self.tool = tool
        """The tool (or MCP method) whose call failed."""


def pick_mode(protocol_versions: list[str]) -> str:
    """The `Client` mode for the versions the host offers: the newest stateless revision both sides
    speak, else the handshake era (also when the host lists nothing)."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    modern = sorted(v for v in protocol_versions if v in MODERN_PROTOCOL_VERSIONS)
    return modern[-1] if modern else "legacy"


def _describe(exc: BaseException) -> str:
    exc = sole_leaf(exc)
    return str(exc) or type(exc).__name__


def _text_of(result: types.CallToolResult) -> str:
    import mcp_types as types

    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


def _tool_failure(tool: str, result: types.CallToolResult) -> RunAPIError:
    """The `RunAPIError` of an `is_error` result: the host's structured error, or the text of any
    other tool's error (code `runtime_error`)."""
    structured: object = result.structured_content
    if is_json_object(structured) and isinstance(code := structured.get("code"), str):
        details: object = structured.get("details")
        return RunAPIError(
            code,
            str(structured.get("message", "")),
            retryable=structured.get("retryable") is True,
            details=details if is_json_object(details) else {},
            tool=tool,
        )
    return RunAPIError("runtime_error", _text_of(result) or f"tool {tool!r} failed", tool=tool)


def _rpc_failure(tool: str, exc: MCPError) -> RunAPIError:
    code = _RPC_CODES.get(exc.code)
    if code is None:
        return RunAPIError(
            "runner.mcp_unavailable",
            f"the run's MCP server answered {tool!r} with JSON-RPC error {exc.code}: {exc.message}",
            retryable=True,
            details={"rpc_code": exc.code},
            tool=tool,
        )
    return RunAPIError(code, exc.message, details={"rpc_code": exc.code}, tool=tool)


class RunAPI:
    """The run's facts and tools over its per-run MCP server, with typed answers.

    Use it as `async with RunAPI(ctx.context.mcp) as api` (a runner served by `serve()` gets one as
    `out.api`, closed when the run ends). The first call connects; every call raises `RunAPIError`
    on failure.
    """

    def __init__(
        self,
        access: MCPAccess | None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        mode: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> None:
        """
        Args:
            access: `ctx.context.mcp`; None makes every call fail with `runner.mcp_unavailable`.
            timeout_s: the longest one call may take.
            mode: the SDK `Client` mode ("legacy", "auto" or a revision); default: `pick_mode`.
            traceparent: `ctx.runtime.traceparent`: sent as `_meta.traceparent` (with `tracestate`)
                on every request, so the host hangs each call under the span around this run.
        """
        self._meta: dict[str, str] | None = None
        if traceparent:
            self._meta = {"traceparent": traceparent} | ({"tracestate": tracestate} if tracestate else {})
        self._access = access
        self._timeout_s = timeout_s
        self._mode = mode
        self._tg: anyio.abc.TaskGroup | None = None
        self._client: Client | None = None
        self._failure: RunAPIError | None = None
        self._lock = anyio.Lock()
        self._closing = anyio.Event()
        self._closed = anyio.Event()

    @property
    def available(self) -> bool:
        """False when the run has no MCP access at all."""
        return self._access is not None

    @property
    def connected(self) -> bool:
        return self._client is not None

    async def __aenter__(self) -> RunAPI:
        if self._tg is not None:
            raise RuntimeError("RunAPI is already entered; use one `async with` per run.")
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tg, self._tg = self._tg, None
        if tg is None:
            return
        self._closing.set()
        # A run that never connected (no client, none being opened) has nothing to wait for: most runs
        # of a runner that reads only its context. The wait below took half the cost of a RunAPI.
        if self._client is not None or self._lock.locked():
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT_S) as grace:
                async with self._lock:  # a connection being opened right now is finished first
                    if self._client is not None:
                        await self._closed.wait()
            if grace.cancelled_caught:
                logger.warning(
                    "The run's MCP connection did not close within %s s; abandoned.", CLOSE_TIMEOUT_S
                )
                tg.cancel_scope.cancel()
        # The body's exception is not fed to the task group, so it propagates unwrapped.
        await tg.__aexit__(None, None, None)
        self._client = None
        self._failure = self._failure or RunAPIError(
            "runner.mcp_unavailable", "the run's MCP connection is closed (the run ended)"
        )

    # -- connection ----------------------------------------------------------------------------------

    async def _connected_client(self) -> Client:
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._client is not None:
                return self._client
            if self._failure is not None:
                raise self._failure
            if self._access is None:
                self._failure = RunAPIError(
                    "runner.mcp_unavailable",
                    "this run has no MCP access (ctx.context.mcp is missing); the host grants none.",
                )
                raise self._failure
            if self._tg is None:
                raise RuntimeError(
                    "RunAPI is not entered; use `async with RunAPI(ctx.context.mcp) as api:` "
                    "(or `out.api` inside a runner served by serve())."
                )
            try:
                with anyio.fail_after(_CONNECT_TIMEOUT_S + self._timeout_s):
                    client: Client = await self._tg.start(self._connection, self._access)
            except Exception as exc:
                self._failure = RunAPIError(
                    "runner.mcp_unavailable",
                    f"cannot reach the run's MCP server at {self._access.url}: {_describe(exc)}",
                    retryable=True,
                    details={"url": self._access.url},
                )
                raise self._failure from None
            self._client = client
            return client

    async def _connection(
        self, access: MCPAccess, *, task_status: anyio.abc.TaskStatus[Client] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Own the SDK client: enter it, hand it out, and leave it when the run ends."""
        import httpx2
        import mcp_types as types
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        mode = self._mode or pick_mode(access.protocol_versions)
        started = False
        try:
            timeout = httpx2.Timeout(_CONNECT_TIMEOUT_S, read=self._timeout_s + 5)
            async with httpx2.AsyncClient(headers=dict(access.headers), timeout=timeout) as http:
                transport = streamable_http_client(access.url, http_client=http)
                client_info = types.Implementation(name="mcphost-runner-sdk", version="1")
                async with Client(transport, mode=mode, client_info=client_info) as client:
                    task_status.started(client)
                    started = True
                    await self._closing.wait()
        except Exception as exc:
            if not started:
                raise
            logger.warning("The run's MCP connection ended with an error: %s", _describe(exc))
        finally:
            self._closed.set()

    # -- calls ---------------------------------------------------------------------------------------

    async def call_tool(self, name: str, arguments: JSONObject | None = None) -> ToolResult:
        """Call any tool the run may use (a facts tool or a host tool `<server>__<tool>`)."""
        result = await self._call(name, arguments or {})
        structured: object = result.structured_content
        return ToolResult(
            text=_text_of(result), structured_content=structured if is_json_object(structured) else None
        )

    async def list_tools(self) -> list[RunTool]:
        """Every tool this run may call, with its input schema."""
        client = await self._connected_client()
        tools: list[RunTool] = []
        cursor: str | None = None
        for _ in range(_LIST_PAGES):
            listed = await self._guard(
                "tools/list", client.list_tools(cursor=cursor, meta=self._request_meta())
            )
            tools.extend(
                RunTool(name=t.name, description=t.description or "", input_schema=dict(t.input_schema))
                for t in listed.tools
            )
            cursor = listed.next_cursor
            if not cursor:
                break
        return tools

    async def run_context(self) -> AgentRunContext:
        """The run's context as the host keeps it (without the token)."""
        return await self._typed("run_context", {}, AgentRunContext)

    async def history_page(
        self,
        *,
        before_cursor: str | None = None,
        after_cursor: str | None = None,
        limit: int = 50,
        include_artifacts: bool = False,
    ) -> HistoryPage:
        """A page of the conversation transcript; pass `before_cursor=ctx.context.latest_cursor` for
        what came before the current input, newest first."""
        args = _without_none(
            before_cursor=before_cursor,
            after_cursor=after_cursor,
            limit=limit,
            include_artifacts=include_artifacts,
        )
        return await self._typed("history_page", args, HistoryPage)

    async def history_search(
        self, query: str, *, top_k: int = 10, roles: list[TranscriptRole] | None = None
    ) -> HistorySearch:
        """Transcript items matching the words of `query`, best first."""
        args = _without_none(query=query, top_k=top_k, roles=roles)
        return await self._typed("history_search", args, HistorySearch)

    async def events_get(self, event_id: str) -> EventRecord:
        return await self._typed("events_get", {"event_id": event_id}, EventRecord)

    async def events_page(
        self,
        *,
        before_cursor: str | None = None,
        after_cursor: str | None = None,
        limit: int = 50,
        event_types: list[str] | None = None,
    ) -> EventPage:
        args = _without_none(
            before_cursor=before_cursor, after_cursor=after_cursor, limit=limit, event_types=event_types
        )
        return await self._typed("events_page", args, EventPage)

    async def artifacts_metadata(self, artifact_id: str) -> ArtifactMetadata:
        return await self._typed("artifacts_metadata", {"artifact_id": artifact_id}, ArtifactMetadata)

    async def artifacts_read(
        self, artifact_id: str, *, offset: int = 0, length: int = 65536
    ) -> ArtifactChunk:
        """Up to `length` (≤ 1 MiB) bytes from `offset`; `ArtifactChunk.content()` decodes them."""
        args = {"artifact_id": artifact_id, "offset": offset, "length": length}
        return await self._typed("artifacts_read", args, ArtifactChunk)

    async def artifacts_read_all(self, artifact_id: str, *, max_bytes: int = 8 * 1024 * 1024) -> bytes:
        """The whole artifact (refused with `payload_too_large` past `max_bytes`)."""
        data = bytearray()
        while True:
            chunk = await self.artifacts_read(artifact_id, offset=len(data), length=1024 * 1024)
            data += chunk.content()
            if len(data) > max_bytes:
                raise RunAPIError(
                    "payload_too_large",
                    f"artifact {artifact_id!r} is larger than {max_bytes} bytes",
                    details={"max_bytes": max_bytes},
                    tool="artifacts_read",
                )
            if chunk.eof or chunk.length == 0:
                return bytes(data)

    async def artifacts_create(
        self, name: str, mime_type: str, *, text: str | None = None, content: bytes | None = None
    ) -> ArtifactMetadata:
        """A new artifact (≤ 1 MiB) owned by the run, from `text` or `content` bytes."""
        if (text is None) == (content is None):
            raise ValueError("artifacts_create() needs exactly one of `text` or `content`")
        args: JSONObject = {"name": name, "mime_type": mime_type}
        if text is not None:
            args["text"] = text
        else:
            assert content is not None
            args["base64"] = base64.b64encode(content).decode("ascii")
        return await self._typed("artifacts_create", args, ArtifactMetadata)

    async def state_get(self, scope: StateScope, key: str) -> StateValue:
        return await self._typed("state_get", {"scope": scope, "key": key}, StateValue)

    async def state_set(self, scope: StateScope, key: str, value: JSONValue) -> StateWritten:
        return await self._typed("state_set", {"scope": scope, "key": key, "value": value}, StateWritten)

    async def state_delete(self, scope: StateScope, key: str) -> Deleted:
        return await self._typed("state_delete", {"scope": scope, "key": key}, Deleted)

    async def state_list(
        self, scope: StateScope, *, prefix: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> StateList:
        args = _without_none(scope=scope, prefix=prefix, limit=limit, cursor=cursor)
        return await self._typed("state_list", args, StateList)

    async def storage_get(self, area: StorageArea, key: str) -> StorageValue:
        return await self._typed("storage_get", {"area": area, "key": key}, StorageValue)

    async def storage_set(self, area: StorageArea, key: str, value: bytes) -> StorageWritten:
        args = {"area": area, "key": key, "value_base64": base64.b64encode(value).decode("ascii")}
        return await self._typed("storage_set", args, StorageWritten)

    async def storage_delete(self, area: StorageArea, key: str) -> Deleted:
        return await self._typed("storage_delete", {"area": area, "key": key}, Deleted)

    async def storage_list(
        self, area: StorageArea, *, prefix: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> StorageList:
        args = _without_none(area=area, prefix=prefix, limit=limit, cursor=cursor)
        return await self._typed("storage_list", args, StorageList)

    async def knowledge_list(self) -> list[KnowledgeBase]:
        """The knowledge bases this run may search."""
        return (await self._typed("knowledge_list", {}, KnowledgeBases)).knowledge_bases

    async def knowledge_retrieve(
        self, kb_id: str, query: str, *, top_k: int = 5, filters: JSONObject | None = None
    ) -> list[KnowledgeChunk]:
        """The passages of `kb_id` best matching `query`."""
        args = _without_none(kb_id=kb_id, query=query, top_k=top_k, filters=filters)
        return (await self._typed("knowledge_retrieve", args, KnowledgeHits)).chunks

    async def models_list(self) -> ModelsList:
        """The host models this run may call (`[models.<id>]` ids its grant allows), and how."""
        return await self._typed("models_list", {}, ModelsList)

    async def models_invoke(
        self,
        model: str,
        messages: list[ModelMessage] | list[JSONObject],
        *,
        system: str | None = None,
        tools: list[ModelTool] | list[JSONObject] | None = None,
        tool_choice: str | None = None,
        max_tokens: int = 1024,
        temperature: float | None = None,
        top_p: float | None = None,
        stop: list[str] | None = None,
        on_text: Callable[[str], Awaitable[None]] | None = None,
    ) -> ModelInvocation:
        """Ask host model `model` for its next message (the host holds the key and counts the tokens).

        With `on_text`, the answer is streamed (when the grant allows `stream`): each text delta is passed
        to it as it arrives, and the whole answer is returned at the end. A spent budget raises
        `RunAPIError` with code `budget_exceeded` (`details["budget"]` names the key).
        """
        args = _without_none(
            model=model,
            messages=[_json(m) for m in messages],
            system=system,
            tools=[_json(t) for t in tools] if tools else None,
            tool_choice=tool_choice,
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            stop=stop,
        )
        deltas: ProgressFnT | None = None
        if on_text is not None:
            sink = on_text

            async def forward(progress: float, total: float | None, message: str | None) -> None:
                if message:
                    await sink(message)

            deltas = forward
        return await self._typed("models_invoke", args, ModelInvocation, progress=deltas)

    async def models_rerank(
        self, model: str, query: str, documents: list[str], *, top_k: int | None = None
    ) -> RerankAnswer:
        """`documents` scored by relevance to `query` with host rerank model `model`, best first."""
        args = _without_none(model=model, query=query, documents=documents, top_k=top_k)
        return await self._typed("models_rerank", args, RerankAnswer)

    async def models_embed(
        self, model: str, inputs: list[str], *, dimensions: int | None = None
    ) -> EmbeddingAnswer:
        """A vector for each of `inputs`, in order, from host embedding model `model` (`dimensions`: a
        shorter vector, on models that can give one)."""
        args = _without_none(model=model, inputs=inputs, dimensions=dimensions)
        return await self._typed("models_embed", args, EmbeddingAnswer)

    # -- plumbing ------------------------------------------------------------------------------------

    async def _typed(
        self,
        tool: str,
        arguments: JSONObject,
        model: type[ModelT],
        *,
        progress: ProgressFnT | None = None,
    ) -> ModelT:
        result = await self._call(tool, arguments, progress=progress)
        try:
            return model.model_validate(result.structured_content)
        except ValidationError as exc:
            raise RunAPIError(
                "runtime_error",
                f"{tool} answered with content this SDK cannot read: {exc.errors(include_url=False)[:3]}",
                tool=tool,
            ) from None

    async def _call(
        self,
        tool: str,
        arguments: JSONObject,
        *,
        progress: ProgressFnT | None = None,
    ) -> types.CallToolResult:
        client = await self._connected_client()
        result = await self._guard(
            tool,
            client.call_tool(tool, arguments, meta=self._request_meta(), progress_callback=progress),
        )
        if result.is_error:
            raise _tool_failure(tool, result)
        return result

    def _request_meta(self) -> types.RequestParamsMeta | None:
        # `_meta` is an open map; a copy per request, as the SDK may add its own keys to it.
        return cast("types.RequestParamsMeta", dict(self._meta)) if self._meta else None

    async def _guard(self, what: str, call: Awaitable[T]) -> T:
        """Await one SDK call, mapping its failures to `RunAPIError`."""
        import httpx2
        from mcp.shared.exceptions import MCPError

        try:
            with anyio.fail_after(self._timeout_s):
                return await call
        except TimeoutError:
            raise RunAPIError(
                "deadline_exceeded",
                f"{what} took longer than {self._timeout_s:g} s",
                retryable=True,
                tool=what,
            ) from None
        except MCPError as exc:
            raise _rpc_failure(what, exc) from None
        except (httpx2.HTTPError, OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise RunAPIError(
                "runner.mcp_unavailable",
                f"the run's MCP connection failed during {what}: {_describe(exc)}",
                retryable=True,
                tool=what,
            ) from None


def _json(value: BaseModel | JSONObject) -> JSONObject:
    return value.model_dump(mode="json", exclude_none=True) if isinstance(value, BaseModel) else value


def _without_none(**arguments: JSONValue) -> JSONObject:
    return {key: value for key, value in arguments.items() if value is not None}
