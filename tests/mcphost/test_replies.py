"""Streamed chat replies end to end: a real host (SQLite file or PostgreSQL), the misbehave plugin
streaming `message.delta` results, requests signed as each platform signs them, and the fakes of the
Slack, Telegram and Discord Web APIs (`tests/fakes/chat_apis.py`): typing, a placeholder edited at a
bounded rate, the final text split into it and after it, files uploaded, and failures told."""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import pytest

from mcphost.channels import DiscordAdapter, SlackAdapter, TelegramAdapter
from mcphost.config import ChannelConfig
from mcphost.models import AgentConfig, RunStatus
from mcphost.replies import CURSOR, reply_files
from mcphost.stores import DeliveryRecord
from tests.fakes.chat_apis import FakeDiscord, FakeSlack, FakeTelegram, Posted
from tests.mcphost.hostkit import MISBEHAVE_RUNNER
from tests.mcphost.test_channels import (
    CHAT_EVENTS,
    Chat,
    admitted,
    channel,
    discord_command,
    discord_headers,
    open_chat,
    slack_headers,
    slack_message,
    telegram_update,
    tg_headers,
)
from tests.mcphost.test_channels import (
    fast_retries as fast_retries,  # autouse: quick retries, the channels' credentials in the environment
)
from tests.plugins.misbehave import STREAMED_FILE

INTERVAL = 0.3
"""The channels' `stream_interval_s`: at most one placeholder edit per this many seconds."""


@pytest.fixture
async def chat(database_url: str, tmp_path: Path) -> AsyncGenerator[Chat, None]:
    agents = [AgentConfig(id="streamer", runner=MISBEHAVE_RUNNER, event_types=CHAT_EVENTS,
                          match={"bot_id": ["slack", "tg", "dc"]})]  # fmt: skip

    def channels(slack: str, telegram: str, discord: str) -> dict[str, ChannelConfig]:
        return {
            "slack": channel("slack", slack, stream_interval_s=INTERVAL),
            "tg": channel("telegram", telegram, stream_interval_s=INTERVAL),
            "dc": channel("discord", discord, stream_interval_s=INTERVAL),
        }

    async with open_chat(database_url, tmp_path / "data", agents, channels) as chat:
        yield chat


def streamed(count: int, width: int) -> str:
    """The text the misbehave plugin's `stream:<count>:…:<width>` writes."""
    return "".join(f"{i:03d} {'x' * width}\n" for i in range(count))


async def delivered(chat: Chat, count: int, timeout: float = 20) -> list[DeliveryRecord]:
    with anyio.fail_after(timeout):
        while True:
            rows = (await chat.host.stores.deliveries.list(limit=100)).items
            if sum(r.status == "delivered" for r in rows) >= count:
                await anyio.sleep(0.3)  # a stray send would land within the sender's next polls
                return rows
            await anyio.sleep(0.05)


def streaming_edits(messages: list[Posted], method: str) -> list[Posted]:
    return [m for m in messages if m.method == method and m.text.endswith(CURSOR.strip())]


def assert_bounded(edits: list[Posted]) -> None:
    """At most one placeholder request per `INTERVAL`: the next starts only after the last answered."""
    for before, after in itertools.pairwise(edits):
        assert after.at - before.at >= INTERVAL, (before.text[-20:], after.text[-20:])


# -- Slack ---------------------------------------------------------------------------------------------


async def test_slack_streams_into_a_placeholder_then_splits_the_final_text_and_uploads_the_file(
    chat: Chat,
) -> None:
    body = slack_message("stream-file:8:0.15:600", thread_ts="1699999999.000001")
    run_id = await admitted(chat, "/v1/channels/slack", body, slack_headers(body))
    assert (await chat.host.stores.runs.get(run_id)).status is RunStatus.COMPLETED
    rows = await delivered(chat, 1)
    text = streamed(8, 600)  # 4,840 characters: two Slack parts
    sent = chat.slack.messages
    placeholder = sent[0]
    assert placeholder.method == "chat.postMessage"
    assert placeholder.body["thread_ts"] == "1699999999.000001"
    assert placeholder.text.endswith(CURSOR)
    ts = next(iter(chat.slack.shown))
    edits = [m for m in sent if m.method == "chat.update"]
    assert all(m.body["ts"] == ts for m in edits)
    assert 1 <= len(streaming_edits(sent, "chat.update")) < 8  # coalesced: fewer edits than deltas
    assert_bounded([placeholder, *streaming_edits(sent, "chat.update")])
    parts = SlackAdapter.split(chat.host.channels["slack"], text)  # pyright: ignore[reportArgumentType]
    assert len(parts) == 2
    assert chat.slack.shown[ts] == parts[0]  # the final first part replaced the placeholder
    (second,) = [m for m in sent if m.method == "chat.postMessage" and m is not placeholder]
    assert (second.text, second.body["thread_ts"]) == (parts[1], "1699999999.000001")
    assert chat.slack.files == [("C1", "streamed.bin", STREAMED_FILE)]
    (row,) = [r for r in rows if r.type == "message.completed"]
    assert (row.status, row.url, row.body["result_seq"]) == ("delivered", "channel:slack", 10)
    assert chat.slack.typing == []  # Slack has no typing indicator for a bot: the placeholder is it


