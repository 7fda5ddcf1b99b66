"""The host tool gateway: upstream MCP servers from `[tools.<server>]`, re-exposed to runs as
`<server>__<tool>`.

Owns the set of upstream servers (one supervised `upstream.Upstream` each), the per-run view of their
tools, proxied calls with their timeouts, oversized results turned into artifacts, and the telemetry
event each call leaves in the event log. Implements the facts server's `HostToolProvider` seam
(`list_tools(grant)`, `call_tool(grant, name, arguments)`). Does not decide which tools a run may use
beyond applying the grant's globs (`grants.allows_host_tool`), and does not audit the MCP call itself
(the facts server does).

Invariants:
- Nothing an upstream does can crash the host or hang a run. A call is bounded by the server's
  `timeout_s` cut to the run's deadline (connecting included); a run's `tools/list` waits at most
  `LIST_TIMEOUT_S` per server and leaves out a server that cannot answer. A server that is down, slow or
  answers garbage yields a `HostError` the facts server answers as a tool error (`runtime_error`,
  retryable, or `deadline_exceeded`); nothing escapes.
- Servers a run's globs cannot match are never contacted for it, so an unused server is never started.
- A result whose JSON is over `MAX_INLINE_RESULT_BYTES` becomes an artifact owned by the run (the one
  text or binary block as is, else the whole result as JSON); the run gets a short preview, the
  `ArtifactRef` and a `mcphost://artifacts/<id>` resource link instead.
- A result whose structured content or `_meta` nests deeper than `MAX_JSON_DEPTH` is refused
  (`invalid_argument`) before it is measured, stored or passed on.
- Every call, refused or not, leaves one `host_tool.called` telemetry event (tool, server, outcome,
  upstream time, result size, artifact) in the run's event log; header values never do.
- Every background task (one supervisor per server) is owned by `running()`.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import sys
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import anyio

from mcphost import tracing
from mcphost.config import Settings, ToolServerConfig
from mcphost.errors import (
    DeadlineExceededError,
    HostError,
    InvalidArgumentError,
    NotFoundError,
    UnauthorizedError,
)
from mcphost.gateway.status import (
    BACKOFF_INITIAL_S,
    BACKOFF_MAX_S,
    SEPARATOR,
    TOOLS_TTL_S,
    HostToolInfo,
    ServerStatus,
    UpstreamError,
    UpstreamState,
    describe_failure,
    expand_env,
    host_name,
)
from mcphost.grants import allows_host_tool
from mcphost.models import RunGrant, new_id
from mcphost.protocol import MAX_JSON_DEPTH, JSONObject, json_depth, nesting_message
from mcphost.stores import Stores

if TYPE_CHECKING:
    # Imported when a gateway has servers: the `mcp` package's client costs a host without `[tools.*]`
    # about a second of start-up (`status.py` is what the rest of the host needs).
    import mcp_types as types

    from mcphost.gateway.upstream import Upstream

logger = logging.getLogger(__name__)

MAX_INLINE_RESULT_BYTES = 64 * 1024
MAX_ARTIFACT_BYTES = 256 * 1024 * 1024
PREVIEW_CHARS = 2000
LIST_TIMEOUT_S = 10.0
TELEMETRY_EVENT = "host_tool.called"
TELEMETRY_WRITE_S = 5.0

__all__ = [
    "SEPARATOR",
    "Gateway",
    "HostToolInfo",
    "ServerStatus",
    "UpstreamError",
    "UpstreamState",
    "could_match",
    "expand_env",
    "host_name",
]


# -- the gateway -----------------------------------------------------------------------------------------


def could_match(globs: Sequence[str], server: str) -> bool:
    """Whether any grant glob can match a name `<server>__...` (checks the literal prefix only)."""
    prefix = server + SEPARATOR
    for pattern in globs:
        literal = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
        if prefix.startswith(literal) or literal.startswith(prefix):
            return True
    return False


def _check_nesting(result: types.CallToolResult, server: str, name: str) -> None:
    """Refuse a result whose free-form JSON (structured content, `_meta`) nests deeper than
    `MAX_JSON_DEPTH`: passed on, it would fail the run's response and the event log."""
    parts: list[object] = [result.structured_content, result.meta]
    parts.extend(getattr(block, "meta", None) for block in result.content)
    if json_depth(parts) > MAX_JSON_DEPTH:  # the list adds a level: a fair margin for the envelope
        raise InvalidArgumentError(
            nesting_message(f"The result of {name!r} from tool server {server!r}")
            + "; the host does not pass it on. Ask for less, or fix the tool server.",
            details={"max_depth": MAX_JSON_DEPTH},
        )


