"""Platform actions (`action.requested`) are authorized like every other reach of a run (PROTOCOL §6):
the runner's manifest must list the action in `permissions.platform_api`, the agent must allow it
(`[agents.actions] allow`), and its target must lie in the event's scope. Real hosts on both stores,
the real asker plugin, and a real webhook receiver on 127.0.0.1 for the approved action.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from mcphost.app import Host, open_host
from mcphost.config import PluginConfig, Settings
from mcphost.models import Run
from tests.e2e.httpkit import asgi_client, event_body
from tests.mcphost.facts.test_approvals import ASKER, asker_ready
from tests.mcphost.hostkit import agent
from tests.mcphost.test_delivery import Receiver, all_rows, free_port, webhook_settings

ASKER_RUNNER = "plugin:test/asker/default"


def action_settings(database_url: str, data_dir: Path, port: int, allow: list[str]) -> Settings:
    """The asker agent (manifest: `refund`, `message.edit`) allowed `allow`; every fact is announced."""
    base = webhook_settings(database_url, data_dir, port, agents=["asker"])
    asker = agent("asker", ASKER_RUNNER, timeout_s=120, actions={"allow": allow})
    return base.model_copy(
        update={
            "plugins": [*base.plugins, PluginConfig(command=ASKER, name="asker")],
            "agents": [*base.agents, asker],
        }
    )


async def ask(host: Host, client: httpx2.AsyncClient, data: dict[str, Any], conversation: str = "c1") -> Run:
    text = "act-json:" + json.dumps(data)
    answer = await client.post("/v1/events", json=event_body(text, bot="asker", conversation=conversation))
    assert answer.status_code == 202, answer.text
    return await host.orchestrator.wait(answer.json()["run_id"])


async def assert_refused(host: Host, client: httpx2.AsyncClient, run: Run, action: str, layer: str) -> None:
    """Failed `unauthorized` naming the layer; no approval, no announced action, no action event; audited."""
    assert run.status == "failed"
    assert run.error is not None
    assert run.error.code == "unauthorized", run.error
    assert run.error.message.startswith("action.requested: This run may not ask for the action")
    assert f"({layer} layer)" in run.error.message, run.error.message
    assert (await client.get("/v1/approvals")).json()["items"] == []
    announced = {row.type for row in await all_rows(host.stores) if row.run_id == run.run_id}
    assert announced == {"run.failed"}
    logged = [e.event_type for e in await host.stores.events.for_run(run.run_id)]
    assert "action.requested" not in logged
    (result,) = await host.stores.results.list(run.run_id)  # the action was never stored
    assert (result.type, result.payload["data"]["code"]) == ("run.failed", "unauthorized")
    (row,) = await host.stores.audit.list(run.run_id)
    assert (row.tool, row.outcome, row.code) == (f"action {action}", "refused", "unauthorized")


async def test_an_action_the_runners_manifest_does_not_list_is_refused(
    database_url: str, tmp_path: Path
) -> None:
    settings = action_settings(database_url, tmp_path / "data", free_port(), allow=["deploy", "refund"])
    async with open_host(settings) as host, asgi_client(host) as client:
        await asker_ready(host)
        run = await ask(host, client, {"action": "deploy", "target": None, "idempotency_key": "d1"})
        await assert_refused(host, client, run, "deploy", "manifest")
        assert "permissions.platform_api" in (run.error.message if run.error else "")


async def test_an_action_the_agent_does_not_allow_is_refused(database_url: str, tmp_path: Path) -> None:
    settings = action_settings(database_url, tmp_path / "data", free_port(), allow=["refund"])
    async with open_host(settings) as host, asgi_client(host) as client:
        await asker_ready(host)
        run = await ask(host, client, {"action": "message.edit", "target": None, "idempotency_key": "e1"})
        await assert_refused(host, client, run, "message.edit", "agent")
        assert "actions.allow" in (run.error.message if run.error else "")


@pytest.mark.parametrize(
    "target",
    [
        {"conversation_id": "elsewhere"},
        {"conversation_id": "c1", "bot_id": "another-bot"},
        {"actor_id": "u2"},
        {"workspace_id": "w1"},  # the event carries no workspace
        {"message_id": "OTHER"},  # a message of another conversation
        {"message_id": "msg_never_sent"},
        {"message_id": 7},
        "c1",  # not an object: the host cannot check its scope
    ],
    ids=["conversation", "bot", "actor", "workspace", "other-message", "unknown-message", "number", "string"],
)
async def test_an_action_targeting_outside_the_event_scope_is_refused(
    database_url: str, tmp_path: Path, target: object
) -> None:
    settings = action_settings(database_url, tmp_path / "data", free_port(), allow=["message.edit"])
    async with open_host(settings) as host, asgi_client(host) as client:
        await asker_ready(host)
        other = await ask(host, client, {"action": "message.edit", "target": None}, conversation="c2")
        assert other.status == "completed", other.error
        if target == {"message_id": "OTHER"}:
            target = {"message_id": other.event_id}  # in the transcript, of conversation c2
        data = {"action": "message.edit", "target": target, "idempotency_key": "e1"}
        run = await ask(host, client, data)
        await assert_refused(host, client, run, "message.edit", "event")


async def test_an_allowed_action_in_scope_is_approved_and_delivered_once(
    database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    receiver = Receiver(fail_first=0)
    settings = action_settings(database_url, tmp_path / "data", port, allow=["message.edit"])
    async with receiver.serving(port), open_host(settings) as host, asgi_client(host) as client:
        await asker_ready(host)
        first = await ask(host, client, {"action": "message.edit", "target": None})
        target = {"conversation_id": "c1", "bot_id": "asker", "message_id": first.event_id}
        data = {
            "action": "message.edit",
            "target": target,
            "payload": {"text": "fixed"},
            "idempotency_key": "k",
        }
        run = await ask(host, client, data)
        assert run.status == "completed", run.error
        (asked,) = (await client.get("/v1/approvals")).json()["items"]
        assert (asked["kind"], asked["run_id"], asked["request"]["target"]) == ("action", run.run_id, target)
        decided = await client.post(f"/v1/approvals/{asked['approval_id']}", json={"decision": "approve"})
        assert decided.json()["status"] == "approved"
        expected = {
            "action.approved",
            "action.requested",
            "approval.requested",
            "message.completed",
            "run.completed",
        }
        with anyio.fail_after(30):  # nothing orders deliveries: wait for every one of the run's five
            rows = [r for r in await all_rows(host.stores) if r.status == "delivered"]
            while not expected <= {r.type for r in rows if r.run_id == run.run_id}:
                await anyio.sleep(0.05)
                rows = [r for r in await all_rows(host.stores) if r.status == "delivered"]
        assert await host.stores.audit.list(run.run_id) == []
    kinds = sorted(row.type for row in rows if row.run_id == run.run_id)
    assert kinds == [
        "action.approved",
        "action.requested",
        "approval.requested",
        "message.completed",
        "run.completed",
    ]
    approved = next(body for body in receiver.bodies.values() if body["type"] == "action.approved")
    assert approved["data"] == {
        "approval_id": asked["approval_id"],
        "note": None,
        "action": "message.edit",
        "target": target,
        "payload": {"text": "fixed"},
        "idempotency_key": "k",
    }
    assert set(receiver.received.values()) == {1}
