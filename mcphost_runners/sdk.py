"""The runner SDK: write a runner as a small class, serve it as a stdio plugin (PROTOCOL §8).

```python
class Echo(AgentRunner):
    name = "default"
    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        await out.message(ctx.input.text or "")
        await out.completed()

serve(Echo(), author="acme", plugin="echo", version="1.0.0")
```

Owns the plugin side of the wire: reading host requests from stdin, answering `initialize` with the
manifests, running each `runner/run` in its own task, sending results as `runner/result` notifications,
cancelling on `runner/cancel`, and exiting on `shutdown` or stdin EOF. A runner reaches the host's facts
through `out.api`, the run's `RunAPI` (an MCP client of `ctx.context.mcp`, `_runapi.py`): `serve()` opens
one per run, connects it on first use and closes it when the run ends. Imports only `mcphost.protocol`,
the `mcp` SDK, anyio, httpx2, pydantic and the standard library.

This module is the public face: plugin authors import from here, and `__all__` (pinned by a test) is the
surface. The parts live in `_runner.py` (`AgentRunner`), `_output.py` (`RunOutput`), `_plugin_server.py`
(`serve()`, the stdio loop) and `_runapi.py` (`RunAPI`); the per-run tool answers are
`mcphost.protocol.facts`, re-exported here under the same names.

`run()` pushes results through `RunOutput` rather than yielding them: a runner may then use task groups
and cancel scopes freely (none straddles a `yield`, STYLE 19) and emit from several tasks at once.

Invariants:
- stdout is the protocol channel. `serve()` moves it to a private descriptor and points fd 1 at stderr (and
  fd 0 at /dev/null), so a stray `print()` or a child process can neither corrupt nor steal the protocol.
  Logging goes to stderr.
- Lines to the host are written whole and in order by one flusher, once the task that sent them lets the
  loop run: lines sent back to back (a run's last results and its answer) go in one write, which the host
  reads as one batch of results (one transaction). Past 64 KiB queued, the sender writes and waits for
  the write, so a host that reads slowly holds the runner back, then lets the loop run, so a runner that
  sends in a loop awaiting nothing else can still be cancelled. The pipe is non-blocking: a slow host
  never blocks the event loop.
- Within a run, `sequence` starts at 1 and increases by one per result, in the order results are written;
  nothing follows `run.completed`/`run.failed`. A run whose `run()` returns without a terminal result gets
  `run.completed`; a cancelled run gets `run.failed {code: cancelled}`; a `RunAPIError` the runner let
  through gets `run.failed` with that error's code; any other exception gets
  `run.failed {code: runner.error, message: str(exc)}` and its traceback on stderr.
- The answer to `runner/run` (`{status}`) is written after the run's last result.
- Lines over `MAX_LINE_BYTES` from the host are logged and skipped; unknown request methods get -32601.
"""

from mcphost.protocol import (
    AgentRunContext,
    ArtifactRef,
    Capabilities,
    ConfigField,
    ContextSupport,
    Permissions,
    Usage,
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
    KnowledgeChunk,
    SearchHit,
    StateList,
    StateListItem,
    StateValue,
    StateWritten,
    StorageList,
    StorageListItem,
    StorageValue,
    StorageWritten,
    TranscriptItem,
)
from mcphost.protocol.inference import (
    AssistantMessage,
    EmbeddingAnswer,
    ImagePart,
    ModelInvocation,
    ModelMessage,
    ModelsList,
    ModelTool,
    ModelUsage,
    RerankAnswer,
    RerankScore,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from mcphost_runners._output import RunOutput
from mcphost_runners._plugin_server import installed_version, serve
from mcphost_runners._runapi import RunAPI, RunAPIError, RunTool, ToolResult
from mcphost_runners._runner import AgentRunner

__all__ = [
    "AgentRunContext",
    "AgentRunner",
    "ArtifactChunk",
    "ArtifactMetadata",
    "ArtifactRef",
    "AssistantMessage",
    "Capabilities",
    "ConfigField",
    "ContextSupport",
    "Deleted",
    "EmbeddingAnswer",
    "EventPage",
    "EventRecord",
    "HistoryPage",
    "HistorySearch",
    "ImagePart",
    "KnowledgeBase",
    "KnowledgeChunk",
    "ModelInvocation",
    "ModelMessage",
    "ModelTool",
    "ModelUsage",
    "ModelsList",
    "Permissions",
    "RerankAnswer",
    "RerankScore",
    "RunAPI",
    "RunAPIError",
    "RunOutput",
    "RunTool",
    "SearchHit",
    "StateList",
    "StateListItem",
    "StateValue",
    "StateWritten",
    "StorageList",
    "StorageListItem",
    "StorageValue",
    "StorageWritten",
    "TextPart",
    "ToolCallPart",
    "ToolResult",
    "ToolResultPart",
    "TranscriptItem",
    "Usage",
    "installed_version",
    "serve",
]
