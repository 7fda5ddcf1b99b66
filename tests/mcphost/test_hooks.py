"""Signed inbound webhooks (`POST /v1/hooks/{source}`) through the real app over a real host (SQLite file
or PostgreSQL, the echo plugin): requests signed by the `standardwebhooks` library, by a GitHub-style
signer and with a bearer; every refusal is a precise 4xx that stores nothing; replays are idempotent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import sqlalchemy as sa
from alembic import command
from standardwebhooks import Webhook

from mcphost.app import Host, open_host
from mcphost.config import HookConfig, Settings, settings_from_mapping
from mcphost.errors import ConfigError
from mcphost.hooks import field_value
from mcphost.models import AgentConfig, RunStatus
from mcphost.stores import Database, migrate
from mcphost.stores.engine import alembic_config
from tests.e2e.httpkit import api_settings, asgi_client, blob_files, row_counts
from tests.mcphost.hostkit import ECHO_RUNNER

SW_SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
GH_SECRET = "github-shared-secret-1234"
BEARER = "bearer-shared-secret-5678"
API_KEY = "the-api-key-of-this-host"


def hooked_settings(database_url: str, data_dir: Path) -> Settings:
    base = api_settings(database_url, data_dir, api_key=API_KEY)
    hooked = AgentConfig(
        id="hooked",
        runner=ECHO_RUNNER,
        event_types=["webhook.received", "github.push", "github.pull_request"],
    )
    hooks = {
        "sw": HookConfig(
            verify="standard-webhooks",
            secret=SW_SECRET,
            tolerance_s=60,
            agent="hooked",
            conversation_id="$.data.room",
            actor_id="$.data.user.id",
            text="$.data.text",
        ),
        "swf": HookConfig(
            verify="standard-webhooks", secret=SW_SECRET, agent="hooked", events=["chat.message"]
        ),
        "gh": HookConfig(
            verify="github",
            secret=GH_SECRET,
            agent="hooked",
            event_type="github.push",
            conversation_id="$.repository.full_name",
            text="$.commits[0].message",
        ),
        "ghf": HookConfig(  # GitHub's own event types, and only these two events
            verify="github",
            secret=GH_SECRET,
            agent="hooked",
            events=["push", "pull_request"],
            conversation_id="$.repository.full_name",
            actor_id="$.sender.login",
        ),
        "ghr": HookConfig(  # a replay window of ten minutes
            verify="github", secret=GH_SECRET, agent="hooked", replay_window_s=600, conversation_id="r"
        ),
        "ghs": HookConfig(  # a replay window of a second
            verify="github", secret=GH_SECRET, agent="hooked", replay_window_s=1.0, conversation_id="r"
        ),
        "tok": HookConfig(
            verify="bearer", secret=BEARER, agent="hooked", conversation_id="ops", text="$.msg"
        ),
    }
    return base.model_copy(update={"agents": [*base.agents, hooked], "hooks": hooks})


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    async with open_host(hooked_settings(database_url, tmp_path / "data")) as opened:
        yield opened


@pytest.fixture
async def client(host: Host) -> AsyncGenerator[httpx2.AsyncClient, None]:
    async with asgi_client(host) as opened:  # no API key: hooks authenticate by signature
        yield opened


def sw_payload(text: str = "hello from the platform") -> bytes:
    return json.dumps(
        {
            "type": "chat.message",
            "timestamp": "2026-12-03T11:00:00Z",
            "data": {"room": "room-1", "user": {"id": "u-7"}, "text": text},
        }
    ).encode()


def sw_headers(
    body: bytes, *, msg_id: str = "msg_2abc", at: float | None = None, secret: str = SW_SECRET
) -> dict[str, str]:
    """Headers signed by the `standardwebhooks` library itself."""
    stamp = datetime.fromtimestamp(int(time.time() if at is None else at), UTC)
    signature = Webhook(secret).sign(msg_id, stamp, body.decode())
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(stamp.timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
    }


def gh_payload() -> bytes:
    return json.dumps(
        {"repository": {"full_name": "acme/widgets"}, "commits": [{"message": "fix the build"}]}
    ).encode()


def gh_headers(
    body: bytes,
    *,
    delivery: str | None = "72d3162e-cc78-11e3-81ab-4c9367dc0958",
    secret: str = GH_SECRET,
    event: str = "push",
) -> dict[str, str]:
    """What GitHub sends: the HMAC-SHA256 of the raw body, hex, in X-Hub-Signature-256."""
    headers = {
        "X-Hub-Signature-256": "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
        "X-GitHub-Event": event,
        "content-type": "application/json",
    }
    if delivery is not None:
        headers["X-GitHub-Delivery"] = delivery
    return headers


def admitted(response: httpx2.Response) -> dict[str, Any]:
    assert response.status_code == 202, response.text
    return response.json()


async def test_a_standard_webhook_signed_by_the_library_runs_with_its_payload_as_raw_ref(
    host: Host, client: httpx2.AsyncClient
) -> None:
    body = sw_payload()
    answer = admitted(await client.post("/v1/hooks/sw", content=body, headers=sw_headers(body)))
    assert answer["event_id"] == "hook:sw:msg_2abc"
    assert answer["created"] is True
    run = await host.orchestrator.wait(answer["run_id"])
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.conversation_id == "room-1"
    assert run.agent_id == "hooked"
    results = await host.stores.results.list(run.run_id)
    assert [r.payload["data"]["message"]["content"] for r in results if r.type == "message.completed"] == [
        "hello from the platform"
    ]
    event = (await host.stores.events.for_run(run.run_id))[0].payload
    assert event["source"] == "platform"
    assert event["source_event_type"] == "chat.message"
    assert event["actor"]["actor_id"] == "u-7"
    assert event["data"] == {"hook": "sw"}
    raw = await host.stores.artifacts.get(event["raw_ref"])
    assert raw.conversation_id == "room-1"
    assert raw.mime_type == "application/json"
    assert await host.stores.artifacts.read(raw.artifact_id) == body


async def test_a_replayed_delivery_is_the_same_run_and_stores_nothing_again(
    host: Host, client: httpx2.AsyncClient, tmp_path: Path
) -> None:
    body = sw_payload()
    first = admitted(await client.post("/v1/hooks/sw", content=body, headers=sw_headers(body)))
    await host.orchestrator.wait(first["run_id"])
    before, files = await row_counts(host.stores), blob_files(tmp_path / "data")
    again = admitted(await client.post("/v1/hooks/sw", content=body, headers=sw_headers(body)))
    assert again["run_id"] == first["run_id"]
    assert again["created"] is False
    assert await row_counts(host.stores) == before
    assert blob_files(tmp_path / "data") == files


async def test_a_github_signed_push_maps_its_repository_and_event_name(
    host: Host, client: httpx2.AsyncClient
) -> None:
    body = gh_payload()
    answer = admitted(await client.post("/v1/hooks/gh", content=body, headers=gh_headers(body)))
    assert answer["event_id"] == "hook:gh:72d3162e-cc78-11e3-81ab-4c9367dc0958"
    run = await host.orchestrator.wait(answer["run_id"])
    assert run.status is RunStatus.COMPLETED
    assert run.event_type == "github.push"
    assert run.conversation_id == "acme/widgets"
    event = (await host.stores.events.for_run(run.run_id))[0].payload
    assert event["source_event_type"] == "push"
    assert event["input"]["text"] == "fix the build"
    replay = admitted(await client.post("/v1/hooks/gh", content=body, headers=gh_headers(body)))
    assert replay["run_id"] == run.run_id
    assert replay["created"] is False


def ignored_count(host: Host, source: str, reason: str) -> float:
    return host.metrics.value("mcphost_hook_events_ignored_total", source=source, reason=reason) or 0.0


async def test_a_github_ping_is_answered_200_and_starts_nothing(
    host: Host, client: httpx2.AsyncClient, tmp_path: Path
) -> None:
    # What GitHub sends when a webhook is created: no commits, so the push mapping finds nothing.
    body = json.dumps(
        {"zen": "Design for failure.", "hook_id": 7, "repository": {"full_name": "a/b"}}
    ).encode()
    before, files = await row_counts(host.stores), blob_files(tmp_path / "data")
    for source in ("gh", "ghf"):
        answer = await client.post(
            f"/v1/hooks/{source}", content=body, headers=gh_headers(body, event="ping")
        )
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"ignored": True, "reason": "ping", "source_event_type": "ping"}
        assert ignored_count(host, source, "ping") == 1
    assert await row_counts(host.stores) == before
    assert blob_files(tmp_path / "data") == files
    # A ping with a wrong signature is still refused: only a verified sender is answered.
    forged = await client.post(
        "/v1/hooks/gh", content=body, headers=gh_headers(body, event="ping", secret="x" * 20)
    )
    assert forged.status_code == 401


async def test_a_github_event_beyond_push_gets_its_own_event_type_and_action(
    host: Host, client: httpx2.AsyncClient
) -> None:
    body = json.dumps(
        {
            "action": "opened",
            "pull_request": {"title": "Add a widget"},
            "repository": {"full_name": "acme/widgets"},
            "sender": {"login": "octocat"},
        }
    ).encode()
    headers = gh_headers(body, event="pull_request", delivery="d-pr-1")
    answer = admitted(await client.post("/v1/hooks/ghf", content=body, headers=headers))
    run = await host.orchestrator.wait(answer["run_id"])
    assert run.event_type == "github.pull_request"
    assert run.conversation_id == "acme/widgets"
    event = (await host.stores.events.for_run(run.run_id))[0].payload
    assert (event["source_event_type"], event["data"]) == (
        "pull_request",
        {"hook": "ghf", "action": "opened"},
    )
    assert event["actor"]["actor_id"] == "octocat"
    push = json.dumps({"repository": {"full_name": "acme/widgets"}, "sender": {"login": "o"}}).encode()
    pushed = admitted(
        await client.post("/v1/hooks/ghf", content=push, headers=gh_headers(push, delivery="d-p"))
    )
    assert (await host.orchestrator.wait(pushed["run_id"])).event_type == "github.push"


@pytest.mark.parametrize(
    ("source", "event"),
    [("ghf", "issues"), ("swf", "chat.deleted")],
    ids=["github-header", "standard-webhooks-type"],
)
async def test_an_event_outside_the_hooks_events_is_answered_200_and_ignored(
    host: Host, client: httpx2.AsyncClient, tmp_path: Path, source: str, event: str
) -> None:
    if source == "swf":
        body = json.dumps({"type": event, "data": {"room": "room-1"}}).encode()
        headers = sw_headers(body)
    else:
        body = json.dumps({"action": "opened", "issue": {"title": "t"}}).encode()
        headers = gh_headers(body, event=event)
    before, files = await row_counts(host.stores), blob_files(tmp_path / "data")
    answer = await client.post(f"/v1/hooks/{source}", content=body, headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"ignored": True, "reason": "event_not_selected", "source_event_type": event}
    assert ignored_count(host, source, "event_not_selected") == 1
    assert await row_counts(host.stores) == before
    assert blob_files(tmp_path / "data") == files


async def test_a_captured_github_body_under_a_new_delivery_id_is_refused_within_the_replay_window(
    host: Host, client: httpx2.AsyncClient, database_url: str, tmp_path: Path
) -> None:
    body = gh_payload()
    first = admitted(
        await client.post("/v1/hooks/ghr", content=body, headers=gh_headers(body, delivery="d-1"))
    )
    await host.orchestrator.wait(first["run_id"])
    before, files = await row_counts(host.stores), blob_files(tmp_path / "data")
    replayed = await client.post("/v1/hooks/ghr", content=body, headers=gh_headers(body, delivery="d-forged"))
    assert replayed.status_code == 409, replayed.text
    assert replayed.json()["error"]["details"] == {"reason": "replayed_body"}
    assert await row_counts(host.stores) == before
    assert blob_files(tmp_path / "data") == files
    # GitHub's own redelivery keeps the delivery id: it is the same run, as without a window.
    again = admitted(
        await client.post("/v1/hooks/ghr", content=body, headers=gh_headers(body, delivery="d-1"))
    )
    assert (again["run_id"], again["created"]) == (first["run_id"], False)
    # Another source's window is its own; another replica on the same database sees the same window.
    other = admitted(
        await client.post("/v1/hooks/ghs", content=body, headers=gh_headers(body, delivery="d-2"))
    )
    await host.orchestrator.wait(other["run_id"])
    async with (
        open_host(hooked_settings(database_url, tmp_path / "data2")) as replica,
        asgi_client(replica) as peer,
    ):
        refused = await peer.post("/v1/hooks/ghr", content=body, headers=gh_headers(body, delivery="d-3"))
        assert refused.status_code == 409, refused.text
        await anyio.sleep(1.2)  # the one-second window of `ghs` has passed
        later = admitted(
            await peer.post("/v1/hooks/ghs", content=body, headers=gh_headers(body, delivery="d-4"))
        )
        assert later["created"] is True
        await replica.orchestrator.wait(later["run_id"])


async def test_a_bearer_hook_takes_literals_and_its_idempotency_key(
    host: Host, client: httpx2.AsyncClient
) -> None:
    headers = {"Authorization": f"Bearer {BEARER}", "Idempotency-Key": "k-1"}
    answer = admitted(await client.post("/v1/hooks/tok", json={"msg": "deploy done"}, headers=headers))
    assert answer["event_id"] == "hook:tok:k-1"
    run = await host.orchestrator.wait(answer["run_id"])
    assert run.conversation_id == "ops"
    assert run.status is RunStatus.COMPLETED


async def test_hooks_need_no_api_key_while_the_rest_of_v1_still_does(
    host: Host, client: httpx2.AsyncClient
) -> None:
    assert (await client.get("/v1/runs")).status_code == 401
    body = sw_payload()
    admitted(await client.post("/v1/hooks/sw", content=body, headers=sw_headers(body)))


# -- one event-id namespace per ingress ---------------------------------------------------------------


def api_event(event_id: str, *, conversation: str = "api-room") -> dict[str, Any]:
    return {
        "event_id": event_id,
        "event_type": "message.received",
        "conversation": {"conversation_id": conversation, "bot_id": "echo"},
        "input": {"text": "from the API"},
    }


AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.mark.parametrize("event_id", ["hook:sw:shared-1", "schedule:nightly:1000", "continuation:apr_01"])
async def test_an_api_event_id_in_a_host_namespace_is_refused_with_a_400_and_stores_nothing(
    host: Host, client: httpx2.AsyncClient, event_id: str
) -> None:
    body = sw_payload()
    hooked = admitted(
        await client.post("/v1/hooks/sw", content=body, headers=sw_headers(body, msg_id="shared-1"))
    )
    await host.orchestrator.wait(hooked["run_id"])
    before = await row_counts(host.stores)
    response = await client.post("/v1/events", json=api_event(event_id), headers=AUTH)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_argument"
    assert error["details"] == {
        "field": "event_id",
        "reason": "reserved_event_id",
        "prefix": event_id.split(":")[0] + ":",
    }
    assert "reserved" in error["message"]
    assert hooked["run_id"] not in response.text
    assert await row_counts(host.stores) == before


async def test_a_delivery_id_too_long_for_its_namespace_is_one_hashed_event_id(
    host: Host, client: httpx2.AsyncClient
) -> None:
    long_id = "d" * 200
    body = sw_payload()
    first = admitted(
        await client.post("/v1/hooks/sw", content=body, headers=sw_headers(body, msg_id=long_id))
    )
    assert first["event_id"] == "hook:sw:sha256-" + hashlib.sha256(long_id.encode()).hexdigest()
    again = admitted(
        await client.post("/v1/hooks/sw", content=body, headers=sw_headers(body, msg_id=long_id))
    )
    assert (again["run_id"], again["created"]) == (first["run_id"], False)
    assert (await host.orchestrator.wait(first["run_id"])).status is RunStatus.COMPLETED


async def test_a_delivery_stored_before_the_namespaces_is_still_its_run_and_not_the_apis(
    database_url: str, tmp_path: Path
) -> None:
    """Migration 0015 renames a hook's stored event into `hook:<source>:…`; other events keep their ids."""
    settings = hooked_settings(database_url, tmp_path / "data")
    body = sw_payload()
    async with open_host(settings) as host, asgi_client(host, headers=AUTH) as client:
        hooked = admitted(
            await client.post("/v1/hooks/sw", content=body, headers=sw_headers(body, msg_id="old-1"))
        )
        api = admitted(await client.post("/v1/events", json=api_event("api-1")))
        for answer in (hooked, api):
            await host.orchestrator.wait(answer["run_id"])
    events, runs = (
        sa.table("events", sa.column("event_id"), sa.column("payload", sa.JSON)),
        sa.table("runs", sa.column("event_id")),
    )
    transcript = sa.table("transcript", sa.column("event_id"))
    db = Database(database_url)
    try:  # back to what the host stored before 0015: the delivery id as sent
        async with db.write() as session:
            payload = (
                await session.execute(sa.select(events.c.payload).where(events.c.event_id == "hook:sw:old-1"))
            ).scalar_one()
            await session.execute(
                sa.update(events)
                .where(events.c.event_id == "hook:sw:old-1")
                .values(event_id="old-1", payload={**payload, "event_id": "old-1"})
            )
            for table in (runs, transcript):
                await session.execute(
                    sa.update(table).where(table.c.event_id == "hook:sw:old-1").values(event_id="old-1")
                )
        async with db.write() as session:  # back to the revision before the rename (later ones undone)
            connection = await session.connection()

            def _down(sync: sa.Connection) -> None:
                cfg = alembic_config(database_url)
                cfg.attributes["connection"] = sync
                command.downgrade(cfg, "0014")

            await connection.run_sync(_down)
        await migrate(db)
        async with db.read() as session:
            stored = (
                await session.execute(
                    sa.select(events.c.event_id, events.c.payload)
                    .where(events.c.event_id.in_(["hook:sw:old-1", "api-1"]))
                    .order_by(events.c.event_id)
                )
            ).all()
    finally:
        await db.dispose()
    assert [(event_id, payload["event_id"]) for event_id, payload in stored] == [
        ("api-1", "api-1"),
        ("hook:sw:old-1", "hook:sw:old-1"),
    ]
    async with open_host(settings) as host, asgi_client(host, headers=AUTH) as client:
        again = admitted(
            await client.post("/v1/hooks/sw", content=body, headers=sw_headers(body, msg_id="old-1"))
        )
        assert (again["run_id"], again["created"], again["event_id"]) == (
            hooked["run_id"],
            False,
            "hook:sw:old-1",
        )
        assert (await host.stores.runs.get(hooked["run_id"])).event_id == "hook:sw:old-1"
        retried = admitted(await client.post("/v1/events", json=api_event("api-1")))
        assert (retried["run_id"], retried["created"]) == (api["run_id"], False)
        taken = admitted(await client.post("/v1/events", json=api_event("old-1")))
        assert taken["created"] is True
        assert taken["run_id"] != hooked["run_id"]
        await host.orchestrator.wait(taken["run_id"])


