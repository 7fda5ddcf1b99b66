"""Issue 10, item 2: a stored event (a 252-deep tool.call.started) too deep to serve made events_page fail
for the whole conversation."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest

from mcphost.stores import Stores
from mcphost_runners.sdk import EventRecord, HistoryPage
from tests.mcphost.facts._helpers import MODERN, Served, connect, ok, serve_facts
from tests.mcphost.stores.factories import nested_json, overwrite_json


@pytest.fixture
async def served(stores: Stores) -> AsyncGenerator[Served]:
    async with serve_facts(stores) as found:
        yield found


@pytest.mark.parametrize("depth", [300, 5000])
async def test_an_event_or_transcript_row_too_deep_to_serve_leaves_its_page_served(
    served: Served, depth: int
) -> None:
    """Issue 10, item 2: a stored event (a 252-deep tool.call.started) too deep to serve made events_page
    fail for the whole conversation."""
    run = await served.start_run()
    async with connect(served, run, mode=MODERN) as client:
        await overwrite_json(
            served.stores, "events", "payload", nested_json(depth), event_id=run.event.event_id
        )
        deep_element = '[{"type": "text", "text": "x", "extra": ' + nested_json(depth) + "}]"
        await overwrite_json(
            served.stores, "transcript", "contents", deep_element, event_id=run.event.event_id
        )

        [item] = (await ok(client, "events_page", {}))["items"]
        assert item["event_id"] == run.event.event_id
        assert (item["data"], item["data_truncated"]) == (None, False)
        assert item["data_error"]["code"] == "runtime_error"
        assert "more than 64 levels deep" in item["data_error"]["message"]
        single = await ok(client, "events_get", {"event_id": run.event.event_id})
        assert single["data_error"] == item["data_error"]
        assert EventRecord.model_validate(single).data_error == item["data_error"]  # the SDK's typed view

        [entry] = (await ok(client, "history_page", {}))["items"]
        assert (entry["content"], entry["contents"]) == ("hello there", [])
        assert "more than 64 levels deep" in entry["contents_error"]
        assert HistoryPage.model_validate(await ok(client, "history_page", {})).items[0].contents_error
