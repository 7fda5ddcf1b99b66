"""Outbound webhooks end to end: real hosts (SQLite file or PostgreSQL, the echo plugin) and a real
receiver on 127.0.0.1 that fails, goes away during a host restart, and verifies every request it takes
with the `standardwebhooks` library. Each delivery must arrive exactly once per `webhook-id`.
"""

from __future__ import annotations

import base64
import socket
from collections import Counter
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from standardwebhooks import Webhook
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mcphost import delivery
from mcphost.app import Host, open_host
from mcphost.config import PluginConfig, Settings, WebhookConfig
from mcphost.serving import bind_socket, serve_http
from mcphost.stores import DeliveryRecord, Stores
from tests.e2e.httpkit import api_settings, asgi_client, event_body
from tests.mcphost.facts.test_approvals import ASKER, asker_ready
from tests.mcphost.hostkit import agent

SECRET = "whsec_" + base64.b64encode(b"receiver-secret-0123456789abcdef").decode()


class Receiver:
    """Answers 500 to the first `fail_first` requests, then 204; keeps every verified delivery."""

    def __init__(self, fail_first: int) -> None:
        self.fail_first = fail_first
        self.requests = 0
        self.received: Counter[str] = Counter()
        self.bodies: dict[str, dict[str, object]] = {}
        self.app = Starlette(routes=[Route("/hook", self.hook, methods=["POST"])])

    async def hook(self, request: Request) -> Response:
        self.requests += 1
        body = await request.body()
        payload = Webhook(SECRET).verify(body, dict(request.headers))  # raises (→ 500) when not signed right
        if self.requests <= self.fail_first:
            return Response(status_code=500)
        self.received[request.headers["webhook-id"]] += 1
        self.bodies[request.headers["webhook-id"]] = payload
        return Response(status_code=204)

    @asynccontextmanager
    async def serving(self, port: int) -> AsyncGenerator[None, None]:
        sock = bind_socket("127.0.0.1", port)
        with sock:
            async with serve_http(self.app, sock):
                yield


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "RETRY_BASE_S", 0.05)
    monkeypatch.setattr(delivery, "POLL_S", 0.05)
    monkeypatch.setattr(delivery, "LEASE_S", 5.0)


def webhook_settings(database_url: str, data_dir: Path, port: int, **webhook: object) -> Settings:
    base = api_settings(database_url, data_dir)
    config = WebhookConfig.model_validate(
        {"url": f"http://127.0.0.1:{port}/hook", "secret": SECRET, "agents": ["echo"], **webhook}
    )
    return base.model_copy(update={"webhooks": [config]})


async def all_rows(stores: Stores) -> list[DeliveryRecord]:
    return (await stores.deliveries.list(limit=100)).items


async def wait_rows(stores: Stores, status: str, count: int, timeout: float = 30) -> list[DeliveryRecord]:
    """Poll until `count` rows have `status` (the sender works on its own task)."""
    with anyio.fail_after(timeout):
        while True:
            rows = [r for r in await all_rows(stores) if r.status == status]
            if len(rows) >= count:
                return rows
            await anyio.sleep(0.05)


async def run_echo(host: Host, text: str) -> str:
    async with asgi_client(host) as client:
        answer = await client.post("/v1/events", json=event_body(text, bot="echo"))
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["run_id"]
    await host.orchestrator.wait(run_id)
    return run_id