def _tampered(body: bytes) -> bytes:
    return body.replace(b"hello", b"HELLO")


_NOW = time.time


@pytest.mark.parametrize(
    ("case", "status", "code", "reason"),
    [
        ("unknown source", 404, "not_found", "unknown_source"),
        ("sw: no signature headers", 401, "unauthorized", "missing_signature"),
        ("sw: wrong secret", 401, "unauthorized", "bad_signature"),
        ("sw: tampered body", 401, "unauthorized", "bad_signature"),
        ("sw: garbage signature", 401, "unauthorized", "bad_signature"),
        ("sw: stale timestamp", 401, "unauthorized", "stale_timestamp"),
        ("sw: future timestamp", 401, "unauthorized", "stale_timestamp"),
        ("sw: timestamp not a number", 401, "unauthorized", "bad_timestamp"),
        ("sw: payload not a JSON object", 400, "invalid_argument", "not_json_object"),
        ("sw: payload with NaN", 400, "invalid_argument", "not_json_object"),
        ("sw: payload with Infinity", 400, "invalid_argument", "not_json_object"),
        ("sw: field path with no value", 400, "invalid_argument", "unmappable"),
        ("sw: mapped id the envelope refuses", 400, "invalid_argument", "unmappable"),
        ("sw: oversized", 413, "payload_too_large", None),
        ("gh: no signature", 401, "unauthorized", "missing_signature"),
        ("gh: wrong secret", 401, "unauthorized", "bad_signature"),
        ("gh: no delivery id", 400, "invalid_argument", "missing_delivery_id"),
        ("tok: wrong bearer", 401, "unauthorized", "bad_signature"),
        ("tok: no bearer", 401, "unauthorized", "bad_signature"),
    ],
)
async def test_every_refused_webhook_is_a_precise_4xx_and_stores_nothing(
    host: Host,
    client: httpx2.AsyncClient,
    tmp_path: Path,
    case: str,
    status: int,
    code: str,
    reason: str | None,
) -> None:
    body = sw_payload()
    wrong = "whsec_" + base64.b64encode(b"another-secret-of-32-bytes-long!").decode()
    requests: dict[str, tuple[str, bytes, dict[str, str]]] = {
        "unknown source": ("nope", body, sw_headers(body)),
        "sw: no signature headers": ("sw", body, {}),
        "sw: wrong secret": ("sw", body, sw_headers(body, secret=wrong)),
        "sw: tampered body": ("sw", _tampered(body), sw_headers(body)),
        "sw: garbage signature": ("sw", body, {**sw_headers(body), "webhook-signature": "v1,!!! v2 nonsense,"}),
        "sw: stale timestamp": ("sw", body, sw_headers(body, at=_NOW() - 600)),
        "sw: future timestamp": ("sw", body, sw_headers(body, at=_NOW() + 600)),
        "sw: timestamp not a number": ("sw", body, {**sw_headers(body), "webhook-timestamp": "soon"}),
        "sw: payload not a JSON object": ("sw", b"[1, 2]", sw_headers(b"[1, 2]")),
        "sw: payload with NaN": ("sw", (nan := b'{"data": {"text": NaN}}'), sw_headers(nan)),
        "sw: payload with Infinity": ("sw", (inf := b'{"data": {"n": -Infinity}}'), sw_headers(inf)),
        "sw: field path with no value": ("sw", b'{"data": {"room": "r"}}', sw_headers(b'{"data": {"room": "r"}}')),
        "sw: mapped id the envelope refuses": (
            "sw", (bad := b'{"data": {"room": "no spaces allowed", "user": {"id": "u"}, "text": "t"}}'), sw_headers(bad)
        ),
        "sw: oversized": ("sw", (big := b'{"pad": "' + b"x" * (1024 * 1024) + b'"}'), sw_headers(big)),
        "gh: no signature": ("gh", gh_payload(), {"X-GitHub-Delivery": "d-1"}),
        "gh: wrong secret": ("gh", gh_payload(), gh_headers(gh_payload(), secret="not-the-secret-at-all")),
        "gh: no delivery id": ("gh", gh_payload(), gh_headers(gh_payload(), delivery=None)),
        "tok: wrong bearer": ("tok", b'{"msg": "x"}', {"Authorization": "Bearer not-the-secret-at-all"}),
        "tok: no bearer": ("tok", b'{"msg": "x"}', {}),
    }  # fmt: skip
    source, content, headers = requests[case]
    before, files = await row_counts(host.stores), blob_files(tmp_path / "data")
    response = await client.post(f"/v1/hooks/{source}", content=content, headers=headers)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    if reason is not None:
        assert error["details"]["reason"] == reason
    assert SW_SECRET not in response.text
    assert GH_SECRET not in response.text
    assert BEARER not in response.text
    assert await row_counts(host.stores) == before
    assert blob_files(tmp_path / "data") == files