# -- Telegram ------------------------------------------------------------------------------------------


async def test_telegram_types_streams_waits_out_a_429_on_an_edit_and_sends_the_document(chat: Chat) -> None:
    chat.telegram.retry_after = 0.8
    chat.telegram.fail_on["editMessageText"] = [429]
    body = telegram_update(9101, "stream-file:6:0.2:20")
    run_id = await admitted(chat, "/v1/channels/tg", body, tg_headers())
    assert (await chat.host.stores.runs.get(run_id)).status is RunStatus.COMPLETED
    await delivered(chat, 1)
    sent = chat.telegram.messages
    placeholder = sent[0]
    assert placeholder.method == "sendMessage"
    assert placeholder.body["reply_parameters"]["message_id"] == 55
    # Typing was shown before the first message, in the same chat.
    assert chat.telegram.typing
    assert chat.telegram.typing[0][0] == "-1001"
    assert chat.telegram.typing[0][1] < placeholder.at
    key = next(iter(chat.telegram.shown))  # the placeholder, the first message the fake took
    assert chat.telegram.shown[key] == streamed(6, 20)  # the final text replaced it
    # The 429 on the first edit: the next edit came only after the platform's retry_after.
    tries = [at for method, at in chat.telegram.requests if method == "editMessageText"]
    assert len(tries) >= 2
    assert tries[1] - tries[0] >= 0.8
    assert_bounded([placeholder, *streaming_edits(sent, "editMessageText")])
    ((chat_id, name, data),) = chat.telegram.files
    assert (chat_id, name, data) == ("-1001", "streamed.bin", STREAMED_FILE)
    assert (
        len([m for m in sent if m.method == "sendMessage"]) == 1
    )  # the final text went into the placeholder


async def test_a_telegram_run_that_fails_mid_stream_keeps_its_text_and_tells_the_notice(chat: Chat) -> None:
    body = telegram_update(9102, "stream-fail:4:0.2:10")
    run_id = await admitted(chat, "/v1/channels/tg", body, tg_headers())
    assert (await chat.host.stores.runs.get(run_id)).status is RunStatus.FAILED
    rows = await delivered(chat, 1)
    assert [r.type for r in rows] == ["run.failed"]
    with anyio.fail_after(10):
        while len([m for m in chat.telegram.messages if m.method == "sendMessage"]) < 2:  # noqa: ASYNC110
            await anyio.sleep(0.05)
    _, notice = [m for m in chat.telegram.messages if m.method == "sendMessage"]
    assert notice.text == "Sorry — I could not finish this request. Please try again."
    key = next(iter(chat.telegram.shown))
    with anyio.fail_after(10):
        while chat.telegram.shown[key].endswith(CURSOR.strip()):  # noqa: ASYNC110
            await anyio.sleep(0.05)
    assert chat.telegram.shown[key] == streamed(4, 10)  # the streamed text, its cursor gone


async def test_a_file_over_the_platforms_limit_is_a_notice_not_an_upload(
    chat: Chat, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TelegramAdapter, "max_upload_bytes", 100)
    body = telegram_update(9103, "stream-file:2:0.1:10")
    await admitted(chat, "/v1/channels/tg", body, tg_headers())
    await delivered(chat, 1)
    assert chat.telegram.files == []
    notices = [m.text for m in chat.telegram.messages if m.method == "sendMessage"][1:]
    assert notices == [
        f"(The file 'streamed.bin' is {len(STREAMED_FILE)} bytes, over the 100-byte limit for a telegram "
        "upload, so it is not attached; it is kept as artifact " + notices[0].rsplit("artifact ", 1)[1]
    ]
    assert notices[0].rsplit("artifact ", 1)[1].startswith("art_")


