"""Issue 10, item 9: the access log recorded `access_token`/`token`/`api_key` query values."""

from __future__ import annotations

import logging
from typing import Any

import httpx2
import pytest

from mcphost.serving import bind_socket, serve_http


async def test_the_access_log_never_records_token_query_values(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 10, item 9: the access log recorded `access_token`/`token`/`api_key` query values."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    caplog.set_level(logging.INFO, logger="uvicorn.access")
    sock = bind_socket("127.0.0.1", 0)
    with sock:
        async with serve_http(app, sock, access_log=True) as url, httpx2.AsyncClient() as http:
            query = "access_token=AT-SECRET&Token=T-SECRET&api_key=AK-SECRET&API%5FKEY=AK2-SECRET&limit=5"
            assert (await http.get(f"{url}/runs/x/mcp?{query}")).status_code == 204
            assert (await http.get(f"{url}/healthz?token=")).status_code == 204
    lines = [r.getMessage() for r in caplog.records if r.name == "uvicorn.access"]
    assert len(lines) == 2, lines
    assert "SECRET" not in "\n".join(lines)
    assert "/runs/x/mcp?access_token=***&Token=***&api_key=***&API%5FKEY=***&limit=5" in lines[0]
    assert "/healthz?token=***" in lines[1]
