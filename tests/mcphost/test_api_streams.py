"""Result streams over real HTTP (uvicorn on a free port): disconnects, resumption with `Last-Event-ID`
exactly once, keep-alives, and the ingest stream.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
import httpx2
import pytest
from sse_starlette import ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Message

import mcphost.api._http
from mcphost.api._http import EventStream, json_event
from mcphost.app import Host, build_app, open_host
from mcphost.models import RunStatus
from mcphost.serving import bind_socket, serve_http
from tests._json import obj
from tests.e2e.httpkit import api_settings, event_body, served


@pytest.fixture
async def host(database_url: str, tmp_path: Path) -> AsyncGenerator[Host, None]:
    async with open_host(api_settings(database_url, tmp_path / "data")) as opened:
        yield opened


@pytest.fixture
async def http(host: Host) -> AsyncGenerator[httpx2.AsyncClient, None]:
    async with served(host) as url, httpx2.AsyncClient(base_url=url, timeout=httpx2.Timeout(30)) as client:
        yield client


async def read_results(
    http: httpx2.AsyncClient, run_id: str, *, last_event_id: int | None, stop_after: int | None
) -> tuple[list[int], bool]:
    """Result sequences received on one connection, and whether the `end` event came; closes the
    connection (a client disconnect) after `stop_after` results."""
    headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
    seqs: list[int] = []
    async with http.sse(f"/v1/runs/{run_id}/results", headers=headers) as source:
        async for event in source:
            if event.event == "end":
                return seqs, True
            if event.event not in ("run", "error"):
                payload = obj(event.json())
                assert event.event == payload["type"]  # a result is named by its type
                assert event.id == str(payload["seq"])
                seqs.append(int(event.id))
                if stop_after is not None and len(seqs) >= stop_after:
                    return seqs, False
    return seqs, False


async def test_a_client_that_disconnects_mid_stream_resumes_with_last_event_id_exactly_once(
    host: Host, http: httpx2.AsyncClient
) -> None:
    run_id = (await http.post("/v1/events", json=event_body("flood:3000", bot="bad"))).json()["run_id"]
    received: list[int] = []
    ended = False
    for stop_after in (40, 700, 1):  # three disconnects at different points, then read to the end
        seqs, ended = await read_results(
            http, run_id, last_event_id=received[-1] if received else None, stop_after=stop_after
        )
        received += seqs
        assert not ended
    while not ended:
        seqs, ended = await read_results(http, run_id, last_event_id=received[-1], stop_after=None)
        received += seqs
    stored = await host.stores.results.last_seq(run_id)
    assert stored == 3001  # 3000 deltas, then run.completed with the message
    assert received == list(range(1, stored + 1))  # every result, in order, none twice
    assert (await host.stores.runs.get(run_id)).status is RunStatus.COMPLETED


async def test_a_stream_that_starts_while_the_run_waits_delivers_everything_live(
    host: Host, http: httpx2.AsyncClient
) -> None:
    run_id = (await http.post("/v1/events", json=event_body("slow:1", bot="bad"))).json()["run_id"]
    seqs, ended = await read_results(http, run_id, last_event_id=None, stop_after=None)
    assert ended
    assert seqs == [1, 2]
    results = await host.stores.results.list(run_id)
    assert [r.type for r in results] == ["message.completed", "run.completed"]


async def test_a_quiet_stream_sends_keepalive_comments(
    host: Host, http: httpx2.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcphost.api._http, "KEEPALIVE_S", 0.1)
    run_id = (await http.post("/v1/events", json=event_body("slow:1", bot="bad"))).json()["run_id"]
    body = b""
    async with http.stream("GET", f"/v1/runs/{run_id}/results") as response:
        assert response.headers["cache-control"] == "no-store"
        assert response.headers["x-accel-buffering"] == "no"
        async for chunk in response.aiter_bytes():
            body += chunk
    assert b"\r" not in body  # lines end in \n, as the console's reader and older clients expect
    lines = body.decode().split("\n")[:-1]
    first_result = next(i for i, line in enumerate(lines) if line.startswith("id: "))
    assert lines[0] == ": stream open"
    assert lines[:first_result].count(": keepalive") >= 3
    # a keepalive may still slip in between the end event and the close: the end event is the last *event*
    events = [line for line in lines if line and not line.startswith(":")]
    assert events[-2] == "event: end"
    assert '"status":"completed"' in events[-1]


async def test_the_ingest_stream_delivers_deltas_as_they_are_persisted(
    host: Host, http: httpx2.AsyncClient
) -> None:
    types: list[str] = []
    async with http.sse(
        "/v1/events", method="POST", params={"stream": "true"}, json=event_body("flood:200", bot="bad")
    ) as source:
        async for event in source:
            if event.event not in ("run", "end"):
                assert event.event == json.loads(event.data)["type"]
            types.append(event.event)
    assert types[0] == "run"
    assert types[1:201] == ["message.delta"] * 200
    assert types[201:] == ["run.completed", "end"]


async def test_a_dropped_client_does_not_disturb_the_run_or_the_server(
    host: Host, http: httpx2.AsyncClient
) -> None:
    run_id = (await http.post("/v1/events", json=event_body("slow:1.5", bot="bad"))).json()["run_id"]
    for _ in range(5):
        with anyio.move_on_after(0.1):
            await read_results(http, run_id, last_event_id=None, stop_after=None)
    run = await host.orchestrator.wait(run_id)
    assert run.status is RunStatus.COMPLETED
    health = await http.get("/healthz")
    assert health.json()["active_runs"] == 0


async def test_a_client_that_stops_reading_is_dropped_after_the_send_timeout_and_its_producer_closed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(mcphost.api._http, "SEND_TIMEOUT_S", 0.5)
    closed = anyio.Event()

    async def endless() -> AsyncGenerator[ServerSentEvent, None]:
        try:
            while True:
                yield json_event({"fill": "x" * 65536})
        finally:
            closed.set()

    async def results(request: Request) -> Response:
        return EventStream(endless())

    async def ok(request: Request) -> Response:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/results", results), Route("/ok", ok)])
    with bind_socket("127.0.0.1", 0) as listening:
        async with serve_http(app, listening) as url:
            with socket.create_connection(listening.getsockname()) as client:
                client.sendall(b"GET /results HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # then never reads
                with anyio.fail_after(60):
                    await closed.wait()
            async with httpx2.AsyncClient(base_url=url, timeout=30) as http:
                assert (await http.get("/ok")).text == "ok"  # the server serves on
    assert "dropped the event stream of /results: the client took no data for 0.5 s" in caplog.text


async def test_an_echo_runs_stream_is_written_a_batch_at_a_time(host: Host) -> None:
    # The results at hand go out in one write (one ASGI body message): the stream-open comment with
    # the run event, then each batch the run's feed publishes, then the end.
    app = build_app(host)
    request = json.dumps(event_body("hello", conversation="c-writes")).encode()
    bodies: list[bytes] = []
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": request, "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    messages: list[Message] = []

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body":
            messages.append(message)
        if message["type"] == "http.response.body" and message.get("body"):
            bodies.append(message["body"])

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/events",
        "raw_path": b"/v1/events",
        "query_string": b"stream=true",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    with anyio.fail_after(30):
        await app(scope, receive, send)
    events = [e for chunk in bodies for e in chunk.decode().split("\n\n") if e.startswith(("event:", "id:"))]
    names = [line[7:] for e in events for line in e.splitlines() if line.startswith("event: ")]
    assert names[0] == "run"
    assert names[-2:] == ["run.completed", "end"], names
    assert bodies[0].startswith(b": stream open")
    assert b"event: run" in bodies[0]
    assert len(bodies) < len(names) + 1, bodies  # one write per event and one for the comment before
    # The end event ends the body in its own write: no empty message after it (`_http.Last`), and the
    # echo runner's four results, written by its plugin in one write, are one batch.
    assert messages[-1]["more_body"] is False
    assert messages[-1]["body"].startswith(b"event: end")
    assert len(messages) == 3, [m["body"][:40] for m in messages]
