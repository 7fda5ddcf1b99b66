"""Calls marked `ask` (`facts/_approvals.py`) end to end: a real plugin subprocess (`asker_plugin.py`)
calls `state_set` over the real HTTP app's per-run MCP endpoint, and the call waits for a decision
taken through `POST /v1/approvals/{id}` — on a SQLite file and on PostgreSQL."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2

from mcphost.app import Host, open_host
from mcphost.config import PluginConfig, Settings
from mcphost.stores.approvals import ABANDONED_NOTE
from tests._json import obj
from tests.e2e.httpkit import event_body, serve_app
from tests.mcphost.hostkit import REPO, agent, host_settings

ASKER = [sys.executable, str(REPO / "tests" / "e2e" / "asker_plugin.py")]


def ask_settings(database_url: str, data_dir: Path, **host: Any) -> Settings:
    base = host_settings(database_url, data_dir, **host)
    asker = agent("asker", "plugin:test/asker/default", timeout_s=120, approvals={"state_set": "ask"})
    return base.model_copy(
        update={
            "plugins": [*base.plugins, PluginConfig(command=ASKER, name="asker")],
            "agents": [*base.agents, asker],
        }
    )


async def asker_ready(host: Host) -> None:
    """Wait until the asker plugin registered its runner (a loaded machine may restart its start-up)."""
    with anyio.fail_after(120):
        while True:
            if any(r.runner_id == "plugin:test/asker/default" for r in host.registry.runners()):
                return
            await anyio.sleep(0.05)


@asynccontextmanager
async def asking(settings: Settings) -> AsyncGenerator[tuple[Host, httpx2.AsyncClient], None]:
    """A host with the asker plugin ready, served over real HTTP, and a client of it."""
    async with (
        open_host(settings) as host,
        serve_app(host) as served,
        httpx2.AsyncClient(base_url=served.url, timeout=30) as client,
    ):
        await asker_ready(host)
        yield host, client


async def start(client: httpx2.AsyncClient, text: str) -> str:
    admitted = await client.post("/v1/events", json=event_body(text, bot="asker", conversation=text))
    assert admitted.status_code == 202, admitted.text
    return admitted.json()["run_id"]


async def pending_of(client: httpx2.AsyncClient, run_id: str) -> dict[str, Any]:
    """The run's pending approval, once its call asked (the plugin runs on its own)."""
    with anyio.fail_after(60):
        while True:
            listed = await client.get("/v1/approvals", params={"status": "pending", "run_id": run_id})
            assert listed.status_code == 200, listed.text
            if items := listed.json()["items"]:
                (item,) = items
                return item
            await anyio.sleep(0.05)


async def reply_of(host: Host, run_id: str) -> dict[str, Any]:
    await host.orchestrator.wait(run_id)
    (done,) = [r for r in await host.stores.results.list(run_id) if r.type == "message.completed"]
    data = obj(done.payload["data"])
    message = obj(data["message"])
    content = message["content"]
    assert isinstance(content, str)
    return json.loads(content)


async def test_an_approved_write_proceeds_and_a_denied_one_does_nothing(
    database_url: str, tmp_path: Path
) -> None:
    async with asking(ask_settings(database_url, tmp_path / "data")) as (host, client):
        granted = await start(client, "set:granted")
        asked = await pending_of(client, granted)
        assert (asked["kind"], asked["request"]) == (
            "tool",
            {"tool": "state_set", "arguments": {"scope": "conversation", "key": "granted", "value": "v"}},
        )
        decided = await client.post(f"/v1/approvals/{asked['approval_id']}", json={"decision": "approve"})
        assert decided.status_code == 200, decided.text
        reply = await reply_of(host, granted)
        assert (reply["is_error"], reply["stored"], reply["answer"]["key"]) == (False, "v", "granted")
        assert len((await host.stores.approvals.list(run_id=granted)).items) == 1  # state_get is not marked

        refused = await start(client, "set:refused")
        asked = await pending_of(client, refused)
        note = {"decision": "deny", "note": "no writes today"}
        assert (await client.post(f"/v1/approvals/{asked['approval_id']}", json=note)).status_code == 200
        reply = await reply_of(host, refused)
        assert (reply["is_error"], reply["stored"]) == (True, None)
        answer = reply["answer"]
        assert answer["code"] == "approval_denied"
        assert answer["details"] == {
            "approval_id": asked["approval_id"],
            "status": "denied",
            "note": "no writes today",
        }
        assert "is denied (note: no writes today); the call did nothing" in answer["message"]
        audit = await host.stores.audit.list(refused)
        assert [(a.tool, a.outcome, a.code) for a in audit if a.tool == "state_set"] == [
            ("state_set", "refused", "approval_denied")
        ]


async def test_an_approval_left_to_expire_is_a_denial(database_url: str, tmp_path: Path) -> None:
    settings = ask_settings(database_url, tmp_path / "data", approval_expiry_s=0.5)
    async with asking(settings) as (host, client):
        late = await start(client, "set:late")
        reply = await reply_of(host, late)
        assert (reply["is_error"], reply["stored"]) == (True, None)
        assert (reply["answer"]["code"], reply["answer"]["details"]["status"]) == (
            "approval_denied",
            "expired",
        )
        (expired,) = (await host.stores.approvals.list(run_id=late)).items
        assert expired.status == "expired"
        late_approval = await client.post(
            f"/v1/approvals/{expired.approval_id}", json={"decision": "approve"}
        )
        assert late_approval.status_code == 409


async def test_a_run_cancelled_while_its_call_waits_leaves_no_pending_approval(
    database_url: str, tmp_path: Path
) -> None:
    async with asking(ask_settings(database_url, tmp_path / "data")) as (host, client):
        waiting = await start(client, "set:cancelled")
        asked = await pending_of(client, waiting)
        assert (await client.post(f"/v1/runs/{waiting}/cancel")).status_code in (200, 202)
        await host.orchestrator.wait(waiting)
        gone = await client.get(f"/v1/approvals/{asked['approval_id']}")
        assert (gone.json()["status"], gone.json()["note"]) == ("expired", ABANDONED_NOTE)
        late = await client.post(f"/v1/approvals/{asked['approval_id']}", json={"decision": "approve"})
        assert late.status_code == 409, late.text
