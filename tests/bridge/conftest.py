"""Fixtures of the bridge tests; the server they serve and the bridge driver are in `_helpers.py`."""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from tests.bridge._helpers import BearerGate, Endpoint, ToolEvents, build_server


@pytest.fixture
def endpoint(request: pytest.FixtureRequest) -> Iterator[Endpoint]:
    """A fresh server per test (sessions, recorded requests and tool events start empty).

    Parametrize it indirectly with `True` for a server that answers with JSON bodies instead of SSE.
    """
    json_response = bool(getattr(request, "param", False))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    found = Endpoint(
        f"http://127.0.0.1:{port}/mcp", secrets.token_urlsafe(32), [], ToolEvents(), [], json_response
    )
    mcp_app = build_server(found.events).streamable_http_app(json_response=json_response)
    app = BearerGate(mcp_app, found.token, found)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive(), "the test MCP server thread died"
        assert time.monotonic() < deadline, "the test MCP server did not start within 10 s"
        time.sleep(0.01)
    try:
        yield found
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
