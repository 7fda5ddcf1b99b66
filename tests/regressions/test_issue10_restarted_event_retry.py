"""Issue 10, item 7: after a host crash, retrying an event with the same event_id returned its run failed
host.restarted, so the event never ran."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import httpx2
import pytest

from mcphost.api import ApiLimits
from mcphost.app import Host
from mcphost.models import RunFailure, RunStatus
from tests.e2e.httpkit import asgi_client, event_body
from tests.mcphost.stores.factories import new_run


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient, None]:
    async with asgi_client(host, limits=ApiLimits(max_upload_bytes=64 * 1024)) as opened:
        yield opened


async def test_an_event_whose_run_failed_host_restarted_runs_again_and_both_runs_show_the_chain(
    host: Host, client: httpx2.AsyncClient
) -> None:
    """Issue 10, item 7: after a host crash, retrying an event with the same event_id returned its run
    failed host.restarted, so the event never ran."""
    first, grant = new_run("c1", event_id="evt-retried")
    await host.stores.runs.admit(first, grant=grant, concurrency="enqueue")
    await host.stores.runs.transition(
        first.run_id, RunStatus.FAILED, error=RunFailure(code="host.restarted", message="host stopped")
    )
    response = await client.post("/v1/events", json=event_body("hi", event_id="evt-retried"))
    assert response.status_code == 202
    answer = response.json()
    assert answer["created"] is True
    assert answer["run_id"] != first.run_id
    await host.orchestrator.wait(answer["run_id"])
    for run_id in (first.run_id, answer["run_id"]):
        view = (await client.get(f"/v1/runs/{run_id}")).json()
        assert [(a["run_id"], a["attempt"], a["status"]) for a in view["attempts"]] == [
            (first.run_id, 1, "failed"),
            (answer["run_id"], 2, "completed"),
        ]
        assert view["attempts"][0]["error"]["code"] == "host.restarted"
    second = (await client.get(f"/v1/runs/{answer['run_id']}")).json()["run"]
    assert (second["attempt"], second["previous_run_id"]) == (2, first.run_id)
    replay = (await client.post("/v1/events", json=event_body("hi", event_id="evt-retried"))).json()
    assert (replay["run_id"], replay["created"]) == (answer["run_id"], False)