class Gateway:
    """Every upstream tool server of the host, as one `HostToolProvider`."""

    def __init__(
        self,
        servers: Mapping[str, ToolServerConfig],
        *,
        stores: Stores | None = None,
        environ: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        errlog: TextIO | None = None,
        list_timeout_s: float = LIST_TIMEOUT_S,
        backoff_initial_s: float = BACKOFF_INITIAL_S,
        backoff_max_s: float = BACKOFF_MAX_S,
        tools_ttl_s: float = TOOLS_TTL_S,
        max_inline_bytes: int = MAX_INLINE_RESULT_BYTES,
    ) -> None:
        env = os.environ if environ is None else environ
        self._stores = stores
        self._list_timeout = list_timeout_s
        self._max_inline = max_inline_bytes
        self.upstreams: dict[str, Upstream] = {}
        if not servers:
            return
        from mcphost.gateway.upstream import Upstream

        self.upstreams = {
            name: Upstream(
                name,
                cfg,
                environ=env,
                cwd=cwd,
                errlog=errlog or sys.stderr,
                backoff_initial_s=backoff_initial_s,
                backoff_max_s=backoff_max_s,
                tools_ttl_s=tools_ttl_s,
            )
            for name, cfg in sorted(servers.items())
        }

    @classmethod
    def from_settings(cls, settings: Settings, stores: Stores | None = None) -> Gateway:
        """The gateway of a config: stdio servers run in the config file's folder."""
        source = Path(settings.source)
        cwd = source.parent.resolve() if source.is_file() else None
        return cls(settings.tools, stores=stores, cwd=cwd)

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[Gateway, None]:
        """Start one supervisor per server (none connects until needed); on exit close every client."""
        async with anyio.create_task_group() as tg:
            for upstream in self.upstreams.values():
                await tg.start(upstream.supervise)
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()

    # -- HostToolProvider ----------------------------------------------------------------------------------

    async def list_tools(self, grant: RunGrant) -> list[types.Tool]:
        """The host tools the grant's globs allow, from every server that answers within the list timeout."""
        found: dict[str, list[types.Tool]] = {}

        async def collect(upstream: Upstream) -> None:
            with anyio.move_on_after(self._list_timeout):
                try:
                    found[upstream.name] = (await upstream.tools()).tools
                except HostError as exc:
                    logger.info("tool server %s left out of tools/list: %s", upstream.name, exc.message)
                except Exception:
                    logger.exception("tool server %s left out of tools/list", upstream.name)

        async with anyio.create_task_group() as tg:
            for upstream in self.upstreams.values():
                if could_match(grant.host_tool_globs, upstream.name):
                    tg.start_soon(collect, upstream)
        return [tool for name in sorted(found) for tool in found[name] if allows_host_tool(grant, tool.name)]

    async def call_tool(self, grant: RunGrant, name: str, arguments: JSONObject) -> types.CallToolResult:
        """Call host tool `name` for the run of `grant`, within its timeout and the run's deadline; traced
        as a client span whose context the upstream gets as `_meta.traceparent`."""
        if not tracing.enabled():
            return await self._call_tool(grant, name, arguments)
        attributes: dict[str, str | int | float | bool] = {
            tracing.RUN_ID: grant.run_id,
            tracing.MCP_METHOD: "tools/call",
            tracing.OPERATION: "execute_tool",
            tracing.TOOL_NAME: name[:200],
            tracing.HOST_TOOL_SERVER: name.partition(SEPARATOR)[0][:100],
        }
        with tracing.span(f"tools/call {name[:200]}", kind="client", attributes=attributes) as current:
            try:
                result = await self._call_tool(grant, name, arguments)
            except HostError as error:
                tracing.fail(current, error.code)
                raise
            if result.is_error:
                tracing.fail(current, "tool_error")
            tracing.annotate(current, {tracing.OUTCOME: "error" if result.is_error else "ok"})
            return result

    async def _call_tool(self, grant: RunGrant, name: str, arguments: JSONObject) -> types.CallToolResult:
        if not allows_host_tool(grant, name):
            raise UnauthorizedError(
                f"This run may not call {name[:100]!r}; tools/list shows what it may call."
            )
        server, _, _ = name.partition(SEPARATOR)
        upstream = self.upstreams.get(server)
        if upstream is None:
            raise NotFoundError(
                f"There is no tool server {server[:100]!r} on this host (tool {name[:100]!r})."
            )
        timeout = min(upstream.config.timeout_s, grant.deadline_at - time.time())
        if timeout <= 0:
            raise DeadlineExceededError(f"Run {grant.run_id!r} passed its deadline; {name!r} was not called.")
        started = time.perf_counter()
        tool: str | None = None
        try:
            with anyio.move_on_after(timeout) as scope:
                tool = await self._upstream_name(upstream, name)
            if scope.cancelled_caught:
                raise DeadlineExceededError(
                    f"Tool server {server!r} did not list its tools within {timeout:.1f} s; {name!r} was not called."
                )
            if tool is None:
                raise NotFoundError(
                    f"Tool server {server!r} has no tool {name[:100]!r}; tools/list shows its tools."
                )
            remaining = timeout - (time.perf_counter() - started)
            result = await upstream.call(
                tool, arguments, timeout=max(remaining, 0.001), meta=tracing.carrier() or None
            )
            _check_nesting(result, server, name)
            size = len(result.model_dump_json(by_alias=True, exclude_none=True).encode())
            artifact_id: str | None = None
            if size > self._max_inline:
                result, artifact_id = await self._as_artifact(grant, name, result, size)
        except HostError as error:
            await self._telemetry(grant, name, server, tool, started, error.code, None, None)
            raise
        outcome = "error" if result.is_error else "ok"
        await self._telemetry(grant, name, server, tool, started, outcome, size, artifact_id)
        return result

    async def _upstream_name(self, upstream: Upstream, name: str) -> str | None:
        catalog = await upstream.tools()
        found = catalog.by_host_name.get(name)
        if found is None and time.monotonic() - catalog.fetched_at > 1.0:
            upstream.mark_stale()  # an unknown name may be a tool added since: look once more
            found = (await upstream.tools()).by_host_name.get(name)
        return found

    async def _as_artifact(
        self, grant: RunGrant, name: str, result: types.CallToolResult, size: int
    ) -> tuple[types.CallToolResult, str | None]:
        if self._stores is None:
            raise UpstreamError(
                f"The result of {name!r} is {size} bytes, over the {self._max_inline} bytes a result may "
                "carry, and this host cannot store it as an artifact."
            )
        import mcp_types as types  # loaded with the upstream that answered

        data, mime, preview = _artifact_body(result)
        record = await self._stores.artifacts.put_bytes(
            data,
            name=f"{name}-result{_extension(mime)}",
            mime_type=mime,
            max_bytes=MAX_ARTIFACT_BYTES,
            owner_run_id=grant.run_id,
        )
        ref = record.to_ref()
        text = (
            f"The result of {name} is {size} bytes, more than the {self._max_inline // 1024} KiB a result may "
            f"carry inline, so it was stored as artifact {ref.artifact_id} ({mime}, {record.size} bytes). "
            f"Read it with artifacts_read (artifact_id {ref.artifact_id!r}). Preview:\n{preview}"
        )
        replaced = types.CallToolResult(
            content=[
                types.TextContent(type="text", text=text),
                types.ResourceLink(
                    type="resource_link",
                    uri=f"mcphost://artifacts/{ref.artifact_id}",
                    name=ref.name or ref.artifact_id,
                    mime_type=mime,
                    size=record.size,
                ),
            ],
            structured_content={
                "artifact": ref.model_dump(mode="json", exclude_none=True),
                "preview": preview,
                "result_bytes": size,
                "truncated": True,
            },
            is_error=result.is_error,
        )
        return replaced, ref.artifact_id

    async def _telemetry(
        self,
        grant: RunGrant,
        name: str,
        server: str,
        tool: str | None,
        started: float,
        outcome: str,
        size: int | None,
        artifact_id: str | None,
    ) -> None:
        upstream_ms = round((time.perf_counter() - started) * 1000, 3)
        logger.info("host tool %s for run %s: %s in %.1f ms", name, grant.run_id, outcome, upstream_ms)
        if self._stores is None:
            return
        payload: JSONObject = {
            "tool_name": name,
            "server": server,
            "upstream_tool": tool,
            "outcome": outcome,
            "upstream_ms": upstream_ms,
            "result_bytes": size,
            "artifact_id": artifact_id,
        }
        with anyio.CancelScope(shield=True), anyio.move_on_after(TELEMETRY_WRITE_S):
            try:
                await self._stores.events.append(
                    event_id=new_id("evt"),
                    event_type=TELEMETRY_EVENT,
                    kind="telemetry",
                    conversation_id=grant.conversation_id,
                    thread_id=grant.thread_id,
                    run_id=grant.run_id,
                    source="system",
                    payload=payload,
                )
            except Exception:
                logger.exception("could not record the host tool call %s of run %s", name, grant.run_id)

    # -- inspection ----------------------------------------------------------------------------------------

    async def catalog(self, *, timeout: float | None = None) -> list[ServerStatus]:
        """Connect every server (bounded), list its tools, and report each one's status."""
        wait = self._list_timeout if timeout is None else timeout

        async def visit(upstream: Upstream) -> None:
            with anyio.move_on_after(wait):
                try:
                    await upstream.tools()
                except HostError as exc:
                    upstream.last_error = upstream.last_error or exc.message
                except Exception as exc:
                    upstream.last_error = describe_failure(exc)

        async with anyio.create_task_group() as tg:
            for upstream in self.upstreams.values():
                tg.start_soon(visit, upstream)
        return self.status()

    def status(self) -> list[ServerStatus]:
        return [u.status() for u in self.upstreams.values()]


