"""`HeaderStamp` stamps what the SDK's own `ClientSession` stamps, learning the era from the traffic.

The 2026 cases run the SDK's real modern stamp (`mcp.client.session._make_modern_stamp`) over a request and
check that the bridge, seeing only the stamped message on the wire, derives the very same headers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types
import pytest

# The SDK's own (private) stamp is the reference the bridge's must equal; no public API exposes it.
from mcp.client.session import _make_modern_stamp  # pyright: ignore[reportPrivateUsage]
from mcp.shared import inbound
from mcp.shared.dispatcher import CallOptions
from mcp_types import JSONRPCMessage, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from mcphost_bridge import _stamp
from mcphost_bridge._stamp import HeaderStamp as _HeaderStamp

MODERN = "2026-07-28"
REGION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "shard": {"type": "integer", "x-mcp-header": "Shard"},
        "note": {"type": "string"},
    },
}


class HeaderStamp(_HeaderStamp):
    """The bridge's stamp, fed the SDK's envelope models as the JSON they are on the wire."""

    def headers_for(self, message: JSONRPCMessage | Mapping[str, Any]) -> dict[str, str] | None:  # pyright: ignore[reportIncompatibleMethodOverride]
        if not isinstance(message, Mapping):
            message = message.model_dump(by_alias=True, exclude_unset=True, mode="json")
        return super().headers_for(message)


def test_the_sdk_spellings_it_repeats_are_the_sdks() -> None:
    assert (_stamp.VERSION_HEADER, _stamp.METHOD_HEADER, _stamp.NAME_HEADER) == (
        inbound.MCP_PROTOCOL_VERSION_HEADER,
        inbound.MCP_METHOD_HEADER,
        inbound.MCP_NAME_HEADER,
    )
    assert _stamp.VERSION_META_KEY == mcp_types.PROTOCOL_VERSION_META_KEY
    assert (_stamp.HANDSHAKE_VERSIONS, _stamp.MODERN_VERSIONS) == (
        HANDSHAKE_PROTOCOL_VERSIONS,
        MODERN_PROTOCOL_VERSIONS,
    )
    assert dict(inbound.NAME_BEARING_METHODS) == _stamp.NAME_BEARING_METHODS
    assert _stamp.PARAM_HEADER_PREFIX == inbound.MCP_PARAM_HEADER_PREFIX


NESTED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "where": {"type": "object", "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}}},
        "flag": {"type": "boolean", "x-mcp-header": "Flag"},
    },
}
SCHEMAS: list[Any] = [
    None,
    REGION_SCHEMA,
    NESTED_SCHEMA,
    {"type": "object", "properties": {"a": {"type": "number", "x-mcp-header": "A"}}},
    {"type": "object", "properties": {"a": {"type": ["string"], "x-mcp-header": "A"}}},
    {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "bad header"}}},
    {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": 7}}},
    {"type": "object", "x-mcp-header": "Root"},
    {"anyOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]},
    {
        "properties": {
            "a": {"type": "string", "x-mcp-header": "Same"},
            "b": {"type": "string", "x-mcp-header": "same"},
        }
    },
]
ARGUMENTS: list[dict[str, Any]] = [
    {"region": "eu west", "shard": 7, "note": "n"},
    {"region": " padded", "shard": True},
    {"region": "naïve", "shard": None},
    {"where": {"zone": "=?base64?x?="}, "flag": False},
    {"where": "not a mapping", "flag": [1]},
    {"region": 1.5, "shard": 10**5000},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_x_mcp_header_rules_it_repeats_decide_as_the_sdks(schema: Any) -> None:
    assert (_stamp.find_invalid_x_mcp_header(schema) is None) == (
        inbound.find_invalid_x_mcp_header(schema) is None
    )
    if inbound.find_invalid_x_mcp_header(schema) is None:
        header_map = inbound.x_mcp_header_map(schema)
        assert _stamp.x_mcp_header_map(schema) == header_map
        for arguments in ARGUMENTS:
            assert _stamp.mcp_param_headers(header_map, arguments) == inbound.mcp_param_headers(
                header_map, arguments
            )


def request(method: str, params: dict[str, Any] | None = None, request_id: int = 1) -> JSONRPCRequest:
    return JSONRPCRequest(jsonrpc="2.0", id=request_id, method=method, params=params)


def sdk_modern_stamp(
    method: str, params: dict[str, Any], header_maps: Mapping[str, Mapping[str, Any]] | None = None
) -> tuple[JSONRPCRequest, dict[str, str]]:
    """Stamp a request the way a 2026 `ClientSession` does; return the wire message and its headers."""
    from mcp.shared.inbound import mcp_param_headers, x_mcp_header_map

    def resolve(name: str, arguments: Mapping[str, Any]) -> dict[str, str]:
        schema = (header_maps or {}).get(name)
        return mcp_param_headers(x_mcp_header_map(schema), arguments) if schema is not None else {}

    stamp = _make_modern_stamp(MODERN, {"name": "t", "version": "0"}, {}, resolve)
    data: dict[str, Any] = {"method": method, "params": params}
    opts: CallOptions = {}
    stamp(data, opts)
    return request(method, data["params"]), dict(opts.get("headers") or {})


def test_initialize_carries_no_header_and_its_result_sets_the_handshake_version() -> None:
    stamp = HeaderStamp()
    assert stamp.headers_for(request("initialize", {"protocolVersion": "2025-11-25"})) is None
    stamp.observe_result("initialize", {"protocolVersion": "2025-06-18"})
    initialized = JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized")
    assert stamp.headers_for(initialized) == {"mcp-protocol-version": "2025-06-18"}
    assert stamp.headers_for(request("tools/call", {"name": "echo"})) == {
        "mcp-protocol-version": "2025-06-18"
    }


def test_nothing_is_stamped_before_a_version_is_known_and_responses_never_are() -> None:
    stamp = HeaderStamp()
    assert stamp.headers_for(request("tools/list")) is None
    stamp.observe_result("initialize", {"protocolVersion": "2025-11-25"})
    response: JSONRPCMessage = JSONRPCResponse(jsonrpc="2.0", id=5, result={})
    assert stamp.headers_for(response) is None


def test_a_new_initialize_forgets_the_learned_version() -> None:
    stamp = HeaderStamp()
    stamp.observe_result("initialize", {"protocolVersion": "2025-11-25"})
    stamp.headers_for(request("initialize"))
    assert stamp.protocol_version is None


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("server/discover", {}),
        ("tools/list", {}),
        ("tools/call", {"name": "echo", "arguments": {"text": "x"}}),
        ("tools/call", {"name": "naïve tool ", "arguments": {}}),
        ("prompts/get", {"name": "instructions"}),
        ("resources/read", {"uri": "mcphost://run/context"}),
    ],
)
def test_2026_requests_get_the_headers_the_sdk_client_would_send(method: str, params: dict[str, Any]) -> None:
    wire, expected = sdk_modern_stamp(method, params)
    assert HeaderStamp().headers_for(wire) == expected


def test_2026_tool_calls_mirror_x_mcp_header_arguments_once_the_tool_was_listed() -> None:
    arguments = {"region": "eu west", "shard": 7, "note": "n"}
    wire, expected = sdk_modern_stamp(
        "tools/call", {"name": "region", "arguments": arguments}, header_maps={"region": REGION_SCHEMA}
    )
    assert expected["Mcp-Param-Region"] == "eu west"
    stamp = HeaderStamp()
    unlisted = stamp.headers_for(wire)
    assert unlisted is not None
    assert "Mcp-Param-Region" not in unlisted
    stamp.observe_result("tools/list", {"tools": [{"name": "region", "inputSchema": REGION_SCHEMA}]})
    assert stamp.headers_for(wire) == expected


def test_a_tool_relisted_with_an_invalid_annotation_mirrors_nothing() -> None:
    stamp = HeaderStamp()
    stamp.observe_result("tools/list", {"tools": [{"name": "region", "inputSchema": REGION_SCHEMA}]})
    broken = {"type": "object", "properties": {"region": {"type": "number", "x-mcp-header": "Region"}}}
    stamp.observe_result("tools/list", {"tools": [{"name": "region", "inputSchema": broken}]})
    wire, _ = sdk_modern_stamp("tools/call", {"name": "region", "arguments": {"region": 1.5}})
    headers = stamp.headers_for(wire)
    assert headers is not None
    assert not any(name.startswith("Mcp-Param-") for name in headers)


def test_a_2026_message_sets_the_version_for_messages_without_an_envelope() -> None:
    stamp = HeaderStamp()
    wire, _ = sdk_modern_stamp("tools/list", {})
    stamp.headers_for(wire)
    bare = JSONRPCNotification(jsonrpc="2.0", method="notifications/roots/list_changed")
    assert stamp.headers_for(bare) == {"mcp-protocol-version": MODERN}
