"""`mcphost-bridge`: relays MCP between a stdio client and a Streamable HTTP endpoint.

A leaf package in the standard library alone: it imports neither `mcp` (nor `httpx2`, `pydantic`, `anyio`)
nor anything of `mcphost` or `mcphost_runners` (an import-linter contract and tests/bridge/test_main.py check
it), so that it answers its client within the first fraction of a second. The command line lives in
`__main__`, the relay in `relay`; the private helpers are `_http` (HTTP exchanges and SSE), `_stamp`
(per-message MCP headers) and `_lines` (stdin framing and JSON-RPC envelopes).
"""

from __future__ import annotations

from mcphost_bridge.relay import DEFAULT_TOKEN_ENV, BridgeConfig, BridgeError, run_bridge

__all__ = ["DEFAULT_TOKEN_ENV", "BridgeConfig", "BridgeError", "run_bridge"]