def _artifact_body(result: types.CallToolResult) -> tuple[bytes, str, str]:
    """(bytes, mime type, preview) of an oversized result: its one text or media block as is (when the
    structured content only repeats that text, as SDK servers do for a string result), else the whole
    result as JSON."""
    import mcp_types as types  # loaded with the upstream that answered

    blocks = result.content
    structured = result.structured_content
    if len(blocks) == 1:
        block = blocks[0]
        if isinstance(block, types.TextContent) and _repeats(structured, block.text):
            return block.text.encode(), "text/plain; charset=utf-8", block.text[:PREVIEW_CHARS]
        if isinstance(block, types.ImageContent | types.AudioContent) and structured is None:
            try:
                data = base64.b64decode(block.data, validate=True)
            except (binascii.Error, ValueError):
                data = None
            if data is not None:
                return data, block.mime_type, f"({block.type} {block.mime_type}, {len(data)} bytes)"
    text = result.model_dump_json(by_alias=True, exclude_none=True)
    if result.structured_content is not None:
        preview = json.dumps(result.structured_content, ensure_ascii=False)[:PREVIEW_CHARS]
    else:
        preview = (
            "\n".join(b.text for b in blocks if isinstance(b, types.TextContent))[:PREVIEW_CHARS]
            or text[:PREVIEW_CHARS]
        )
    return text.encode(), "application/json", preview


def _repeats(structured: dict[str, Any] | None, text: str) -> bool:
    """Whether structured content says nothing the text does not: absent, `{"result": text}`, or the text
    is its JSON."""
    if structured is None or structured == {"result": text}:
        return True
    try:
        return json.loads(text) == structured
    except ValueError:
        return False


def _extension(mime: str) -> str:
    base = mime.split(";", 1)[0].strip()
    return {
        "text/plain": ".txt",
        "application/json": ".json",
        "image/png": ".png",
        "image/jpeg": ".jpg",
        "image/gif": ".gif",
        "image/webp": ".webp",
        "audio/wav": ".wav",
        "audio/mpeg": ".mp3",
    }.get(base, "")
