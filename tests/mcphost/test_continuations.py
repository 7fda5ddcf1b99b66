"""Continuations without a harness CLI (both stores): a plugin runner (`tests/plugins/parking.py`) asks
the person a question and parks; the answer, decided through the API, starts exactly one continuation
run of the same agent and conversation, which completes with the answer in its input."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from mcphost.app import open_host
from mcphost.config import PluginConfig, Settings
from mcphost.ingress import continuation_event_id
from mcphost.models import RunStatus
from tests.e2e.httpkit import asgi_client, event_body
from tests.mcphost.hostkit import REPO, agent, host_settings
from tests.plugins.parking import QUESTION, REPLY_PREFIX

PARKING = [sys.executable, str(REPO / "tests" / "plugins" / "parking.py")]


def parking_settings(database_url: str, data_dir: Path) -> Settings:
    """hostkit's host with the parking plugin, bound to bot `ask`."""
    base = host_settings(database_url, data_dir)
    return base.model_copy(
        update={
            "plugins": [*base.plugins, PluginConfig(command=PARKING, name="parking")],
            "agents": [*base.agents, agent("ask", "plugin:test/parking/default", timeout_s=60)],
        }
    )


async def test_a_runner_that_parks_is_continued_by_the_answer_and_the_continuation_completes(
    database_url: str, tmp_path: Path
) -> None:
    async with (
        open_host(parking_settings(database_url, tmp_path / "data")) as host,
        asgi_client(host) as client,
    ):
        admitted = await client.post("/v1/events", json=event_body("pick one", bot="ask", conversation="k"))
        assert admitted.status_code == 202, admitted.text
        with anyio.fail_after(60):
            parked = await host.orchestrator.wait(admitted.json()["run_id"])
        assert parked.status is RunStatus.PARKED, parked.error
        (approval,) = (await host.stores.approvals.list(run_id=parked.run_id)).items
        assert (approval.kind, approval.parked, approval.status) == ("interaction", True, "pending")
        assert approval.request["questions"] == [QUESTION]

        url = f"/v1/approvals/{approval.approval_id}"
        answered = await client.post(url, json={"decision": "answer", "answer": "blue"})
        assert answered.status_code == 200, answered.text
        continuation_id = answered.json()["continuation_run_id"]
        with anyio.fail_after(60):
            continuation = await host.orchestrator.wait(continuation_id)
        assert continuation.status is RunStatus.COMPLETED, continuation.error
        assert (continuation.agent_id, continuation.conversation_id) == ("ask", "k")
        assert continuation.event_id == continuation_event_id(approval.approval_id)
        messages = [
            r.payload["data"]["message"]["content"]
            for r in await host.stores.results.list(continuation_id)
            if r.type == "message.completed"
        ]
        assert messages == [
            f"{REPLY_PREFIX}The person answered your question (approval {approval.approval_id}): blue"
        ]
        # A second decision changes nothing: the same continuation, no second run.
        again = await client.post(url, json={"decision": "answer", "answer": "blue"})
        assert again.json()["continuation_run_id"] == continuation_id
        runs = (await client.get("/v1/runs", params={"conversation_id": "k"})).json()["items"]
        assert sorted(r["run_id"] for r in runs) == sorted([parked.run_id, continuation_id])
