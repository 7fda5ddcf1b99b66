"""Chat channels end to end: a real host (SQLite file or PostgreSQL, the echo plugin), requests signed
the way Slack, Telegram and Discord sign them, and fakes of their Web APIs on 127.0.0.1
(`tests/fakes/chat_apis.py`) that take the replies."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from mcphost import delivery
from mcphost.app import Host, open_host
from mcphost.config import ChannelConfig
from mcphost.errors import ConfigError
from mcphost.models import AgentConfig, RunStatus
from mcphost.stores import DeliveryRecord
from tests.e2e.httpkit import api_settings, asgi_client, row_counts
from tests.fakes._serve import serve_loopback
from tests.fakes.chat_apis import FakeDiscord, FakeSlack, FakeTelegram, Posted
from tests.mcphost.hostkit import ECHO_RUNNER, MISBEHAVE_RUNNER

SLACK_SECRET = "slack-signing-secret-0123456789abcdef"
TG_SECRET = "telegram-secret_token-0123456789"
TG_TOKEN = "424242:telegram-bot-token"
DISCORD_KEY = Ed25519PrivateKey.generate()
DISCORD_PUBLIC = DISCORD_KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
ENV = {
    "SLACK_SIGNING_SECRET": SLACK_SECRET,
    "SLACK_BOT_TOKEN": "xoxb-slack-bot-token",
    "TG_SECRET": TG_SECRET,
    "TG_TOKEN": TG_TOKEN,
    "DISCORD_PUBLIC_KEY": DISCORD_PUBLIC,
    "DISCORD_BOT_TOKEN": "discord-bot-token",
}
CHAT_EVENTS = ["message.received", "command.invoked", "interaction.submitted"]


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "RETRY_BASE_S", 0.05)
    monkeypatch.setattr(delivery, "POLL_S", 0.05)
    monkeypatch.setattr(delivery, "LEASE_S", 5.0)
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


@dataclass
class Chat:
    host: Host
    client: httpx2.AsyncClient
    slack: FakeSlack
    telegram: FakeTelegram
    discord: FakeDiscord


def channel(platform: str, base: str, **extra: Any) -> ChannelConfig:
    env = {"slack": ("SLACK_SIGNING_SECRET", "SLACK_BOT_TOKEN"), "telegram": ("TG_SECRET", "TG_TOKEN"),
           "discord": ("DISCORD_PUBLIC_KEY", "DISCORD_BOT_TOKEN")}[platform]  # fmt: skip
    return ChannelConfig.model_validate(
        {
            "platform": platform,
            "secret_env": env[0],
            "token_env": env[1],
            "api_base": base,
            "timeout_s": 2,
            "stream_interval_s": 0,
            **extra,
        }
    )


@asynccontextmanager
async def open_chat(
    database_url: str,
    data_dir: Path,
    agents: list[AgentConfig],
    channels_at: Callable[[str, str, str], dict[str, ChannelConfig]],
) -> AsyncGenerator[Chat, None]:
    """A host with `agents` and the channels `channels_at(slack_url, telegram_url, discord_url)` makes,
    served next to a fake of each platform."""
    slack, telegram, discord = (
        FakeSlack("xoxb-slack-bot-token"),
        FakeTelegram(TG_TOKEN),
        FakeDiscord("discord-bot-token"),
    )
    async with (
        serve_loopback(slack.app) as slack_url,
        serve_loopback(telegram.app) as telegram_url,
        serve_loopback(discord.app) as discord_url,
    ):
        base = api_settings(database_url, data_dir)
        channels = channels_at(f"{slack_url}/api", telegram_url, discord_url)
        settings = base.model_copy(update={"agents": agents, "channels": channels})
        async with open_host(settings) as host, asgi_client(host) as client:
            yield Chat(host, client, slack, telegram, discord)


@pytest.fixture
async def chat(database_url: str, tmp_path: Path) -> AsyncGenerator[Chat, None]:
    agents = [
        AgentConfig(id="chat", runner=ECHO_RUNNER, event_types=CHAT_EVENTS,
                    match={"bot_id": ["slack", "slow", "tg", "dc"]}),
        AgentConfig.model_validate({"id": "failing", "runner": MISBEHAVE_RUNNER, "match": {"bot_id": "tgbad"},
                                    "actions": {"allow": ["reaction.add"]}}),
    ]  # fmt: skip

    def channels(slack: str, telegram: str, discord: str) -> dict[str, ChannelConfig]:
        return {
            "slack": channel("slack", slack),
            # Dead within seconds, after several attempts: at 1.5 s a loaded CI machine's first attempt
            # came so late that the delivery expired before a second one.
            "slow": channel("slack", slack, max_age_s=4.0),
            "tg": channel("telegram", telegram),
            "tgbad": channel("telegram", telegram),
            "dc": channel("discord", discord),
        }

    async with open_chat(database_url, tmp_path / "data", agents, channels) as chat:
        yield chat


# -- signing, as each platform signs -----------------------------------------------------------------


def slack_headers(
    body: bytes, *, at: float | None = None, secret: str = SLACK_SECRET, retry: str | None = None
) -> dict[str, str]:
    stamp = str(int(time.time() if at is None else at))
    signature = "v0=" + hmac.new(secret.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
    headers = {
        "x-slack-request-timestamp": stamp,
        "x-slack-signature": signature,
        "content-type": "application/json",
    }
    return (
        headers
        if retry is None
        else headers | {"x-slack-retry-num": retry, "x-slack-retry-reason": "http_timeout"}
    )


def slack_message(text: str, *, ts: str = "1700000000.000100", kind: str = "message", event_id: str = "Ev01",
                  **event: Any) -> bytes:  # fmt: skip
    payload = {
        "type": "event_callback", "team_id": "T1", "event_id": event_id, "event_time": 1700000000,
        "event": {"type": kind, "channel": "C1", "user": "U1", "text": text, "ts": ts, "channel_type": "channel", **event},
    }  # fmt: skip
    return json.dumps(payload).encode()


def telegram_update(update_id: int, text: str, *, sender: int = 7, **message: Any) -> bytes:
    payload = {"update_id": update_id, "message": {
        "message_id": 55, "date": 1700000000, "text": text, "chat": {"id": -1001, "type": "supergroup"},
        "from": {"id": sender, "is_bot": False, "first_name": "Ada", "username": "ada"}, **message}}  # fmt: skip
    return json.dumps(payload).encode()


def tg_headers(secret: str = TG_SECRET) -> dict[str, str]:
    return {"x-telegram-bot-api-secret-token": secret, "content-type": "application/json"}


def discord_headers(
    body: bytes, *, at: float | None = None, key: Ed25519PrivateKey = DISCORD_KEY
) -> dict[str, str]:
    stamp = str(int(time.time() if at is None else at))
    return {"x-signature-ed25519": key.sign(stamp.encode() + body).hex(), "x-signature-timestamp": stamp,
            "content-type": "application/json"}  # fmt: skip


def discord_command(interaction_id: str, value: str) -> bytes:
    payload = {
        "id": interaction_id, "application_id": "app1", "type": 2, "token": f"tok-{interaction_id}",
        "guild_id": "G1", "channel_id": "D1", "channel": {"id": "D1", "type": 0},
        "member": {"user": {"id": "U9", "username": "grace"}},
        "data": {"id": "cmd1", "name": "ask", "type": 1, "options": [{"name": "q", "type": 3, "value": value}]},
    }  # fmt: skip
    return json.dumps(payload).encode()


# -- helpers -------------------------------------------------------------------------------------------


async def admitted(chat: Chat, path: str, body: bytes, headers: dict[str, str]) -> str:
    response = await chat.client.post(path, content=body, headers=headers)
    assert response.status_code == 200, response.text
    run_id = response.headers["x-mcphost-run-id"]
    await chat.host.orchestrator.wait(run_id)
    return run_id


async def posted(messages: list[Posted], count: int, timeout: float = 20) -> list[Posted]:
    with anyio.fail_after(timeout):
        while len(messages) < count:  # noqa: ASYNC110  (the sender's own task)
            await anyio.sleep(0.05)
    await anyio.sleep(0.3)  # a second send would land within the sender's next polls
    return list(messages)


async def rows(chat: Chat, status: str, count: int, timeout: float = 20) -> list[DeliveryRecord]:
    with anyio.fail_after(timeout):
        while True:
            found = [
                r for r in (await chat.host.stores.deliveries.list(limit=100)).items if r.status == status
            ]
            if len(found) >= count:
                return found
            await anyio.sleep(0.05)


# -- Slack ---------------------------------------------------------------------------------------------


async def test_a_signed_slack_message_is_answered_in_its_thread_escaped_and_a_retry_is_the_same_run(
    chat: Chat,
) -> None:
    body = slack_message("hi <!channel> & co", thread_ts="1699999999.000001")
    run_id = await admitted(chat, "/v1/channels/slack", body, slack_headers(body))
    run = await chat.host.stores.runs.get(run_id)
    assert run.status is RunStatus.COMPLETED
    event = await chat.host.stores.events.get(run.event_id)
    assert event.event_id == "channel:slack:msg:C1:1700000000.000100"
    assert (event.event_type, event.payload["source_event_type"]) == ("message.received", "message")
    assert (event.conversation_id, event.thread_id) == ("slack:C1", "1699999999.000001")
    assert event.actor_id == "slack:U1"
    raw_ref = event.payload["raw_ref"]
    assert isinstance(raw_ref, str)
    assert await chat.host.stores.artifacts.read(raw_ref) == body
    (reply,) = await posted(chat.slack.messages, 1)
    assert reply.method == "chat.postMessage"
    assert reply.body == {"channel": "C1", "text": "hi &lt;!channel&gt; &amp; co", "mrkdwn": True,
                          "thread_ts": "1699999999.000001"}  # fmt: skip
    # Slack's retry of the same event, and the app_mention of the same message: the same run, no reply.
    before = await row_counts(chat.host.stores)
    again = await chat.client.post("/v1/channels/slack", content=body, headers=slack_headers(body, retry="1"))
    mention = slack_message(
        "hi <!channel> & co", kind="app_mention", event_id="Ev02", thread_ts="1699999999.000001"
    )
    also = await chat.client.post("/v1/channels/slack", content=mention, headers=slack_headers(mention))
    assert again.status_code == also.status_code == 200
    assert again.headers["x-mcphost-run-id"] == also.headers["x-mcphost-run-id"] == run_id
    assert await row_counts(chat.host.stores) == before
    assert len(await posted(chat.slack.messages, 1)) == 1


async def test_forged_stale_and_unsigned_slack_requests_are_refused_and_store_nothing(chat: Chat) -> None:
    body = slack_message("forged")
    before = await row_counts(chat.host.stores)
    cases = {
        "bad_signature": slack_headers(body, secret="not-the-signing-secret-0000"),
        "stale_timestamp": slack_headers(body, at=time.time() - 301),
        "missing_signature": {"content-type": "application/json"},
    }
    for reason, headers in cases.items():
        response = await chat.client.post("/v1/channels/slack", content=body, headers=headers)
        assert response.status_code == 401, response.text
        assert response.json()["error"]["details"]["reason"] == reason
    tampered = body.replace(b"forged", b"forgeD")
    response = await chat.client.post("/v1/channels/slack", content=tampered, headers=slack_headers(body))
    assert response.status_code == 401
    assert await row_counts(chat.host.stores) == before
    assert chat.slack.messages == []


async def test_slack_url_verification_is_answered_and_bot_messages_are_ignored(chat: Chat) -> None:
    before = await row_counts(chat.host.stores)
    hello = json.dumps(
        {
            "type": "url_verification",
            "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
            "token": "x",
        }
    ).encode()
    answer = await chat.client.post("/v1/channels/slack", content=hello, headers=slack_headers(hello))
    assert answer.status_code == 200
    assert answer.json() == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}
    own = slack_message("echoed", bot_id="B1", subtype="bot_message")
    ignored = await chat.client.post("/v1/channels/slack", content=own, headers=slack_headers(own))
    assert (ignored.status_code, ignored.headers["x-mcphost-ignored"]) == (200, "unsupported_event")
    assert await row_counts(chat.host.stores) == before


# -- Telegram ------------------------------------------------------------------------------------------


async def test_a_telegram_update_is_answered_as_html_in_its_topic_and_a_redelivery_is_the_same_run(
    chat: Chat,
) -> None:
    body = telegram_update(9001, "a < b && `x<y>`", message_thread_id=12, is_topic_message=True)
    run_id = await admitted(chat, "/v1/channels/tg", body, tg_headers())
    event = await chat.host.stores.events.get((await chat.host.stores.runs.get(run_id)).event_id)
    assert event.event_id == "channel:tg:update:9001"
    assert (event.conversation_id, event.thread_id) == ("tg:-1001", "12")
    (reply,) = await posted(chat.telegram.messages, 1)
    assert reply.text == "a < b && x<y>"  # what the user sees, after Telegram's HTML parsing
    assert reply.body == {"chat_id": -1001, "message_thread_id": 12, "parse_mode": "HTML",
                          "text": "a &lt; b &amp;&amp; <code>x&lt;y&gt;</code>",
                          "reply_parameters": {"message_id": 55, "allow_sending_without_reply": True}}  # fmt: skip
    before = await row_counts(chat.host.stores)
    again = await chat.client.post("/v1/channels/tg", content=body, headers=tg_headers())
    assert (again.status_code, again.headers["x-mcphost-run-id"]) == (200, run_id)
    assert await row_counts(chat.host.stores) == before
    assert len(await posted(chat.telegram.messages, 1)) == 1


async def test_a_telegram_request_without_the_secret_token_or_from_the_bot_itself_makes_no_run(
    chat: Chat,
) -> None:
    body = telegram_update(9002, "hello")
    before = await row_counts(chat.host.stores)
    for headers in (tg_headers("wrong-secret-token"), {"content-type": "application/json"}):
        response = await chat.client.post("/v1/channels/tg", content=body, headers=headers)
        assert response.status_code == 401, response.text
    own = telegram_update(9003, "my own reply", sender=424242)
    ignored = await chat.client.post("/v1/channels/tg", content=own, headers=tg_headers())
    assert (ignored.status_code, ignored.headers["x-mcphost-ignored"]) == (200, "unsupported_event")
    deep = b'{"update_id": 1, "message": ' + b"[" * 100 + b"]" * 100 + b"}"
    refused = await chat.client.post("/v1/channels/tg", content=deep, headers=tg_headers())
    assert (refused.status_code, refused.json()["error"]["details"]["reason"]) == (400, "not_json_object")
    assert await row_counts(chat.host.stores) == before


async def test_a_failed_run_tells_the_chat_with_its_notice(chat: Chat) -> None:
    body = telegram_update(9004, "fail")
    run_id = await admitted(chat, "/v1/channels/tgbad", body, tg_headers())
    assert (await chat.host.stores.runs.get(run_id)).status is RunStatus.FAILED
    (notice,) = await posted(chat.telegram.messages, 1)
    assert notice.text == "Sorry — I could not finish this request. Please try again."


async def test_an_authorized_reaction_action_is_executed_on_the_events_message(chat: Chat) -> None:
    body = telegram_update(9007, "react:👍")
    run_id = await admitted(chat, "/v1/channels/tgbad", body, tg_headers())
    assert (await chat.host.stores.runs.get(run_id)).status is RunStatus.COMPLETED
    sent = await posted(chat.telegram.messages, 2)  # the reaction, and the run's own "ok" message
    (reaction,) = [m for m in sent if m.method == "setMessageReaction"]
    assert reaction.body == {
        "chat_id": -1001,
        "message_id": 55,
        "reaction": [{"type": "emoji", "emoji": "👍"}],
    }
    delivered = await rows(chat, "delivered", 2)
    assert sorted((r.type, r.url) for r in delivered) == [
        ("action.requested", "channel:tgbad"),
        ("message.completed", "channel:tgbad"),
    ]


async def test_a_429_is_retried_after_the_platforms_wait_and_delivered_once(chat: Chat) -> None:
    chat.telegram.retry_after = 1.0
    chat.telegram.fail_on["sendMessage"] = [429]  # not the typing indicator's sendChatAction
    body = telegram_update(9005, "patience")
    await admitted(chat, "/v1/channels/tg", body, tg_headers())
    (reply,) = await posted(chat.telegram.messages, 1)
    assert reply.text == "patience"
    sends = [at for method, at in chat.telegram.requests if method == "sendMessage"]
    assert len(sends) == 2
    assert sends[1] - sends[0] >= 0.95  # the platform's retry_after, not the 0.05 s back-off
    (row,) = await rows(chat, "delivered", 1)
    assert (row.url, row.attempts, row.last_error) == ("channel:tg", 2, None)


# -- Discord -------------------------------------------------------------------------------------------


async def test_discord_ping_is_answered_pong_and_forged_or_stale_interactions_are_refused(chat: Chat) -> None:
    before = await row_counts(chat.host.stores)
    ping = json.dumps({"id": "1", "application_id": "app1", "type": 1, "token": "t", "version": 1}).encode()
    pong = await chat.client.post("/v1/channels/dc", content=ping, headers=discord_headers(ping))
    assert (pong.status_code, pong.json()) == (200, {"type": 1})
    body = discord_command("i-forged", "hello")
    for headers in (discord_headers(body, key=Ed25519PrivateKey.generate()), discord_headers(body, at=time.time() - 400),
                    {"content-type": "application/json"}):  # fmt: skip
        response = await chat.client.post("/v1/channels/dc", content=body, headers=headers)
        assert response.status_code == 401, response.text
    assert await row_counts(chat.host.stores) == before


async def test_a_discord_command_is_deferred_then_answered_in_parts_that_keep_code_blocks_whole(
    chat: Chat,
) -> None:
    code = "\n".join(f"line {i:04d} = {'x' * 40}" for i in range(80))
    question = f"look:\n```python\n{code}\n```\nend"
    body = discord_command("i-1", question)
    response = await chat.client.post("/v1/channels/dc", content=body, headers=discord_headers(body))
    assert (response.status_code, response.json()) == (200, {"type": 5})
    await chat.host.orchestrator.wait(response.headers["x-mcphost-run-id"])
    parts = await posted(chat.discord.messages, 3)
    assert [p.method for p in parts] == ["original", "followup", "followup"]
    assert all(p.chat == "tok-i-1" for p in parts)
    for part in parts:
        assert len(part.text) <= 2000
        assert part.text.count("```") % 2 == 0, part.text[-100:]
        assert part.body["allowed_mentions"] == {"parse": []}
    assert parts[1].text.startswith("```python\n")
    rejoined = "\n".join(p.text for p in parts).replace("\n```\n```python\n", "\n")
    assert rejoined == f"q={question}"


# -- the outbox ----------------------------------------------------------------------------------------


async def test_a_platform_failing_forever_ends_dead_while_another_channel_still_delivers(chat: Chat) -> None:
    chat.slack.fail_forever = 503
    stuck = slack_message("never", ts="1700000001.000100", event_id="Ev10")
    await admitted(chat, "/v1/channels/slow", stuck, slack_headers(stuck))
    body = telegram_update(9006, "still here")
    await admitted(chat, "/v1/channels/tg", body, tg_headers())
    (reply,) = await posted(chat.telegram.messages, 1)
    assert reply.text == "still here"
    (dead,) = await rows(chat, "dead", 1)
    assert dead.url == "channel:slow"
    assert dead.attempts >= 2
    assert dead.last_error is not None
    assert "HTTP 503" in dead.last_error or "expired" in dead.last_error
    assert chat.slack.messages == []
    listed = await chat.client.get("/v1/deliveries", params={"status": "dead"})
    assert [d["delivery_id"] for d in listed.json()["items"]] == [dead.delivery_id]


async def test_a_channel_whose_credentials_are_unset_stops_the_host_from_starting(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TG_TOKEN")
    base = api_settings(database_url, tmp_path / "data")
    settings = base.model_copy(update={"channels": {"tg": channel("telegram", "http://127.0.0.1:9")}})
    with pytest.raises(ConfigError, match="TG_TOKEN"):
        async with open_host(settings):
            pass
