"""CORS for a browser UI on another origin (`[host] cors_origins`), through the real app over a real host
(SQLite file or PostgreSQL): off by default, preflights answered without the API key for the configured
origins only, every `/v1` answer readable by them (refusals included), and the Host/Origin guard intact.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import httpx2
import pytest

from mcphost.app import Host, open_host
from mcphost.config import settings_from_mapping
from mcphost.errors import ConfigError
from mcphost.inspection import create_grant
from tests.e2e.httpkit import api_settings, asgi_client, event_body, parse_sse, row_counts

CONSOLE = "https://console.example.com"
KEY = {"authorization": "Bearer cors-key"}


def preflight(
    origin: str, method: str = "POST", headers: str = "authorization, content-type"
) -> dict[str, str]:
    return {
        "origin": origin,
        "access-control-request-method": method,
        "access-control-request-headers": headers,
    }


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    settings = api_settings(database_url, tmp_path / "data", api_key="cors-key", cors_origins=[CONSOLE + "/"])
    async with open_host(settings) as opened:
        yield opened


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient, None]:
    async with asgi_client(host) as opened:
        yield opened


async def test_cors_is_off_by_default(database_url: str, tmp_path: Path) -> None:
    async with open_host(api_settings(database_url, tmp_path / "data")) as host, asgi_client(host) as client:
        answer = await client.options("/v1/events", headers=preflight(CONSOLE))
        assert answer.status_code == 401  # the guard refuses the foreign Origin; no CORS answer
        assert "access-control-allow-origin" not in answer.headers
        local = await client.options("/v1/events", headers=preflight("http://localhost:3000"))
        assert local.status_code == 405
        assert "access-control-allow-origin" not in local.headers
        plain = await client.get("/v1/runs", headers={"origin": "http://localhost:3000"})
        assert plain.status_code == 200
        assert "access-control-allow-origin" not in plain.headers


async def test_a_preflight_from_a_configured_origin_is_answered_without_the_key(
    host: Host, client: httpx2.AsyncClient
) -> None:
    before = await row_counts(host.stores)
    answer = await client.options("/v1/events", headers=preflight(CONSOLE))
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == CONSOLE
    assert {"GET", "POST", "DELETE"} <= set(answer.headers["access-control-allow-methods"].split(", "))
    allowed = answer.headers["access-control-allow-headers"].lower()
    assert "authorization" in allowed
    assert "last-event-id" in allowed
    assert "access-control-allow-credentials" not in answer.headers  # bearer keys, not cookies
    assert await row_counts(host.stores) == before


@pytest.mark.parametrize(
    ("headers", "refused"),
    [
        (preflight("https://evil.example"), "origin"),
        (preflight("https://console.example.com.evil.example"), "origin"),
        (preflight("http://console.example.com"), "origin"),  # another scheme is another origin
        (preflight(CONSOLE, method="PUT"), "method"),
        (preflight(CONSOLE, headers="x-made-up"), "headers"),
    ],
)
async def test_a_preflight_outside_the_configuration_is_refused(
    client: httpx2.AsyncClient, headers: dict[str, str], refused: str
) -> None:
    answer = await client.options("/v1/runs", headers=headers)
    assert answer.status_code == 400
    assert answer.text == f"Disallowed CORS {refused}"
    if refused == "origin":
        assert "access-control-allow-origin" not in answer.headers


async def test_answers_to_a_configured_origin_carry_cors_headers_and_the_guard_still_applies(
    host: Host, client: httpx2.AsyncClient
) -> None:
    origin = {"origin": CONSOLE}
    admitted = await client.post("/v1/events", json=event_body("from the console"), headers={**KEY, **origin})
    assert admitted.status_code == 202, admitted.text
    assert admitted.headers["access-control-allow-origin"] == CONSOLE
    assert "location" in admitted.headers["access-control-expose-headers"].lower()
    run_id = admitted.json()["run_id"]
    streamed = await client.get(f"/v1/runs/{run_id}/results", headers={**KEY, **origin})
    assert streamed.headers["access-control-allow-origin"] == CONSOLE
    assert parse_sse(streamed.text)[-1].event == "end"

    refused = await client.get("/v1/runs", headers=origin)  # no key: the console can read why
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == CONSOLE
    assert refused.json()["error"]["code"] == "unauthorized"
    rebound = await client.get("/v1/runs", headers={**KEY, **origin, "host": "evil.example"})
    assert rebound.status_code == 401  # the Host check (DNS rebinding) is unchanged
    foreign = await client.get("/v1/runs", headers={**KEY, "origin": "https://evil.example"})
    assert foreign.status_code == 401
    assert "access-control-allow-origin" not in foreign.headers


async def test_only_v1_answers_cors_and_the_mcp_endpoint_refuses_the_cors_origin(
    host: Host, client: httpx2.AsyncClient
) -> None:
    health = await client.get("/healthz", headers={"origin": CONSOLE})
    assert health.status_code == 200
    assert "access-control-allow-origin" not in health.headers
    made = await create_grant(host.stores, conversation_id="c1", ttl_s=60)
    mcp = await client.post(
        f"/runs/{made.run.run_id}/mcp",
        headers={"authorization": f"Bearer {made.token}", "origin": CONSOLE},
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
    )
    assert mcp.status_code == 403
    assert "access-control-allow-origin" not in mcp.headers


@pytest.mark.parametrize(
    "origin",
    ["*", "https://console.example.com/app", "null", "ftp://x.example", "https://a\x00b", "https://x:99999"],
)
def test_a_cors_origin_that_is_not_an_origin_is_a_config_error(origin: str) -> None:
    with pytest.raises(ConfigError, match="cors_origins"):
        settings_from_mapping({"host": {"cors_origins": [origin]}}, source="t.toml", environ={})
