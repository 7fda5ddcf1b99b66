"""The Discord Gateway end to end: a real host (SQLite file or PostgreSQL, the echo plugin) holding a
Gateway connection to a fake Gateway on 127.0.0.1 (`tests/fakes/discord_gateway.py`): messages become
runs through the same ingest path as HTTP, a replay after RESUME never makes a second run, a missed
heartbeat ACK and a huge frame reconnect and resume, garbage frames are logged and skipped."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import TaskStatus

from mcphost.app import Host, open_host
from mcphost.channels import discord_gateway
from mcphost.channels.discord_gateway import INTENTS
from mcphost.models import AgentConfig, RunStatus
from tests.e2e.httpkit import api_settings
from tests.fakes._serve import serve_loopback
from tests.fakes.discord_gateway import BOT_ID, FakeGateway, message
from tests.mcphost.hostkit import ECHO_RUNNER
from tests.mcphost.test_channels import ENV, channel

TOKEN = ENV["DISCORD_BOT_TOKEN"]
EVENTS = ["message.received", "message.edited", "message.recalled", "reaction.added", "group.member_joined"]


@pytest.fixture(autouse=True)
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(discord_gateway, "BACKOFF_MIN_S", 0.05)
    monkeypatch.setattr(discord_gateway, "INVALID_SESSION_WAIT_S", (0.01, 0.02))


@dataclass
class Link:
    host: Host
    fake: FakeGateway


async def until(check: Callable[[], bool], timeout: float = 20) -> None:
    with anyio.fail_after(timeout):
        while not check():  # noqa: ASYNC110  # the fake and the host run in other tasks
            await anyio.sleep(0.02)


async def run_of(host: Host, event_id: str) -> str:
    with anyio.fail_after(20):
        while (run := await host.stores.runs.get_by_event(event_id)) is None:  # noqa: ASYNC110  # another task admits it
            await anyio.sleep(0.02)
    await host.orchestrator.wait(run.run_id)
    return run.run_id


async def open_link(database_url: str, tmp_path: Path, fake: FakeGateway) -> AsyncGenerator[Link, None]:
    async with fake.serve() as server, serve_loopback(fake.app) as base:
        fake.bound(server)
        agents = [AgentConfig(id="chat", runner=ECHO_RUNNER, match={"bot_id": "dc"}, event_types=EVENTS)]
        settings = api_settings(database_url, tmp_path / "data").model_copy(
            update={"agents": agents, "channels": {"dc": channel("discord", base, gateway=True)}}
        )
        async with open_host(settings) as host:
            await until(lambda: len(fake.identifies) == 1)
            await until(lambda: fake.seq >= 1)  # READY sent
            yield Link(host, fake)


@pytest.fixture
async def link(database_url: str, tmp_path: Path) -> AsyncGenerator[Link, None]:
    async for opened in open_link(database_url, tmp_path, FakeGateway(TOKEN)):
        yield opened


async def test_a_gateway_message_becomes_a_run_and_a_replay_after_resume_is_the_same_run(link: Link) -> None:
    host, fake = link.host, link.fake
    (identify,) = fake.identifies
    assert (identify["token"], identify["intents"]) == (TOKEN, INTENTS)
    await fake.dispatch("MESSAGE_CREATE", message("M0", "from the bot itself", author=BOT_ID))
    await fake.dispatch("MESSAGE_CREATE", message("M00", "another bot", author="222", bot=True))
    await fake.dispatch("MESSAGE_CREATE", message("M1", "hello gateway"))
    run_id = await run_of(host, "channel:dc:msg:M1")
    run = await host.stores.runs.get(run_id)
    assert run.status is RunStatus.COMPLETED
    event = await host.stores.events.get(run.event_id)
    assert (event.event_type, event.payload["source_event_type"]) == ("message.received", "MESSAGE_CREATE")
    assert (event.conversation_id, event.actor_id) == ("dc:C1", "discord:111")
    assert await host.stores.runs.get_by_event("channel:dc:msg:M0") is None
    assert await host.stores.runs.get_by_event("channel:dc:msg:M00") is None
    # The connection drops; the RESUME replays every event (a duplicate delivery): still one run each.
    fake.replay_all = True
    fake.drop()
    await until(lambda: len(fake.resumes) == 1)
    assert fake.resumes[0]["session_id"] == "session-1"
    assert fake.resumes[0]["seq"] >= 4
    await fake.dispatch("MESSAGE_CREATE", message("M2", "after the resume"))
    await run_of(host, "channel:dc:msg:M2")
    runs = await host.stores.runs.list(limit=100)
    assert sorted(r.event_id for r in runs.items) == ["channel:dc:msg:M1", "channel:dc:msg:M2"]
    assert len(fake.identifies) == 1, "a resume does not identify again"


async def test_edits_deletions_reactions_and_members_are_normalized(link: Link) -> None:
    host, fake = link.host, link.fake
    await fake.dispatch(
        "MESSAGE_UPDATE", message("M5", "edited", edited_timestamp="2026-12-05T00:01:00+00:00")
    )
    await fake.dispatch("MESSAGE_DELETE", {"id": "M5", "channel_id": "C1", "guild_id": "G1"})
    await fake.dispatch("MESSAGE_REACTION_ADD", {"user_id": "111", "channel_id": "C1", "message_id": "M5",
                                                  "guild_id": "G1", "emoji": {"id": None, "name": "👍"}})  # fmt: skip
    await fake.dispatch("MESSAGE_REACTION_ADD", {"user_id": BOT_ID, "channel_id": "C1", "message_id": "M5",
                                                  "guild_id": "G1", "emoji": {"id": None, "name": "👀"}})  # fmt: skip
    await fake.dispatch("GUILD_MEMBER_ADD", {"guild_id": "G1", "user": {"id": "333", "username": "ada"},
                                              "joined_at": "2026-12-05T00:02:00+00:00"})  # fmt: skip
    expected = {
        "channel:dc:edit:M5:2026-12-05T00:01:00+00:00": "message.edited",
        "channel:dc:del:M5": "message.recalled",
        f"channel:dc:react:M5:111:{'👍'.encode().hex()}": "reaction.added",
        "channel:dc:join:G1:333:2026-12-05T00:02:00+00:00": "group.member_joined",
    }
    for event_id, event_type in expected.items():
        run = await host.stores.runs.get(await run_of(host, event_id))
        assert (await host.stores.events.get(run.event_id)).event_type == event_type
    runs = await host.stores.runs.list(limit=100)
    assert len(runs.items) == len(expected), "the bot's own reaction is no run"


async def test_a_missed_heartbeat_ack_reconnects_and_resumes(database_url: str, tmp_path: Path) -> None:
    # An ACK counts as missed after one interval: at 100 ms a loaded machine missed a second one (a
    # third connection), with the run of M7 on the same loop. 500 ms leaves that margin.
    fake = FakeGateway(TOKEN, heartbeat_ms=500)
    fake.skip_acks = 1
    async for link in open_link(database_url, tmp_path, fake):
        await until(lambda: len(fake.resumes) == 1)
        assert len(fake.connections) == 2
        await fake.dispatch("MESSAGE_CREATE", message("M7", "after the zombie"))
        await run_of(link.host, "channel:dc:msg:M7")
        await until(lambda: fake.heartbeats >= 3)  # the new connection's heartbeats are ACKed
        assert len(fake.connections) == 2


async def test_garbage_frames_are_logged_and_skipped_and_a_huge_frame_reconnects_losing_nothing(
    link: Link, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcphost.channels.discord_gateway")
    host, fake = link.host, link.fake
    for frame in ("not json{", b"\x00\x01binary", "[1, 2]", '{"op": 0, "t": "MESSAGE_CREATE", "s": 99, "d": "x"}',
                  '{"op": 0, "t": "MESSAGE_CREATE", "s": 98, "d": {"id": 5}}', '{"op": 1234}', "NaN"):  # fmt: skip
        await fake.send_raw(frame)
    await fake.dispatch("MESSAGE_CREATE", message("M8", "after the garbage"))
    await run_of(host, "channel:dc:msg:M8")
    assert len(fake.connections) == 1, "garbage does not cost the connection"
    logged = caplog.text
    assert "a frame that is not a JSON object (9 characters starting 'not json{')" in logged
    assert "a binary frame of 8 bytes; this client asks for JSON text without compression" in logged
    assert "dispatch 'MESSAGE_CREATE' has no object 'd'; skipped" in logged
    # A frame past the bound closes the connection (1009); what followed it is replayed by the RESUME.
    await fake.send_raw('{"op": 0, "t": "TYPING_START", "d": {"pad": "' + "x" * (9 * 1024 * 1024) + '"}}')
    await fake.dispatch("MESSAGE_CREATE", message("M9", "after the huge frame"))
    await until(lambda: len(fake.resumes) == 1)
    await run_of(host, "channel:dc:msg:M9")
    assert "larger than 8388608 bytes (closed with 1009); resuming replays what followed it" in caplog.text


async def test_invalid_session_identifies_anew_and_reconnect_resumes(link: Link) -> None:
    fake = link.fake
    await fake.send_op(7)
    await until(lambda: len(fake.resumes) == 1)
    await fake.send_op(9, False)
    await until(lambda: len(fake.identifies) == 2)
    await fake.dispatch("MESSAGE_CREATE", message("M10", "new session"))
    await run_of(link.host, "channel:dc:msg:M10")


async def test_one_host_of_those_sharing_the_database_holds_the_gateway_and_another_takes_over(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(discord_gateway, "LEASE_TERM_S", 1.5)
    fake = FakeGateway(TOKEN)
    async with fake.serve() as server, serve_loopback(fake.app) as base:
        fake.bound(server)
        agents = [AgentConfig(id="chat", runner=ECHO_RUNNER, match={"bot_id": "dc"}, event_types=EVENTS)]
        channels = {"dc": channel("discord", base, gateway=True)}

        def settings(name: str) -> Any:
            return api_settings(database_url, tmp_path / name).model_copy(
                update={"agents": agents, "channels": channels}
            )

        stop_first = anyio.Event()

        async def first_host(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            async with open_host(settings("a")):
                task_status.started()
                await stop_first.wait()

        async with anyio.create_task_group() as tg:
            await tg.start(first_host)
            await until(lambda: len(fake.identifies) == 1)
            async with open_host(settings("b")) as second:
                await anyio.sleep(1.5)  # the second host retries the lease every 0.5 s meanwhile
                assert len(fake.identifies) == 1, "the host without the lease does not connect"
                stop_first.set()  # the holder stops and releases the lease: the other one connects
                await until(lambda: len(fake.identifies) == 2)
                await fake.dispatch("MESSAGE_CREATE", message("M11", "after the takeover"))
                await run_of(second, "channel:dc:msg:M11")


async def test_a_refused_token_stops_the_gateway_with_what_to_fix_and_the_host_keeps_running(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcphost.channels.discord_gateway")
    fake = FakeGateway("another-token")
    async with fake.serve() as server, serve_loopback(fake.app) as base:
        fake.bound(server)
        settings = api_settings(database_url, tmp_path / "data").model_copy(
            update={"channels": {"dc": channel("discord", base, gateway=True)}}
        )
        async with open_host(settings) as host:
            await until(lambda: "Discord Gateway stopped" in caplog.text)
            assert "the bot token was refused; check the token variable of the channel" in caplog.text
            assert fake.identifies == [], "the token never reached a websocket"
            assert (await host.stores.runs.list(limit=1)).items == []
