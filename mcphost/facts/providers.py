"""The seams the host plugs into the facts server: run contexts, host tools, knowledge retrieval, host
model calls and the recorded answers of a replay.

Owns five small contracts and nothing behind them. The facts server works without any of them: without
a `ContextProvider` it rebuilds what it can of a run's context from the stores; without a
`HostToolProvider` no `<server>__<tool>` tools exist; without a `ModelCaller` `models_list` lists nothing
and the other model tools answer `not_found`; without a `KnowledgeRetriever` every granted
knowledge base answers `not_found` ("no index yet").

Invariants every implementation must keep:
- The grant passed in is already checked (active, before its deadline, within limits) and frozen; a
  provider must not widen it. `HostToolProvider.list_tools` may return more than the grant allows — the
  facts server filters again with `grants.allows_host_tool` — but `call_tool` is only ever called for a
  name the grant allows.
- Failures an agent can fix are `HostError`s (their `code` becomes the tool error code) or, for host
  tools, a `CallToolResult` with `is_error=True`. Any other exception is logged and answered as
  `runtime_error` without details.
- Calls are cancelled (anyio cancellation) when their run ends; implementations must not shield them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, Protocol

import mcp_types as types

from mcphost.models import RunGrant
from mcphost.protocol import AgentRunContext, JSONObject
from mcphost.protocol.facts import KnowledgeChunk
from mcphost.protocol.inference import (
    EmbeddingAnswer,
    ModelInvocation,
    ModelsEmbedArgs,
    ModelsInvokeArgs,
    ModelsList,
    ModelsRerankArgs,
    RerankAnswer,
)

ContextProvider = Callable[[str], Awaitable[AgentRunContext | None]]
"""`run_id` → the context the run was started with (token included; the facts server removes it), or
None when the host no longer has it. Injected by the host, which builds and keeps the contexts."""

RunParker = Callable[[str, str], Awaitable[None]]
"""(`run_id`, `approval_id`) → stop the run and end it `parked` on that approval (the orchestrator's
`park`; on another replica's run it asks that replica through the database). Must not wait for the stop."""


class HostToolProvider(Protocol):
    """Upstream MCP tools exposed to runs under their host names `<server>__<tool>` (the gateway)."""

    async def list_tools(self, grant: RunGrant) -> Sequence[types.Tool]:
        """The host tools this run may see, each with its own input schema."""
        ...

    async def call_tool(self, grant: RunGrant, name: str, arguments: JSONObject) -> types.CallToolResult:
        """Call host tool `name` for the run of `grant` and return its result unchanged."""
        ...


class KnowledgeRetriever(Protocol):
    """Retrieval over the host's knowledge bases (full-text today, whatever the knowledge layer offers later)."""

    async def retrieve(
        self, kb_id: str, query: str, *, top_k: int, filters: JSONObject | None
    ) -> Sequence[KnowledgeChunk]:
        """The best `top_k` chunks of `kb_id` for `query`.

        Raises:
            NotFoundError: the knowledge base has no index (yet).
            InvalidArgumentError: `filters` the retriever does not understand.
        """
        ...


class ModelCaller(Protocol):
    """The host's models, called for a run through its grant (`mcphost.proxy.calls.ModelCalls`)."""

    def listed(self, grant: RunGrant) -> ModelsList:
        """The host models the run may call."""
        ...

    async def invoke(
        self,
        run_id: str,
        grant: RunGrant,
        args: ModelsInvokeArgs,
        on_text: Callable[[str], Awaitable[None]] | None,
    ) -> ModelInvocation:
        """One chat call; with `on_text`, streamed, each text delta passed to it as it arrives."""
        ...

    async def rerank(self, run_id: str, grant: RunGrant, args: ModelsRerankArgs) -> RerankAnswer:
        """Documents scored by a rerank model, best first."""
        ...

    async def embed(self, run_id: str, grant: RunGrant, args: ModelsEmbedArgs) -> EmbeddingAnswer:
        """A vector per input from an embedding model, in the order of the inputs."""
        ...


class ReplayAnswers(Protocol):
    """A replay's recorded answers (`recording.ReplayBook`): with them, the facts server answers every
    call from the recording and nothing reaches the stores, host tools or knowledge."""

    def answer(
        self, run_id: str, tool: str, arguments: JSONObject
    ) -> tuple[Literal["ok", "error"], JSONObject]:
        """("ok", the MCP result as JSON) or ("error", a PROTOCOL §5 error `{code, message, …}`)."""
        ...

    def tool_list(self) -> JSONObject | None:
        """The recorded `tools/list` result, or None to list the grant's tools as usual."""
        ...
