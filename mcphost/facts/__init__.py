"""The per-run MCP server (PROTOCOL §7): the host's facts, cut by each run's grant, at `/runs/{run_id}/mcp`.

One `FactsServer` serves every run of a host process and is itself the ASGI endpoint: the host mounts
`FactsServer.routes` (or serves `asgi_app`), enters `running()` in its lifespan and calls
`end_run(run_id)` when a run ends. What the host may plug in is in `providers`: the run contexts it keeps, upstream host tools, knowledge retrieval.

Module map: `server` (HTTP endpoint, authentication, sessions, lifetime), `_dispatch` (the SDK server and
the call pipeline: checks, limits, audit, cancellation), `_tools` (the tool table), `_args` (argument
models), `_history`, `_artifacts`, `_keyed` (state and storage), `_run` (context, knowledge, prompt)
handlers, `_call` (what a handler gets), `_context` (context loading and token redaction), `_grants`
(grant cache), `_limits` (rate and budgets), `_sessions` (handshake-era sessions held, closing one),
`_results` (result and error shapes).
"""

from __future__ import annotations

from mcphost.facts._tools import granted_tools
from mcphost.facts.providers import (
    ContextProvider,
    HostToolProvider,
    KnowledgeChunk,
    KnowledgeRetriever,
    ReplayAnswers,
)
from mcphost.facts.server import MCP_PATH, FactsServer

__all__ = [
    "MCP_PATH",
    "ContextProvider",
    "FactsServer",
    "HostToolProvider",
    "KnowledgeChunk",
    "KnowledgeRetriever",
    "ReplayAnswers",
    "granted_tools",
]
