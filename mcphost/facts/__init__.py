"""The per-run MCP server (PROTOCOL §7): the host's facts, cut by each run's grant, at `/runs/{run_id}/mcp`.

One `FactsServer` (`server.py`) serves every run of a host process and is itself the ASGI endpoint: a
host mounts the routes of its `FactsEndpoint` (`endpoint.py`), which loads that server on first need (it
is built on the MCP SDK, the largest import of a host), enters `running()` in its lifespan and calls
`end_run(run_id)` when a run ends. What the host may plug in is in `providers`: the run contexts it keeps,
upstream host tools, knowledge retrieval.

Module map: `endpoint` (the routes, loading the server, 503s before it runs), `server` (HTTP endpoint,
authentication, sessions, lifetime), `_dispatch` (the SDK server and the call pipeline: checks, limits,
audit, cancellation), `_tools` (the tool table), `_listing` (the generated `tools.json` and the tools a
grant lists), `_args` (argument models), `_history`, `_artifacts`, `_keyed` (state and storage), `_run`
(context, knowledge, prompt) handlers, `_call` (what a handler gets), `_context` (context loading and
token redaction), `_grants` (grant cache), `_limits` (rate and budgets), `_sessions` (handshake-era
sessions held, closing one), `_results` (result and error shapes).

Importing this package imports neither the SDK nor `server`: import `mcphost.facts.server` (and
`providers`) by name.
"""

from __future__ import annotations

from mcphost.facts._listing import granted_tools
from mcphost.facts.endpoint import MCP_PATH, FactsEndpoint

__all__ = ["MCP_PATH", "FactsEndpoint", "granted_tools"]
