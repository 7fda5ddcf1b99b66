"""Outbound webhooks end to end: real hosts (SQLite file or PostgreSQL, the echo plugin) and a real
receiver on 127.0.0.1 that fails, goes away during a host restart, and verifies every request it takes
with the `standardwebhooks` library. Each delivery must arrive exactly once per `webhook-id`.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import time
from collections import Counter, defaultdict
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream
from standardwebhooks import Webhook
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mcphost import delivery
from mcphost.app import Host, open_host
from mcphost.config import PluginConfig, Settings, WebhookConfig
from mcphost.delivery import DELIVERY_OUTCOMES, DeliverySender
from mcphost.models import RunStatus
from mcphost.serving import bind_socket, serve_http
from mcphost.stores import DeliveryRecord, Stores, open_stores
from mcphost.stores.deliveries import EXPIRED_ERROR
from tests.e2e.httpkit import api_settings, asgi_client, event_body
from tests.mcphost.facts.test_approvals import ASKER, asker_ready
from tests.mcphost.hostkit import agent
from tests.mcphost.stores.factories import admitted

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
        {
            "url": f"http://127.0.0.1:{port}/hook",
            "secret": SECRET,
            "agents": ["echo"],
            "timeout_s": 2,
            **webhook,
        }
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
        database_url, tmp_path / "data", port, events=["run.completed"], max_age_s=1.0
    )
    async with receiver.serving(port), open_host(settings) as host, asgi_client(host) as client:
        run_id = await run_echo(host, "dead")
        (dead,) = await wait_rows(host.stores, "dead", 1)
        # Dead after its last send failed, or found past expires_at before the next one could start.
        expired = dead.last_error == EXPIRED_ERROR
        assert dead.last_error in ("HTTP 500", EXPIRED_ERROR)
        assert dead.attempts >= 1
        listed = (await client.get("/v1/deliveries", params={"status": "dead"})).json()
        assert [(d["delivery_id"], d["run_id"]) for d in listed["items"]] == [(dead.delivery_id, run_id)]
        counted = {o: host.metrics.value("mcphost_deliveries_total", outcome=o) for o in DELIVERY_OUTCOMES}
        assert counted == {
            "delivered": 0,
            "failed": dead.attempts - (0 if expired else 1),
            "dead": 0 if expired else 1,
            "expired": 1 if expired else 0,
            "unconfigured": 0,
            "superseded": 0,
        }
        exposition = (await client.get("/metrics")).text
        assert f'mcphost_delivery_dead_letters_total{{reason="failed"}} {0 if expired else 1}.0' in exposition
        assert (
            f'mcphost_delivery_dead_letters_total{{reason="expired"}} {1 if expired else 0}.0' in exposition
        )
        assert 'mcphost_delivery_dead_letters_total{reason="unconfigured"} 0.0' in exposition
        receiver.fail_first = 0
        # The sender now polls only every minute: the redelivery is sent because the API wakes it, within
        # the receiver's max_age_s (it expired again under load when it waited for the next poll).
        host.sender._poll_s = 60.0  # pyright: ignore[reportPrivateUsage] -- slow the running sender's poll
        await anyio.sleep(0.6)  # the wait already under way (the old poll) ends first
        again = await client.post(f"/v1/deliveries/{dead.delivery_id}/redeliver")
        assert again.status_code == 202, again.text
        assert again.json()["status"] == "pending"
        await wait_rows(host.stores, "delivered", 1)
        assert host.metrics.value("mcphost_deliveries_total", outcome="delivered") == 1
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


# -- the sender against receivers on raw sockets ------------------------------------------------------


class RawReceiver:
    """A receiver on 127.0.0.1 written on raw sockets, so the test decides every byte and when:
    `answer` answers 204 after `delay_s`; `hang` reads the request and never answers; `trickle` answers
    200 with `chunks` body bytes, one every `every_s` (each read well within a read timeout).
    Keeps, per `webhook-id`, when each request arrived and when its connection ended."""

    def __init__(
        self,
        mode: Literal["answer", "hang", "trickle"],
        *,
        delay_s: float = 0.0,
        every_s: float = 0.1,
        chunks: int = 0,
    ) -> None:
        self.mode = mode
        self.delay_s, self.every_s, self.chunks = delay_s, every_s, chunks
        self.arrivals: defaultdict[str, list[float]] = defaultdict(list)
        self.spans: list[tuple[float, float]] = []
        self.url = ""

    async def _exchange(self, stream: SocketStream) -> None:
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                buffer += await stream.receive()
            head, buffer = buffer.split(b"\r\n\r\n", 1)
            fields = {
                name.lower(): value
                for name, value in (
                    line.decode().split(": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line
                )
            }
            length = int(fields.get("content-length", "0"))
            while len(buffer) < length:
                buffer += await stream.receive()
            buffer = buffer[length:]
            start = time.time()
            self.arrivals[fields["webhook-id"]].append(start)
            if self.mode == "answer":
                await anyio.sleep(self.delay_s)
                await stream.send(b"HTTP/1.1 204 No Content\r\n\r\n")
                self.spans.append((start, time.time()))
                continue
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._until_closed, stream, tg.cancel_scope)
                if self.mode == "hang":
                    await anyio.sleep_forever()
                await stream.send(
                    f"HTTP/1.1 200 OK\r\nContent-Length: {self.chunks}\r\nConnection: close\r\n\r\n".encode()
                )
                for _ in range(self.chunks):
                    await anyio.sleep(self.every_s)
                    await stream.send(b"x")
                tg.cancel_scope.cancel()
            self.spans.append((start, time.time()))
            return

    @staticmethod
    async def _until_closed(stream: SocketStream, scope: anyio.CancelScope) -> None:
        """Wait for the client to close the connection (it sends nothing else), then stop answering."""
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
            await stream.receive()
        scope.cancel()

    async def _serve(self, stream: SocketStream) -> None:
        async with stream:
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await self._exchange(stream)

    @asynccontextmanager
    async def serving(self) -> AsyncGenerator[None, None]:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.url = f"http://127.0.0.1:{listener.extra(SocketAttribute.local_port)}/hook"
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, self._serve)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()


async def announce(stores: Stores, agent_id: str) -> None:
    """A run of `agent_id` that completes: one `run.completed` row per webhook subscribed to it."""
    run = await admitted(stores, conversation_id=None, agent_id=agent_id)
    await stores.runs.transition(run.run_id, RunStatus.RUNNING)
    await stores.runs.finish(run.run_id, RunStatus.COMPLETED)


async def delivered_latencies(stores: Stores, url: str, agent_id: str, count: int) -> list[float]:
    """Announce `count` runs of `agent_id` 0.15 s apart; each of `url`'s rows' time from written to
    recorded delivered, once all are."""
    for _ in range(count):
        await announce(stores, agent_id)
        await anyio.sleep(0.15)
    with anyio.fail_after(60):
        while True:
            rows = [r for r in await all_rows(stores) if r.url == url and r.agent_id == agent_id]
            if len(rows) == count and all(r.delivered_at is not None for r in rows):
                return [(r.delivered_at or 0.0) - r.created_at for r in rows]
            await anyio.sleep(0.05)


async def test_a_receiver_trickling_its_answer_is_cut_at_the_send_deadline(
    database_url: str, tmp_path: Path
) -> None:
    trickle = RawReceiver("trickle", chunks=20, every_s=0.1)  # 2 s in all, a byte every 0.1 s
    async with trickle.serving():
        webhooks = [WebhookConfig(url=trickle.url, secret=SECRET, timeout_s=0.5)]
        async with open_stores(database_url, tmp_path / "data", webhooks=webhooks) as stores:
            sender = DeliverySender(
                stores.deliveries, webhooks, "host-a", poll_s=0.05, lease_s=5, retry_base_s=60
            )
            async with sender.running():
                await announce(stores, "default")
                with anyio.fail_after(10):
                    while not (rows := [r for r in await all_rows(stores) if r.attempts]):  # noqa: ASYNC110  (the sender's own task)
                        await anyio.sleep(0.05)
    (row,) = rows
    ((start, end),) = trickle.spans
    # Cut well before the 2 s trickle ended (the 0.5 s read timeout never fires: a byte comes every
    # 0.1 s), and by the send's deadline, as its error says. The receiver's span starts after the
    # connection and the request, so its length is not the deadline's.
    assert end - start < 1.5
    assert (row.status, row.attempts) == ("pending", 1)
    assert (row.last_error or "").startswith("no complete answer within 0.5 s")