async def test_deliveries_outlast_failures_and_a_restart_and_arrive_once_each_signed(
    database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    receiver = Receiver(fail_first=3)
    settings = webhook_settings(
        database_url, tmp_path / "data", port, events=["message.completed", "run.completed"]
    )
    async with receiver.serving(port), open_host(settings) as host:
        first = await run_echo(host, "one")
        await wait_rows(host.stores, "delivered", 2)
    assert receiver.requests == 5  # three refused, then the two deliveries of the first run
    # The receiver is gone: the second run's deliveries fail until the host stops.
    async with open_host(settings) as host:
        second = await run_echo(host, "two")
        with anyio.fail_after(30):
            while not any(r.run_id == second and r.attempts >= 1 for r in await all_rows(host.stores)):  # noqa: ASYNC110  (the sender's own task)
                await anyio.sleep(0.05)
    # A new host on the same database, the receiver back: what was left is delivered.
    async with receiver.serving(port), open_host(settings) as host:
        rows = await wait_rows(host.stores, "delivered", 4)
    assert {(r.run_id, r.type) for r in rows} == {
        (run, kind) for run in (first, second) for kind in ("message.completed", "run.completed")
    }
    assert receiver.received == Counter({r.delivery_id: 1 for r in rows})
    for row in rows:
        body = receiver.bodies[row.delivery_id]
        assert (body["type"], body["run_id"], body["conversation_id"]) == (row.type, row.run_id, "c1")
    said = next(
        receiver.bodies[r.delivery_id] for r in rows if r.run_id == second and r.type == "message.completed"
    )
    assert said["data"] == {"message": {"role": "assistant", "content": "two", "artifacts": []}}


async def test_a_dead_delivery_is_listed_and_a_manual_redelivery_sends_it_once(
    database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    receiver = Receiver(fail_first=10**6)
    settings = webhook_settings(
        database_url, tmp_path / "data", port, events=["run.completed"], max_age_s=0.3
    )
    async with receiver.serving(port), open_host(settings) as host, asgi_client(host) as client:
        run_id = await run_echo(host, "dead")
        (dead,) = await wait_rows(host.stores, "dead", 1)
        assert dead.last_error == "HTTP 500"
        assert dead.attempts >= 1
        listed = (await client.get("/v1/deliveries", params={"status": "dead"})).json()
        assert [(d["delivery_id"], d["run_id"]) for d in listed["items"]] == [(dead.delivery_id, run_id)]
        receiver.fail_first = 0
        again = await client.post(f"/v1/deliveries/{dead.delivery_id}/redeliver")
        assert again.status_code == 202, again.text
        assert again.json()["status"] == "pending"
        await wait_rows(host.stores, "delivered", 1)
        assert (await client.post("/v1/deliveries/msg_nope/redeliver")).status_code == 404
        assert (await client.get("/v1/deliveries", params={"status": "lost"})).status_code == 400
    assert receiver.received == Counter({dead.delivery_id: 1})


@pytest.mark.postgres
async def test_two_hosts_on_postgresql_never_send_one_delivery_twice(
    database_url: str, tmp_path: Path
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("replicas share PostgreSQL")
    port = free_port()
    receiver = Receiver(fail_first=0)
    settings = webhook_settings(database_url, tmp_path / "data", port)
    async with receiver.serving(port), open_host(settings) as one, open_host(settings) as two:
        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(run_echo, (one, two)[i % 2], f"m{i}")
        rows = await wait_rows(one.stores, "delivered", 12)  # message.completed and run.completed each
        await anyio.sleep(0.5)  # a double send would land within the other sender's next poll
    assert len(rows) == 12
    assert receiver.received == Counter({r.delivery_id: 1 for r in rows})
    assert receiver.requests == 12


async def test_an_approved_action_is_delivered_for_execution_once_per_key(
    database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    receiver = Receiver(fail_first=1)
    base = webhook_settings(
        database_url,
        tmp_path / "data",
        port,
        events=["approval.requested", "action.approved"],
        agents=["asker"],
    )
    settings = base.model_copy(
        update={
            "plugins": [*base.plugins, PluginConfig(command=ASKER, name="asker")],
            "agents": [
                *base.agents,
                agent("asker", "plugin:test/asker/default", actions={"allow": ["refund"]}),
            ],
        }
    )
    async with receiver.serving(port), open_host(settings) as host, asgi_client(host) as client:
        await asker_ready(host)
        for conversation in ("first", "second"):  # the same key asked twice, by two runs
            answer = await client.post(
                "/v1/events", json=event_body("act:order-7", bot="asker", conversation=conversation)
            )
            assert answer.status_code == 202, answer.text
            await host.orchestrator.wait(answer.json()["run_id"])
        (asked,) = (await client.get("/v1/approvals")).json()["items"]
        assert (asked["kind"], asked["status"], asked["request"]["idempotency_key"]) == (
            "action",
            "pending",
            "order-7",
        )
        for _ in range(2):
            decided = await client.post(f"/v1/approvals/{asked['approval_id']}", json={"decision": "approve"})
            assert (decided.status_code, decided.json()["status"]) == (200, "approved")
        await wait_rows(host.stores, "delivered", 2)
    assert set(receiver.received.values()) == {1}
    by_type = {str(body["type"]): body for body in receiver.bodies.values()}
    assert sorted(by_type) == ["action.approved", "approval.requested"]
    assert by_type["action.approved"]["data"] == {
        "approval_id": asked["approval_id"],
        "note": None,
        "action": "refund",
        "target": {"order": "order-7"},
        "payload": {"amount": 5},
        "idempotency_key": "order-7",
    }