def test_field_paths_walk_objects_and_lists() -> None:
    payload = {"a": {"b": [{"c": "x"}, {"c": 2}]}}
    assert field_value(payload, "$.a.b[1].c") == 2
    assert field_value(payload, "$") == payload
    with pytest.raises(KeyError):
        field_value(payload, "$.a.b[2]")
    with pytest.raises(KeyError):
        field_value(payload, "$.a.z")


@pytest.mark.parametrize(
    ("hook", "words"),
    [
        ({"verify": "standard-webhooks", "secret": "not-a-whsec-secret-at-all"}, "whsec_"),
        ({"verify": "github", "secret": "long-enough-secret", "text": "$.a..b"}, "field path"),
        ({"verify": "bearer", "secret": "long-enough-secret", "agent": "ghost"}, "'ghost' is not configured"),
        ({"verify": "hmac", "secret": "long-enough-secret"}, "hooks.x.verify"),
    ],
)
def test_a_bad_hook_table_is_a_config_error_naming_it(hook: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from_mapping({"hooks": {"x": hook}}, source="m.toml", environ={})
    assert words in caught.value.message


def test_a_hook_source_that_cannot_be_a_path_segment_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from_mapping(
            {"hooks": {"Git Hub": {"verify": "bearer", "secret": "long-enough-secret"}}},
            source="m.toml",
            environ={},
        )
    assert "hook source 'Git Hub' must be 1-64 lowercase letters" in caught.value.message
