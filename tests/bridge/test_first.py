"""`mcphost_bridge._first`: the opening message answered with the standard library, before the SDK is imported."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

import anyio.to_thread
import mcp_types
import pytest
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcphost_bridge import _first
from mcphost_bridge._first import FirstExchange, first_exchange, http_headers
from tests.bridge.conftest import INITIALIZE_PARAMS, Endpoint, free_port

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
}


@contextmanager
def stdin_with(data: bytes) -> Generator[int]:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, data)
    os.close(write_fd)
    try:
        yield read_fd
    finally:
        os.close(read_fd)


def lines(*messages: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(m).encode() + b"\n" for m in messages)


async def exchange(url: str, token: str | None, data: bytes) -> tuple[FirstExchange, list[Any]]:
    out = io.BytesIO()
    with stdin_with(data) as fd:
        first = await anyio.to_thread.run_sync(
            lambda: first_exchange(url, http_headers({}, token), timeout=5, stdin_fd=fd, stdout=out)
        )
    return first, [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_sdk_spellings_it_repeats_are_the_sdks() -> None:
    assert frozenset(MODERN_PROTOCOL_VERSIONS) == _first.MODERN_VERSIONS
    assert mcp_types.PROTOCOL_VERSION_META_KEY == _first.VERSION_META_KEY
    assert (MCP_PROTOCOL_VERSION_HEADER, MCP_METHOD_HEADER) == (_first.VERSION_HEADER, _first.METHOD_HEADER)


def test_the_command_imports_neither_the_sdk_nor_httpx_before_the_first_answer() -> None:
    code = (
        "import sys, mcphost_bridge.__main__, mcphost_bridge._first; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'httpx2', 'pydantic', 'anyio')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_of_the_host_the_whole_bridge_loads_only_its_common_leaf() -> None:
    # The import contract allows `mcphost.common`; this pins that loading it costs no more than that.
    code = (
        "import sys, mcphost_bridge.__main__, mcphost_bridge.relay, mcphost_bridge._lines; "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('mcphost', 'runners'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    loaded = out.stdout.split()
    assert "mcphost.common.lines" in loaded
    assert [m for m in loaded if m != "mcphost" and not m.startswith("mcphost.common")] == []


@pytest.mark.parametrize("endpoint", [False, True], indirect=True, ids=["sse", "json"])
async def test_initialize_is_answered_by_the_endpoint_and_the_pipelined_rest_is_left_unread(
    endpoint: Endpoint,
) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE_PARAMS}
    rest = lines(
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    )
    first, written = await exchange(endpoint.url, endpoint.token, lines(initialize) + rest)
    [answer] = written
    assert answer["id"] == 1
    assert answer["result"]["serverInfo"]["name"] == "bridge-test"  # the endpoint's own answer
    assert first.request == initialize
    assert json.loads(first.answer) == answer
    assert first.session_id
    assert first.unread == rest
    [post] = endpoint.seen
    assert post.headers["authorization"] == f"Bearer {endpoint.token}"
    assert "mcp-protocol-version" not in post.headers
    assert "mcp-session-id" not in post.headers


@pytest.mark.parametrize("endpoint", [False, True], indirect=True, ids=["sse", "json"])
async def test_server_discover_is_answered_with_the_2026_headers_and_no_session(endpoint: Endpoint) -> None:
    discover = {"jsonrpc": "2.0", "id": "d", "method": "server/discover", "params": {"_meta": MODERN_META}}
    first, [answer] = await exchange(endpoint.url, endpoint.token, lines(discover))
    assert answer["id"] == "d"
    assert "2026-07-28" in answer["result"]["supportedVersions"]
    assert first.session_id is None
    assert first.unread == b""
    [post] = endpoint.seen
    assert post.headers["mcp-protocol-version"] == "2026-07-28"
    assert post.headers["mcp-method"] == "server/discover"


@pytest.mark.parametrize(
    "data",
    [
        lines({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),  # not an opening message
        lines({"jsonrpc": "2.0", "id": True, "method": "initialize"}),  # not a valid id
        lines({"jsonrpc": "2.0", "id": 2**80, "method": "initialize"}),  # huge id
        lines({"jsonrpc": "2.0", "id": 1, "method": "initialize", "extra": 1}),
        lines({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}),  # no era named
        b'{"jsonrpc": "2.0", "id": 1, "method": "initialize"',  # no newline yet: stdin ended
        b"not json\n",
        b"\x00\n",
        b"",
    ],
)
async def test_anything_else_is_left_to_the_relay_untouched(endpoint: Endpoint, data: bytes) -> None:
    first, written = await exchange(endpoint.url, endpoint.token, data)
    assert first == FirstExchange(data)
    assert written == []
    assert endpoint.seen == []


async def test_a_refusal_writes_nothing_and_leaves_the_line_for_the_relay_to_report(
    endpoint: Endpoint,
) -> None:
    data = lines({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE_PARAMS})
    first, written = await exchange(endpoint.url, "wrong", data)
    assert (first, written) == (FirstExchange(data), [])


async def test_an_unreachable_endpoint_writes_nothing() -> None:
    data = lines({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE_PARAMS})
    first, written = await exchange(f"http://127.0.0.1:{free_port()}/mcp", "t", data)
    assert (first, written) == (FirstExchange(data), [])


async def test_a_proxy_in_the_environment_leaves_it_to_the_relay(
    endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    data = lines({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE_PARAMS})
    first, written = await exchange(endpoint.url, endpoint.token, data)
    assert (first, written) == (FirstExchange(data), [])
    assert endpoint.seen == []


def test_the_token_replaces_an_authorization_header() -> None:
    assert http_headers({"authorization": "x", "X-A": "1"}, "tok") == {
        "X-A": "1",
        "Authorization": "Bearer tok",
    }
    assert http_headers({"authorization": "x"}, None) == {"authorization": "x"}