# -- Discord -------------------------------------------------------------------------------------------


async def test_discord_streams_into_its_deferred_answer_then_follows_up_with_the_rest_and_the_file(
    chat: Chat,
) -> None:
    # 6 deltas 0.3 s apart: the placeholder is posted while they arrive. At 0.15 s apart (0.9 s in all) a
    # loaded CI machine once delivered the final text before the stream's first post.
    body = discord_command("i-s1", "stream-file:6:0.3:400")
    response = await chat.client.post("/v1/channels/dc", content=body, headers=discord_headers(body))
    assert (response.status_code, response.json()) == (200, {"type": 5})
    await chat.host.orchestrator.wait(response.headers["x-mcphost-run-id"])
    await delivered(chat, 1)
    text = streamed(6, 400)  # 2,430 characters: two Discord parts
    sent = chat.discord.messages
    assert sent[0].method == "original"
    assert sent[0].text.endswith(CURSOR)
    original = chat.discord.originals["tok-i-s1"]
    edits = [m for m in sent if m.method == "edit"]
    assert edits  # the placeholder was edited through the interaction's webhook
    assert_bounded([sent[0], *streaming_edits(sent, "edit")])
    parts = DiscordAdapter.split(chat.host.channels["dc"], text)  # pyright: ignore[reportArgumentType]
    assert len(parts) == 2
    assert chat.discord.shown[original] == parts[0]
    followups = [m for m in sent if m.method == "followup"]
    assert [m.text for m in followups] == [parts[1], ""]  # the rest, then the file
    assert all(m.body["allowed_mentions"] == {"parse": []} for m in sent)
    assert chat.discord.files == [("tok-i-s1", "streamed.bin", STREAMED_FILE)]
    assert chat.discord.typing
    assert chat.discord.typing[0][0] == "D1"


async def test_a_placeholder_deleted_mid_stream_still_gets_its_final_text_as_a_new_message(
    chat: Chat,
) -> None:
    body = slack_message("stream:10:0.15:20", ts="1700000000.000200", event_id="Ev21")
    response = await chat.client.post("/v1/channels/slack", content=body, headers=slack_headers(body))
    assert response.status_code == 200, response.text
    with anyio.fail_after(10):
        while not chat.slack.shown:  # noqa: ASYNC110  (the stream's own task posts it)
            await anyio.sleep(0.01)
    (ts,) = chat.slack.shown
    del chat.slack.shown[ts]  # a person deleted the placeholder: Slack answers message_not_found
    await chat.host.orchestrator.wait(response.headers["x-mcphost-run-id"])
    rows = await delivered(chat, 1)
    assert [(r.type, r.status) for r in rows] == [("message.completed", "delivered")]
    posts = [m for m in chat.slack.messages if m.method == "chat.postMessage"]
    assert len(posts) == 2
    assert posts[0].text.endswith(CURSOR)
    assert posts[1].text == streamed(10, 20)  # the whole answer, posted anew


PLATFORMS = ["slack", "tg", "dc"]
EDITS = {"slack": "chat.update", "tg": "editMessageText", "dc": "edit"}


def inbound(platform: str, text: str, n: int) -> tuple[str, bytes, dict[str, str]]:
    """A signed request of `platform` carrying `text` (the `n`th of the test: its own ids)."""
    if platform == "slack":
        body = slack_message(text, ts=f"1700000001.{n:06d}", event_id=f"Ev3{n}")
        return "/v1/channels/slack", body, slack_headers(body)
    if platform == "tg":
        body = telegram_update(9200 + n, text)
        return "/v1/channels/tg", body, tg_headers()
    body = discord_command(f"i-3{n}", text)
    return "/v1/channels/dc", body, discord_headers(body)


def fake_of(chat: Chat, platform: str) -> FakeSlack | FakeTelegram | FakeDiscord:
    return {"slack": chat.slack, "tg": chat.telegram, "dc": chat.discord}[platform]


def edit_tries(fake: FakeSlack | FakeTelegram | FakeDiscord, platform: str) -> list[float]:
    """When each edit request reached the fake (answered or refused)."""
    if platform == "dc":
        return [at for path, at in fake.requests if "/messages/" in path and not path.endswith("@original")]
    return [at for method, at in fake.requests if method == EDITS[platform]]


