"""`mcphost-bridge`: relays MCP between a stdio client and a Streamable HTTP endpoint.

A leaf package: it imports `mcp` (and what `mcp` brings: `mcp_types`, `httpx2`, `pydantic`) and `anyio`, never
`mcphost` or `runners` (an import-linter contract checks it). The command line lives in `__main__`, the relay in
`relay`; the private helpers are `_stamp` (per-message MCP headers) and `_lines` (stdin framing).
"""

from bridge.relay import DEFAULT_TOKEN_ENV, BridgeConfig, BridgeError, run_bridge

__all__ = ["DEFAULT_TOKEN_ENV", "BridgeConfig", "BridgeError", "run_bridge"]
