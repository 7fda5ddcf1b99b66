"""Issue 23, defect 2: every ingress (API, each hook source, schedules, continuations) shared one
`event_id` space."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import httpx2
import pytest

from mcphost.app import Host, open_host
from mcphost.models import RunStatus
from tests.e2e.httpkit import asgi_client
from tests.mcphost.test_hooks import (
    AUTH,
    BEARER,
    admitted,
    api_event,
    hooked_settings,
    sw_headers,
    sw_payload,
)


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    async with open_host(hooked_settings(database_url, tmp_path / "data")) as opened:
        yield opened


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient, None]:
    async with asgi_client(host) as opened:  # no API key: hooks authenticate by signature
        yield opened


async def test_a_delivery_id_equal_to_an_api_event_id_is_another_run_and_reads_nothing_of_it(
    host: Host, client: httpx2.AsyncClient
) -> None:
    """Issue 23, defect 2: ingress sources shared one event id space — a hook delivery id was the event
    id verbatim, so a hook sender read back another source's run or pre-empted an API event."""
    api_first = admitted(await client.post("/v1/events", json=api_event("shared-1"), headers=AUTH))
    body = sw_payload()
    hook_second = admitted(
        await client.post("/v1/hooks/sw", content=body, headers=sw_headers(body, msg_id="shared-1"))
    )
    assert hook_second["created"] is True
    assert hook_second["run_id"] != api_first["run_id"]
    assert hook_second["event_id"] == "hook:sw:shared-1"
    hook_run = await host.orchestrator.wait(hook_second["run_id"])
    assert (hook_run.agent_id, hook_run.conversation_id) == ("hooked", "room-1")

    # the other way round: a delivery's id, predictable to whoever sees the platform, taken by the API first
    hook_first = admitted(
        await client.post(
            "/v1/hooks/tok",
            json={"msg": "deploy"},
            headers={"Authorization": f"Bearer {BEARER}", "Idempotency-Key": "next-7"},
        )
    )
    api_second = admitted(await client.post("/v1/events", json=api_event("next-7"), headers=AUTH))
    assert api_second["created"] is True
    assert api_second["run_id"] != hook_first["run_id"]
    assert api_second["event_id"] == "next-7"
    api_run = await host.orchestrator.wait(api_second["run_id"])
    assert (api_run.agent_id, api_run.conversation_id, api_run.status) == (
        "echo",
        "api-room",
        RunStatus.COMPLETED,
    )

    # two sources with one delivery id: two runs; each source's redelivery is still its own one run
    other_source = admitted(
        await client.post(
            "/v1/hooks/tok",
            json={"msg": "x"},
            headers={"Authorization": f"Bearer {BEARER}", "webhook-id": "shared-1"},
        )
    )
    assert other_source["run_id"] not in (api_first["run_id"], hook_second["run_id"])
    assert other_source["event_id"] == "hook:tok:shared-1"
    for source, content, headers, first in (
        ("sw", body, sw_headers(body, msg_id="shared-1"), hook_second),
        (
            "tok",
            b'{"msg": "x"}',
            {"Authorization": f"Bearer {BEARER}", "webhook-id": "shared-1"},
            other_source,
        ),
    ):
        again = admitted(await client.post(f"/v1/hooks/{source}", content=content, headers=headers))
        assert (again["run_id"], again["created"]) == (first["run_id"], False)
    fire = admitted(  # a schedule's fire id, sent as a delivery id, is the source's own event
        await client.post(
            "/v1/hooks/sw", content=body, headers=sw_headers(body, msg_id="schedule:nightly:1000")
        )
    )
    assert fire["event_id"] == "hook:sw:schedule:nightly:1000"
    retried = admitted(await client.post("/v1/events", json=api_event("shared-1"), headers=AUTH))
    assert (retried["run_id"], retried["created"]) == (api_first["run_id"], False)  # fmt: skip