@pytest.mark.parametrize("platform", PLATFORMS)
async def test_a_429_on_an_edit_is_retried_after_the_platforms_wait_and_the_answer_still_lands(
    chat: Chat, platform: str
) -> None:
    fake = fake_of(chat, platform)
    fake.retry_after = 0.8
    fake.fail_on[EDITS[platform]] = [429]
    await admitted(chat, *inbound(platform, "stream:6:0.2:20", 1))
    await delivered(chat, 1)
    tries = edit_tries(fake, platform)
    assert len(tries) >= 2
    assert tries[1] - tries[0] >= 0.8  # the platform's Retry-After, not the 0.3 s interval
    placeholder = next(iter(fake.shown)) if platform != "dc" else chat.discord.originals["tok-i-31"]
    assert fake.shown[placeholder] == streamed(6, 20)


async def test_a_run_that_ends_during_a_429_wait_hands_its_placeholder_over_only_after_it(chat: Chat) -> None:
    """The platform's Retry-After binds whoever edits the placeholder next: the stream's 429 comes
    shortly before the run's last message, and the sender's final edit still waits it out."""
    chat.telegram.retry_after = 0.8
    chat.telegram.fail_on["editMessageText"] = [429]
    await admitted(chat, "/v1/channels/tg", telegram_update(9301, "stream:4:0.1:20"), tg_headers())
    await delivered(chat, 1)
    tries = [at for method, at in chat.telegram.requests if method == "editMessageText"]
    assert len(tries) >= 2
    assert tries[1] - tries[0] >= 0.8
    assert chat.telegram.shown[next(iter(chat.telegram.shown))] == streamed(4, 20)


@pytest.mark.parametrize("platform", PLATFORMS)
async def test_a_run_that_fails_mid_stream_tells_its_notice_on_every_platform(
    chat: Chat, platform: str
) -> None:
    fake = fake_of(chat, platform)
    run_id = await admitted(chat, *inbound(platform, "stream-fail:3:0.2:10", 2))
    assert (await chat.host.stores.runs.get(run_id)).status is RunStatus.FAILED
    rows = await delivered(chat, 1)
    assert [(r.type, r.url) for r in rows] == [("run.failed", f"channel:{platform}")]
    notice = "Sorry — I could not finish this request. Please try again."
    with anyio.fail_after(10):
        while notice not in [m.text for m in fake.messages]:  # noqa: ASYNC110
            await anyio.sleep(0.05)
        while any(text.endswith(CURSOR.strip()) for text in fake.shown.values()):  # noqa: ASYNC110
            await anyio.sleep(0.05)
    assert streamed(3, 10) in fake.shown.values()  # the placeholder keeps what was streamed


def test_a_reply_uploads_each_artifact_its_message_names_once_and_nothing_else() -> None:
    message = {
        "artifacts": [{"artifact_id": "a"}, "junk", {"artifact_id": 5}, {"artifact_id": "a"}, {"name": "x"}],
        "contents": [
            {"type": "text", "text": "t", "artifact_id": "not-a-file"},
            {"type": "file", "artifact_id": "b"},
            {"type": "image", "artifact_id": "a"},
            {"type": "audio", "artifact_id": ""},
        ],
    }
    assert reply_files({"message": message}) == ["a", "b"]
    assert reply_files({"message": "not an object"}) == []
    assert reply_files({}) == []


async def test_a_telegram_stream_longer_than_one_message_keeps_one_placeholder_and_splits_the_end(
    chat: Chat,
) -> None:
    body = telegram_update(9104, "stream:12:0.1:400")  # 4,860 characters: two Telegram messages
    await admitted(chat, "/v1/channels/tg", body, tg_headers())
    await delivered(chat, 1)
    parts = TelegramAdapter.split(chat.host.channels["tg"], streamed(12, 400))  # pyright: ignore[reportArgumentType]
    assert len(parts) == 2
    sends = [m for m in chat.telegram.messages if m.method == "sendMessage"]
    assert len(sends) == 2  # the placeholder, then the second part: the first part was never posted twice
    edits = [m.text for m in chat.telegram.messages if m.method == "editMessageText"]
    assert all(text.endswith(CURSOR.strip()) for text in edits[:-1])  # every preview showed its cursor
    first, second = chat.telegram.shown
    assert (chat.telegram.shown[first], chat.telegram.shown[second]) == (parts[0], parts[1])
