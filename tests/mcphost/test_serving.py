"""`serving.py` without a server: listen addresses, the refusal to listen openly without a key, URLs, and
when a serving host warms up (its MCP server loaded after the first answer)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import anyio
import anyio.abc
import pytest
from starlette.types import Message, Receive, Scope, Send

from mcphost import serving
from mcphost.app import Host
from mcphost.config import Settings
from mcphost.errors import ConfigError, InvalidArgumentError
from mcphost.guard import check_listen, parse_listen
from mcphost.serving import FirstAnswer, advertised_url, local_url, redact_query, warm_up


def test_a_listen_address_is_host_and_port_with_ipv6_in_brackets() -> None:
    assert parse_listen("127.0.0.1:8787") == ("127.0.0.1", 8787)
    assert parse_listen("[::1]:0") == ("::1", 0)
    assert parse_listen("localhost:65535") == ("localhost", 65535)
    for bad in ["8787", ":8787", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:65536"]:
        with pytest.raises(InvalidArgumentError, match="HOST:PORT"):
            parse_listen(bad)


def test_only_loopback_addresses_are_served_without_an_api_key() -> None:
    for host in ["127.0.0.1", "localhost", "::1", "127.0.0.5"]:
        check_listen(host, False)
    for host in ["0.0.0.0", "::", "10.0.0.1", "agents.example.com"]:
        with pytest.raises(ConfigError, match="without an API key"):
            check_listen(host, False)
        check_listen(host, True)


def test_clients_on_this_machine_reach_wildcard_addresses_through_loopback(tmp_path: Path) -> None:
    assert local_url("0.0.0.0", 80) == "http://127.0.0.1:80"
    assert local_url("::", 80) == "http://[::1]:80"
    assert local_url("10.0.0.1", 80) == "http://10.0.0.1:80"

    def settings(**host: str) -> Settings:
        return Settings.model_validate({"host": {"data_dir": str(tmp_path), **host}})

    assert advertised_url(settings(listen="0.0.0.0:9000")) == "http://127.0.0.1:9000"
    assert advertised_url(settings(public_url="https://agents.example.com")) == "https://agents.example.com"


def test_secrets_in_query_strings_are_redacted_for_the_access_log() -> None:
    assert redact_query("/runs/x/mcp?access_token=abc&limit=5") == "/runs/x/mcp?access_token=***&limit=5"
    assert redact_query("/v1/runs?API%5FKEY=k&Token") == "/v1/runs?API%5FKEY=***&Token=***"
    assert redact_query("/healthz") == "/healthz"


class _Facts:
    def __init__(self) -> None:
        self.preloaded = 0

    def preload(self) -> None:
        self.preloaded += 1


class _Registry:
    async def ready(self) -> None:
        return None


class _Host:
    """What `warm_up` touches of a host."""

    def __init__(self) -> None:
        self.facts = _Facts()
        self.registry = _Registry()


async def test_the_mcp_server_loads_once_the_first_request_is_answered() -> None:
    host, answered = _Host(), anyio.Event()
    async with warm_up(cast(Host, host), answered):
        await anyio.sleep(0.05)
        assert host.facts.preloaded == 0  # the first request is answered before the import starts
        answered.set()
        for _ in range(100):
            if host.facts.preloaded:
                break
            await anyio.sleep(0.01)
        assert host.facts.preloaded == 1


async def test_with_no_request_the_mcp_server_loads_after_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving, "PRELOAD_AFTER_S", 0.05)
    host = _Host()
    async with warm_up(cast(Host, host), anyio.Event()):
        await anyio.sleep(0.3)
    assert host.facts.preloaded == 1


async def test_first_answer_is_noted_when_the_first_response_has_ended() -> None:
    sent: list[Message] = []
    done: list[bool] = []

    async def streaming(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        done.append(first.answered.is_set())  # a body still streaming is not an answer yet
        await send({"type": "http.response.body", "body": b"b"})

    async def record(message: Message) -> None:
        sent.append(message)

    async def nothing() -> Message:
        return {"type": "http.request", "body": b""}

    first = FirstAnswer(streaming)
    await first({"type": "lifespan"}, nothing, record)  # not an HTTP request
    assert not first.answered.is_set()
    await first({"type": "http", "path": "/healthz"}, nothing, record)
    assert done == [False, False]
    assert first.answered.is_set()
    assert [m.get("body") for m in sent if m["type"] == "http.response.body"] == [b"a", b"b", b"a", b"b"]


async def test_an_idle_connection_outlives_the_http_clients_keep_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A client reuses a pooled connection for up to its own keep-alive (httpx: 5 s). The server keeps it
    # open longer, so a request never lands on a connection the server is closing (uvicorn's own 5 s
    # raced httpx's). Here with the keep-alives scaled down: the server's 1.2 s against an idle 0.6 s.
    from starlette.responses import PlainTextResponse

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await PlainTextResponse("ok")(scope, receive, send)

    monkeypatch.setattr(serving, "KEEP_ALIVE_S", 1.2)
    request = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with serving.bind_socket("127.0.0.1", 0) as listening:
        async with serving.serve_http(app, listening):
            host, port = listening.getsockname()[:2]
            async with await anyio.connect_tcp(host, port) as stream:
                for _ in range(2):
                    await stream.send(request)
                    answer = await stream.receive()
                    assert answer.startswith(b"HTTP/1.1 200"), answer
                    await anyio.sleep(0.6)  # idle, as a pooled connection between two requests
                await anyio.sleep(1.2)  # past the server's keep-alive: it closes the connection
                with anyio.fail_after(2):  # the server's keep-alive is applied: not uvicorn's 5 s
                    assert await _closed(stream)


async def _closed(stream: anyio.abc.SocketStream) -> bool:
    try:
        await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        return True
    return False


def test_the_server_keeps_idle_connections_longer_than_clients_pool_them() -> None:
    assert serving.KEEP_ALIVE_S > 15  # aiohttp's pool, the longest of the common clients'
