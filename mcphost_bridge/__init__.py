"""`mcphost-bridge`: relays MCP between a stdio client and a Streamable HTTP endpoint.

A leaf package: it imports `mcp` (and what `mcp` brings: `mcp_types`, `httpx2`, `pydantic`) and `anyio`, never
`mcphost` or `mcphost_runners` (an import-linter contract checks it). The command line lives in `__main__`, the relay in
`relay`; the private helpers are `_first` (the first exchange, in the standard library), `_stamp` (per-message
MCP headers) and `_lines` (stdin framing). The names below load `relay` on first use, so that `python -m mcphost_bridge`
can answer its client's first message before the SDK is imported (`__main__`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcphost_bridge.relay import DEFAULT_TOKEN_ENV, BridgeConfig, BridgeError, run_bridge

__all__ = ["DEFAULT_TOKEN_ENV", "BridgeConfig", "BridgeError", "run_bridge"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from mcphost_bridge import relay

        return getattr(relay, name)
    raise AttributeError(f"module 'mcphost_bridge' has no attribute {name!r}")
