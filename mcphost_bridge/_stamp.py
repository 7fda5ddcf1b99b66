"""Per-message MCP HTTP headers, stamped the way the SDK's `ClientSession` stamps them.

Owns the bridge's knowledge of the protocol era: which version to announce on each POST and which routing
headers a 2026-07-28 request carries. It learns everything from the relayed traffic — the `initialize` result,
the `_meta` envelope on each message, `tools/list` results — and never invents a version. It does not own the
`Mcp-Session-Id` nor the version on messages that carry no header of their own (the relay's transport state
keeps both).

Mirrors `mcp.client.session` (`_preconnect_stamp`, `_make_handshake_stamp`, `_make_modern_stamp`):

- `initialize` carries no MCP header and forgets any learned version (the handshake is the negotiation).
- A request or notification whose `params._meta` names a protocol version is stamped with it. When that version
  is not a handshake-era one (the SDK server routes every other value to its 2026 entry) the message also gets
  `Mcp-Method`, `Mcp-Name` for the name-bearing methods (`tools/call`, `prompts/get`, `resources/read`), and for
  `tools/call` the `Mcp-Param-*` headers its tool's listed input schema declares with `x-mcp-header`.
- Any other request or notification carries the last learned version: the one the `initialize` result
  negotiated, or the one the previous enveloped message named.

Imports only the standard library: the constants and the `x-mcp-header` rules of `mcp.shared.inbound` and
`mcp_types.version` are repeated here (importing the SDK costs most of a second), and tests/bridge/test_stamp.py
pins every one of them to the SDK's own, value for value and function against function.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator, Mapping
from typing import Any, cast

__all__ = [
    "HANDSHAKE_VERSIONS",
    "METHOD_HEADER",
    "MODERN_VERSIONS",
    "NAME_HEADER",
    "VERSION_HEADER",
    "VERSION_META_KEY",
    "HeaderStamp",
]

VERSION_HEADER = "mcp-protocol-version"
METHOD_HEADER = "mcp-method"
NAME_HEADER = "mcp-name"
VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
NAME_BEARING_METHODS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
PARAM_HEADER_PREFIX = "Mcp-Param-"
_X_MCP_HEADER = "x-mcp-header"
_B64_SENTINEL = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")
_HEADER_SAFE = re.compile(r"^[\x20-\x7E]*$")
_RFC9110_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_PRIMITIVE_TYPES = frozenset({"string", "integer", "boolean"})
_SUBSCHEMA_SINGLE = frozenset(
    {
        "items",
        "contains",
        "unevaluatedItems",
        "additionalProperties",
        "propertyNames",
        "unevaluatedProperties",
        "not",
        "if",
        "then",
        "else",
        "contentSchema",
    }
)
_SUBSCHEMA_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SUBSCHEMA_MAP = frozenset({"patternProperties", "dependentSchemas", "$defs", "definitions"})


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

    def headers_for(self, message: Mapping[str, Any]) -> dict[str, str] | None:
        """The MCP headers to send with `message` (a JSON-RPC envelope), or None when it needs none of its own."""
        method = message.get("method")
        if not isinstance(method, str):
            return None  # a response or an error
        if method == "initialize":
            self._version = None
            return None
        params = cast("Mapping[str, Any]", message.get("params") or {})
        version = _envelope_version(params)
        if version is None:
            return {VERSION_HEADER: self._version} if self._version is not None else None
        self._version = version
        headers = {VERSION_HEADER: version}
        if version in HANDSHAKE_VERSIONS:
            return headers
        headers[METHOD_HEADER] = method
        name_key = NAME_BEARING_METHODS.get(method)
        name = params.get(name_key) if name_key is not None else None
        if isinstance(name, str):
            headers[NAME_HEADER] = encode_header_value(name)
        if method == "tools/call" and isinstance(name, str) and (header_map := self._param_maps.get(name)):
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
    version = cast("Mapping[str, Any]", meta).get(VERSION_META_KEY)
    return version if isinstance(version, str) else None


def encode_header_value(value: str) -> str:
    """`value`, or its `=?base64?...?=` form when it would not survive an HTTP field round-trip."""
    if _HEADER_SAFE.fullmatch(value) and value == value.strip() and not _B64_SENTINEL.fullmatch(value):
        return value
    return f"=?base64?{base64.b64encode(value.encode('utf-8')).decode('ascii')}?="


def find_invalid_x_mcp_header(input_schema: Any) -> str | None:
    """Why an `x-mcp-header` annotation in `input_schema` is invalid, or None when all are valid."""
    seen: set[str] = set()
    for path, schema in _walk_schema_positions(input_schema):
        if _X_MCP_HEADER not in schema:
            continue
        if not path:
            return "an x-mcp-header is not reachable through `properties` alone"
        header = schema[_X_MCP_HEADER]
        if not isinstance(header, str) or not _RFC9110_TOKEN.fullmatch(header):
            return "an x-mcp-header is not an RFC 9110 token"
        prop_type = schema.get("type")
        if not isinstance(prop_type, str) or prop_type not in _PRIMITIVE_TYPES:
            return "an x-mcp-header is on a property that is not an integer, string or boolean"
        if header.lower() in seen:
            return "an x-mcp-header is given twice"
        seen.add(header.lower())
    return None


def x_mcp_header_map(input_schema: Any) -> dict[tuple[str, ...], str]:
    """Each annotated property's path → its `x-mcp-header` token (for a schema that passed the check)."""
    return {
        path: token
        for path, schema in _walk_schema_positions(input_schema)
        if path and isinstance(token := schema.get(_X_MCP_HEADER), str)
    }


def mcp_param_headers(
    header_map: Mapping[tuple[str, ...], str], arguments: Mapping[str, Any]
) -> dict[str, str]:
    """The `Mcp-Param-*` headers a `tools/call` mirrors from its arguments."""
    headers: dict[str, str] = {}
    for path, token in header_map.items():
        value = _value_at_path(arguments, path)
        if value is None or (rendered := _render_scalar(value)) is None:
            continue
        headers[f"{PARAM_HEADER_PREFIX}{token}"] = encode_header_value(rendered)
    return headers


def _walk_schema_positions(root: Any) -> Iterator[tuple[tuple[str, ...] | None, dict[str, Any]]]:
    """(`properties` path or None once another applicator was crossed, schema) for each schema position."""
    stack: list[tuple[tuple[str, ...] | None, Any]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        schema = cast("dict[str, Any]", node)
        yield path, schema
        for keyword, value in schema.items():
            if keyword == "properties" and isinstance(value, dict):
                for name, sub in cast("dict[str, Any]", value).items():
                    stack.append(((*path, name) if path is not None else None, sub))
            elif keyword in _SUBSCHEMA_SINGLE:
                stack.append((None, value))
            elif keyword in _SUBSCHEMA_LIST and isinstance(value, list):
                stack.extend((None, sub) for sub in cast("list[Any]", value))
            elif keyword in _SUBSCHEMA_MAP and isinstance(value, dict):
                stack.extend((None, sub) for sub in cast("dict[str, Any]", value).values())


def _render_scalar(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, str | int | float):
        return None
    try:
        return str(value)
    except ValueError:  # an int past the int-to-str digit limit
        return None


def _value_at_path(arguments: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = arguments
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = cast("Mapping[str, Any]", node).get(key)
    return node
