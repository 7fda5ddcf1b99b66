"""Per-message MCP HTTP headers, stamped the way the SDK's `ClientSession` stamps them.

Owns the bridge's knowledge of the protocol era: which version to announce on each POST and which routing
headers a 2026-07-28 request carries. It learns everything from the relayed traffic — the `initialize` result,
the `_meta` envelope on each message, `tools/list` results — and never invents a version. It does not own the
`Mcp-Session-Id` (the SDK transport captures it from the initialize response and sends it) nor the version on
responses the client POSTs back (the SDK transport reuses the last stamped version for those).

Mirrors `mcp.client.session` (`_preconnect_stamp`, `_make_handshake_stamp`, `_make_modern_stamp`):

- `initialize` carries no MCP header and forgets any learned version (the handshake is the negotiation).
- A request or notification whose `params._meta` names a protocol version is stamped with it. When that version
  is not a handshake-era one (the SDK server routes every other value to its 2026 entry) the message also gets
  `Mcp-Method`, `Mcp-Name` for the name-bearing methods (`tools/call`, `prompts/get`, `resources/read`), and for
  `tools/call` the `Mcp-Param-*` headers its tool's listed input schema declares with `x-mcp-header`.
- Any other request or notification carries the last learned version: the one the `initialize` result
  negotiated, or the one the previous enveloped message named.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
    encode_header_value,
    find_invalid_x_mcp_header,
    mcp_param_headers,
    x_mcp_header_map,
)
from mcp_types import PROTOCOL_VERSION_META_KEY, JSONRPCMessage, JSONRPCNotification, JSONRPCRequest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

__all__ = ["HeaderStamp"]


class HeaderStamp:
    """Computes the per-message headers for one bridge's client, learning the era as messages pass."""

    def __init__(self) -> None:
        self._version: str | None = None
        # tool name → {argument path: x-mcp-header token}, from the latest `tools/list` that listed the tool.
        self._param_maps: dict[str, dict[tuple[str, ...], str]] = {}

    @property
    def protocol_version(self) -> str | None:
        """The version stamped on messages that do not name one themselves (None before it is learned)."""
        return self._version

    def headers_for(self, message: JSONRPCMessage) -> dict[str, str] | None:
        """The MCP headers to send with `message`, or None when it needs none of its own."""
        if not isinstance(message, JSONRPCRequest | JSONRPCNotification):
            return None
        if message.method == "initialize":
            self._version = None
            return None
        params: Mapping[str, Any] = message.params or {}
        version = _envelope_version(params)
        if version is None:
            return {MCP_PROTOCOL_VERSION_HEADER: self._version} if self._version is not None else None
        self._version = version
        headers = {MCP_PROTOCOL_VERSION_HEADER: version}
        if version in HANDSHAKE_PROTOCOL_VERSIONS:
            return headers
        headers[MCP_METHOD_HEADER] = message.method
        name_key = NAME_BEARING_METHODS.get(message.method)
        name = params.get(name_key) if name_key is not None else None
        if isinstance(name, str):
            headers[MCP_NAME_HEADER] = encode_header_value(name)
        if (
            message.method == "tools/call"
            and isinstance(name, str)
            and (header_map := self._param_maps.get(name))
        ):
            arguments = params.get("arguments")
            if isinstance(arguments, Mapping):
                headers.update(mcp_param_headers(header_map, cast("Mapping[str, Any]", arguments)))
        return headers

    def observe_result(self, method: str, result: Mapping[str, Any]) -> None:
        """Learn from the result of a request the client sent (`initialize`, `tools/list`)."""
        if method == "initialize":
            version = result.get("protocolVersion")
            if isinstance(version, str):
                self._version = version
        elif method == "tools/list":
            tools = result.get("tools")
            if isinstance(tools, list):
                for tool in cast("list[Any]", tools):
                    self._observe_tool(tool)

    def _observe_tool(self, tool: Any) -> None:
        if not isinstance(tool, Mapping):
            return
        entry = cast("Mapping[str, Any]", tool)
        name = entry.get("name")
        if not isinstance(name, str):
            return
        schema = entry.get("inputSchema")
        if find_invalid_x_mcp_header(schema) is not None:
            # A conforming 2026 client drops such a tool, so nothing may be mirrored for it.
            self._param_maps.pop(name, None)
            return
        self._param_maps[name] = x_mcp_header_map(schema)


def _envelope_version(params: Mapping[str, Any]) -> str | None:
    meta = params.get("_meta")
    if not isinstance(meta, Mapping):
        return None
    version = cast("Mapping[str, Any]", meta).get(PROTOCOL_VERSION_META_KEY)
    return version if isinstance(version, str) else None
