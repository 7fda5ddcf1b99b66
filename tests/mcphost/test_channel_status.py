"""`GET /v1/channels` over a real host (SQLite file or PostgreSQL): signed platform requests through the
real app become a channel's newest inbound and counts, a reply the platform refuses becomes its dead
count and last error, and the Python client reads the same answer. The host, the signing and the fake
platform APIs are `test_channels.py`'s."""

from __future__ import annotations

from typing import Any

import anyio
import httpx2

from mcphost.app import build_app
from mcphost.client import AsyncClient
from tests.mcphost.test_channels import (  # the fixtures: pytest finds them by name in this module
    Chat,
    admitted,
    chat,  # noqa: F401  # pyright: ignore[reportUnusedImport]
    fast_retries,  # noqa: F401  # pyright: ignore[reportUnusedImport]
    posted,
    rows,
    slack_headers,
    slack_message,
    telegram_update,
    tg_headers,
)


async def channels(host: Chat) -> dict[str, dict[str, Any]]:
    answer = await host.client.get("/v1/channels")
    assert answer.status_code == 200, answer.text
    return {c["channel_id"]: c for c in answer.json()["channels"]}


async def settled(host: Chat, channel_id: str, **expected: Any) -> dict[str, Any]:
    """The channel's entry once `expected` holds (the sender records outcomes on its own tasks)."""
    with anyio.fail_after(20):
        while True:
            entry = (await channels(host))[channel_id]
            if all(entry[k] == v for k, v in expected.items()):
                return entry
            await anyio.sleep(0.05)


async def test_every_configured_channel_is_listed_with_its_platform_and_agents_and_no_credential(
    chat: Chat,  # noqa: F811  (the fixture)
) -> None:
    listed = await channels(chat)
    assert sorted(listed) == ["dc", "slack", "slow", "tg", "tgbad"]
    assert {k: (v["platform"], v["agents"]) for k, v in listed.items()} == {
        "dc": ("discord", ["chat"]),
        "slack": ("slack", ["chat"]),
        "slow": ("slack", ["chat"]),
        "tg": ("telegram", ["chat"]),
        "tgbad": ("telegram", ["failing"]),
    }
    quiet = listed["dc"]
    assert (quiet["accepted"], quiet["ignored"], quiet["pending"], quiet["dead"]) == (0, 0, 0, 0)
    assert (quiet["last_inbound_at"], quiet["last_delivery"], quiet["last_error"]) == (None, None, None)
    text = (await chat.client.get("/v1/channels")).text
    for secret in (
        "slack-signing-secret",
        "xoxb-slack-bot-token",
        "telegram-secret_token",
        "telegram-bot-token",
    ):
        assert secret not in text
    refused = await chat.client.get("/v1/channels", params={"limit": "5"})
    assert refused.status_code == 400


async def test_a_signed_slack_message_is_the_channels_last_inbound_and_forgeries_and_retries_count_nothing(
    chat: Chat,  # noqa: F811  (the fixture)
) -> None:
    body = slack_message("hello there")
    run_id = await admitted(chat, "/v1/channels/slack", body, slack_headers(body))
    await posted(chat.slack.messages, 1)
    forged = await chat.client.post(
        "/v1/channels/slack", content=body, headers=slack_headers(body, secret="not-the-signing-secret-0000")
    )
    assert forged.status_code == 401
    again = await chat.client.post("/v1/channels/slack", content=body, headers=slack_headers(body, retry="1"))
    assert again.headers["x-mcphost-run-id"] == run_id
    huge = slack_message("x" * (1024 * 1024))
    oversized = await chat.client.post("/v1/channels/slack", content=huge, headers=slack_headers(huge))
    assert oversized.status_code == 413
    unknown = await chat.client.post("/v1/channels/nosuch", content=body, headers=slack_headers(body))
    assert unknown.status_code == 404
    own = slack_message("echoed", ts="1700000009.000100", bot_id="B1", subtype="bot_message")
    ignored = await chat.client.post("/v1/channels/slack", content=own, headers=slack_headers(own))
    assert ignored.headers["x-mcphost-ignored"] == "unsupported_event"
    slack = await settled(chat, "slack", pending=0)
    assert slack["last_delivery"] is not None
    assert slack["last_delivery"]["status"] == "delivered"
    assert (slack["accepted"], slack["ignored"]) == (1, 1)
    assert (slack["last_run_id"], slack["last_event_type"], slack["last_source_event_type"]) == (
        run_id,
        "message.received",
        "message",
    )
    assert slack["last_inbound_at_iso"].endswith("Z")
    assert (slack["last_ignored_reason"], slack["last_ignored_type"]) == ("unsupported_event", None)
    assert (slack["dead"], slack["last_error"]) == (0, None)
    assert slack["last_delivery"]["run_id"] == run_id
    assert slack["last_delivery"]["delivered_at_iso"].endswith("Z")
    assert (await channels(chat))["slow"]["accepted"] == 0  # the other Slack channel saw nothing
    assert "nosuch" not in await channels(chat)


async def test_a_telegram_update_is_the_channels_last_inbound_and_the_clients_read_the_same(
    chat: Chat,  # noqa: F811  (the fixture)
) -> None:
    body = telegram_update(9101, "hi from telegram")
    run_id = await admitted(chat, "/v1/channels/tg", body, tg_headers())
    await posted(chat.telegram.messages, 1)
    wrong = await chat.client.post("/v1/channels/tg", content=body, headers=tg_headers("wrong-secret-token"))
    assert wrong.status_code == 401
    tg = await settled(chat, "tg", pending=0, accepted=1)
    assert (tg["last_run_id"], tg["last_event_type"]) == (run_id, "message.received")
    transport = httpx2.ASGITransport(app=build_app(chat.host))
    async with AsyncClient("http://127.0.0.1:8787", transport=transport) as client:
        listed = await client.channels.list()
    (read,) = [c for c in listed.channels if c.channel_id == "tg"]
    assert (read.accepted, read.last_run_id, read.platform, read.agents) == (1, run_id, "telegram", ["chat"])
    assert read.last_delivery is not None
    assert read.last_delivery.status == "delivered"


async def test_a_reply_the_platform_refuses_is_the_channels_dead_count_and_last_error(
    chat: Chat,  # noqa: F811  (the fixture)
) -> None:
    chat.slack.fail_forever = 503
    stuck = slack_message("never", ts="1700000001.000100", event_id="Ev10")
    run_id = await admitted(chat, "/v1/channels/slow", stuck, slack_headers(stuck))
    (dead,) = await rows(chat, "dead", 1)
    slow = await settled(chat, "slow", dead=1)
    assert slow["pending"] == 0
    assert slow["last_error"] is not None
    assert (
        slow["last_error"]["delivery_id"],
        slow["last_error"]["status"],
        slow["last_error"]["run_id"],
    ) == (
        dead.delivery_id,
        "dead",
        run_id,
    )
    assert slow["last_error"]["last_error"] == dead.last_error
    assert slow["last_delivery"]["delivery_id"] == dead.delivery_id
    assert (await channels(chat))["slack"]["dead"] == 0
