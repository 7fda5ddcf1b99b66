"""Issue 10, item 5: an event_time of NaN or Infinity (and other values no store can hold) in POST
/v1/events was a 500 on PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from pathlib import Path

import httpx2
import pytest

from mcphost.app import Host, open_host
from tests.e2e.httpkit import api_settings, asgi_client, event_body, row_counts
from tests.mcphost.test_api_bounds import EVENT_FIELDS, refused


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    async with open_host(api_settings(database_url, tmp_path / "data")) as opened:
        yield opened


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient, None]:
    async with asgi_client(host) as opened:
        yield opened


async def test_an_event_with_an_unstorable_value_is_400_naming_the_field_and_stores_nothing(
    host: Host, client: httpx2.AsyncClient
) -> None:
    """Issue 10, item 5: an event_time of NaN or Infinity (and other values no store can hold) in POST
    /v1/events was a 500 on PostgreSQL."""
    before = await row_counts(host.stores)
    for splice, field in EVENT_FIELDS:
        base = event_body("hello", conversation="bounds")
        base.pop(splice.split('"', 2)[1], None)
        body = json.dumps(base)[:-1] + ", " + splice + "}"
        response = await client.post("/v1/events", content=body, headers={"content-type": "application/json"})
        refused(response, field)
    assert await row_counts(host.stores) == before
