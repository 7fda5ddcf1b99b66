"""Issue 13: a client that pipelined `initialize`, `notifications/initialized` and `tools/list` through the
bridge got "Bad Request: Missing session ID"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bridge._helpers import INITIALIZE_PARAMS, Endpoint, open_bridge, serving_endpoint
from tests.bridge.test_main import LEGACY, assert_only_jsonrpc


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    with serving_endpoint() as found:
        yield found


@pytest.mark.parametrize("endpoint", [False, True], indirect=True, ids=["sse", "json"])
async def test_a_client_may_pipeline_the_handshake_and_its_first_requests(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    """Issue 13: a client that pipelined `initialize`, `notifications/initialized` and `tools/list` through
    the bridge got "Bad Request: Missing session ID" (`tools/list` went out without the session id)."""
    burst: list[dict[str, Any]] = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE_PARAMS},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}},
        },
    ]
    async with open_bridge(endpoint.url, tmp_path, token=endpoint.token) as bridge_process:
        await bridge_process.send(b"\n".join(json.dumps(m).encode() for m in burst))  # one write, no waiting
        answers: dict[int, dict[str, Any]] = {}
        while len(answers) < 3:
            received = await bridge_process.receive(timeout=30)
            answers[received["id"]] = received
        assert answers[1]["result"]["protocolVersion"] == LEGACY
        assert "echo" in {tool["name"] for tool in answers[2]["result"]["tools"]}
        assert answers[3]["result"]["structuredContent"] == {"text": "x", "count": 1}
        await bridge_process.close_stdin()
        assert await bridge_process.wait() == 0
    posts = [seen for seen in endpoint.seen if seen.method == "POST"]
    assert "mcp-session-id" not in posts[0].headers
    assert all("mcp-session-id" in seen.headers for seen in posts[1:])
    assert_only_jsonrpc(bridge_process.stdout_lines)
