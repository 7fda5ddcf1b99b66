"""`EventStream` against a fake ASGI server: HEAD, a slow client kept, a stalled one dropped on time,
keep-alives never while a send waits, a producer's error raised as it is, and a started producer's
`finally` always run."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator

import anyio
import pytest
from sse_starlette import ServerSentEvent
from starlette.types import Message, Scope

import mcphost.api._http
from mcphost.api._http import EventStream, json_event

pytestmark = pytest.mark.anyio


def _scope(method: str = "GET") -> Scope:
    return {"type": "http", "method": method, "path": "/results", "headers": []}


class _Client:
    """The ASGI side: records what is sent (and when), a send can be made to wait."""

    def __init__(self, *, stall_s: float = 0.0, stall_on: int = 1) -> None:
        self.sent: list[tuple[float, Message]] = []
        self.stall_s = stall_s
        self.stall_on = stall_on
        self.disconnect = anyio.Event()
        self._bodies = 0

    async def receive(self) -> Message:
        await self.disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            self._bodies += 1
            if self._bodies == self.stall_on and self.stall_s:
                await anyio.sleep(self.stall_s)
        self.sent.append((time.monotonic(), message))

    def bodies(self) -> list[bytes]:
        return [m.get("body", b"") for _, m in self.sent if m["type"] == "http.response.body"]


def _producer(closed: list[str], count: int, gap_s: float = 0.0) -> AsyncGenerator[ServerSentEvent, None]:
    async def events() -> AsyncGenerator[ServerSentEvent, None]:
        try:
            for i in range(count):
                if gap_s:
                    await anyio.sleep(gap_s)
                yield json_event({"i": i}, event="e")
        finally:
            closed.append("closed")

    return events()


async def test_head_gets_the_headers_and_an_empty_body_and_the_producer_never_starts() -> None:
    closed: list[str] = []
    client = _Client()
    await EventStream(_producer(closed, 3), headers={"X-Run-Id": "r1"})(
        _scope("HEAD"), client.receive, client.send
    )
    start = client.sent[0][1]
    headers = dict(start["headers"])
    assert start["status"] == 200
    assert headers[b"content-type"].startswith(b"text/event-stream")
    assert headers[b"cache-control"] == b"no-store"
    assert headers[b"x-run-id"] == b"r1"
    assert client.bodies() == [b""]
    assert closed == []  # never started: it read and holds nothing


async def test_a_slow_client_is_kept_and_no_keepalive_goes_out_while_a_send_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mcphost.api._http, "KEEPALIVE_S", 0.05)
    monkeypatch.setattr(mcphost.api._http, "SEND_TIMEOUT_S", 1.0)
    closed: list[str] = []
    client = _Client(stall_s=0.4, stall_on=2)  # the first event's send waits 8 keep-alive periods
    with anyio.fail_after(10):
        await EventStream(_producer(closed, 3, gap_s=0.01))(_scope(), client.receive, client.send)
    bodies = client.bodies()
    assert bodies[0] == b": stream open\n\n"
    events = [b for b in bodies if b.startswith(b"event:")]
    assert len(events) == 3
    assert bodies[-1] == b""  # the end of the response
    times = [t for t, m in client.sent if m["type"] == "http.response.body"]
    first_event = bodies.index(events[0])
    # Nothing was sent while the first event's send waited: the next body came after it.
    assert all(t >= times[first_event] for t in times[first_event:])
    assert b": keepalive\n\n" not in bodies[1:first_event]
    assert closed == ["closed"]


async def test_a_quiet_stream_sends_keepalives_and_a_disconnect_stops_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mcphost.api._http, "KEEPALIVE_S", 0.05)
    closed: list[str] = []
    client = _Client()

    async def disconnect_later() -> None:
        await anyio.sleep(0.3)
        client.disconnect.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(disconnect_later)
            await EventStream(_producer(closed, 1, gap_s=60))(_scope(), client.receive, client.send)
    bodies = client.bodies()
    assert bodies.count(b": keepalive\n\n") >= 3
    assert all(not b.startswith(b"event:") for b in bodies)
    assert closed == ["closed"]


async def test_a_stalled_client_is_dropped_after_the_send_timeout_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The keep-alive period is longer than the send timeout: the drop still comes on time.
    monkeypatch.setattr(mcphost.api._http, "SEND_TIMEOUT_S", 0.3)
    closed: list[str] = []
    client = _Client(stall_s=3600, stall_on=2)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, "mcphost.api"), anyio.fail_after(10):
        await EventStream(_producer(closed, 3))(_scope(), client.receive, client.send)
    took = time.monotonic() - began
    assert 0.3 <= took < 2.0, took
    assert "dropped the event stream of /results: the client took no data for 0.3 s" in caplog.text
    assert closed == ["closed"]
    assert client.bodies() == [b": stream open\n\n"]  # no end of response: uvicorn closes the connection


async def test_a_producers_error_is_raised_as_it_is() -> None:
    async def failing() -> AsyncGenerator[ServerSentEvent, None]:
        yield json_event({"i": 0}, event="e")
        raise LookupError("the feed failed")

    client = _Client()
    with pytest.raises(LookupError, match="the feed failed"):
        await EventStream(failing())(_scope(), client.receive, client.send)
