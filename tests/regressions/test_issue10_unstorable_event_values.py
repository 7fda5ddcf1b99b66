"""Issue 10, item 5: an event_time of NaN or Infinity (and other values no store can hold) in POST
/v1/events was a 500 on PostgreSQL."""

from __future__ import annotations

import json

import httpx2

from mcphost.app import Host
from tests.e2e.httpkit import event_body, row_counts
from tests.mcphost.test_api_bounds import EVENT_FIELDS, refused


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
