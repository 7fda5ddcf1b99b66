"""Helpers of the bridge tests: a real Streamable HTTP MCP server behind a bearer check (the `endpoint`
fixture in conftest.py serves it), and a driver for the bridge as a raw subprocess.

The server is the SDK's `MCPServer` with a few tools (echo, slow, progress, ask, announce, region), served by
uvicorn on 127.0.0.1 on a free port from a background thread, and wrapped in a tiny ASGI gate that answers 401
with a JSON-RPC error body unless `Authorization: Bearer <token>` matches, and records every request it sees.
"""

from __future__ import annotations

import json
import secrets
import socket
import sys
import threading
import time
from collections.abc import AsyncGenerator, Generator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Annotated, Any, cast

import anyio
import anyio.to_thread
import mcp_types as types
import uvicorn
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNAUTHORIZED_BODY: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": None,
    "error": {"code": -32001, "message": "token does not belong to this run"},
}


@dataclass(frozen=True)
class SeenRequest:
    """One HTTP request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]


@dataclass
class ToolEvents:
    """What the tools observed, written from the server thread."""

    slow_started: threading.Event = field(default_factory=threading.Event)
    slow_cancelled: threading.Event = field(default_factory=threading.Event)
    deleted: threading.Event = field(default_factory=threading.Event)
    """Set when the server receives a DELETE (a session being closed)."""

    async def wait(self, event: threading.Event, timeout: float = 5) -> None:
        """Wait for an event the server thread sets, failing the test after `timeout` seconds."""
        assert await anyio.to_thread.run_sync(event.wait, timeout), f"timed out after {timeout} s"


@dataclass(frozen=True)
class Endpoint:
    """A running MCP server: where it is, the token it accepts, and what it saw."""

    url: str
    token: str
    seen: list[SeenRequest]
    events: ToolEvents
    response_types: list[tuple[str, str]]
    """(request method, response content type) of every response the server sent, in order."""
    json_response: bool
    """Whether the server answers requests with JSON bodies rather than SSE streams."""

    @property
    def base(self) -> str:
        return self.url.removesuffix("/mcp")


class Answer(BaseModel):
    answer: str


def build_server(events: ToolEvents) -> MCPServer:
    """The MCP server under test: one tool per behaviour the bridge must relay."""
    server = MCPServer("bridge-test", version="1.0")

    @server.tool()
    def echo(text: str, count: int = 1) -> dict[str, Any]:
        """Return the arguments as given."""
        return {"text": text, "count": count}

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, noting a start and a cancellation."""
        events.slow_started.set()
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            events.slow_cancelled.set()
            raise
        return f"slept {seconds}"

    @server.tool()
    async def progress(steps: int, ctx: Context) -> str:
        """Report progress for each step and send one log message, both on the request's stream."""
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}")
        log = types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams(level="info", data=f"finished {steps} steps")
        )
        await ctx.request_context.session.send_notification(
            log, related_request_id=ctx.request_context.request_id
        )
        return "done"

    @server.tool()
    async def ask(question: str, ctx: Context) -> str:
        """Elicit an answer from the client (a server-to-client request; handshake era only)."""
        result = await ctx.elicit(question, Answer)
        return result.data.answer if result.action == "accept" else result.action

    @server.tool()
    async def announce(ctx: Context) -> str:
        """Send a notification that is not tied to this request (the GET stream carries it)."""
        await ctx.request_context.session.send_tool_list_changed()
        return "announced"

    @server.tool()
    def region(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
        """A tool whose argument a 2026 client mirrors into the `Mcp-Param-Region` header."""
        return f"region {region}"

    return server


class BearerGate:
    """Records each HTTP request and refuses it with 401 unless it carries the expected bearer token."""

    def __init__(self, app: ASGIApp, token: str, endpoint: Endpoint) -> None:
        self._app = app
        self._token = token
        self._endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        self._endpoint.seen.append(SeenRequest(scope["method"], scope["path"], dict(headers.items())))
        if scope["method"] == "DELETE":
            self._endpoint.events.deleted.set()

        async def recording_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                content_type = Headers(raw=message["headers"]).get("content-type", "")
                self._endpoint.response_types.append((scope["method"], content_type.split(";")[0]))
            await send(message)

        if headers.get("authorization") != f"Bearer {self._token}":
            await JSONResponse(UNAUTHORIZED_BODY, status_code=401)(scope, receive, recording_send)
            return
        await self._app(scope, receive, recording_send)


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def bridge_command(url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "mcphost_bridge", "--url", url, *extra]


class BridgeProcess:
    """The bridge as a raw subprocess: write lines to its stdin, read JSON lines from its stdout."""

    def __init__(self, process: Process, stderr_path: Path) -> None:
        self.process = process
        self.stdout_lines: list[bytes] = []
        self._stderr_path = stderr_path
        assert process.stdout is not None
        self._stdout = BufferedByteReceiveStream(process.stdout)

    async def send(self, message: dict[str, Any] | bytes) -> None:
        assert self.process.stdin is not None
        line = message if isinstance(message, bytes) else json.dumps(message).encode()
        await self.process.stdin.send(line + b"\n")

    async def receive(self, timeout: float = 10) -> dict[str, Any]:
        """The next stdout line, which must be a JSON object."""
        with anyio.fail_after(timeout):
            line = await self._stdout.receive_until(b"\n", 64 * 1024 * 1024)
        self.stdout_lines.append(line)
        decoded = json.loads(line)
        assert isinstance(decoded, dict), line
        return cast(dict[str, Any], decoded)

    async def request(
        self, request_id: int | str, method: str, params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Send a request and return its response, skipping (and keeping) anything that arrives before it."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        while True:
            received = await self.receive()
            if received.get("id") == request_id and "method" not in received:
                return received

    async def close_stdin(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()

    async def wait(self, timeout: float = 10) -> int:
        """Wait for exit, collecting what is left on stdout."""
        with anyio.fail_after(timeout):
            while True:
                try:
                    self.stdout_lines.append(await self._stdout.receive_until(b"\n", 64 * 1024 * 1024))
                except (anyio.IncompleteRead, anyio.EndOfStream):
                    break
            return await self.process.wait()

    @property
    def stderr(self) -> str:
        return self._stderr_path.read_text()


@asynccontextmanager
async def open_bridge(
    url: str,
    tmp_path: Path,
    *,
    token: str | None,
    extra: tuple[str, ...] = (),
    command: list[str] | None = None,
    cwd: Path | None = None,
) -> AsyncGenerator[BridgeProcess]:
    """Start `python -m mcphost_bridge --url URL` (or `command`, in `cwd`) with the token in
    `MCPHOST_RUN_TOKEN`; kill it if still running."""
    env = {"PATH": "/usr/bin:/bin"}
    if token is not None:
        env["MCPHOST_RUN_TOKEN"] = token
    stderr_path = tmp_path / f"bridge-{secrets.token_hex(4)}.stderr"
    stderr_file: IO[bytes] = stderr_path.open("wb")
    try:
        argv = command or bridge_command(url, *extra)
        process = await anyio.open_process(argv, env=env, stderr=stderr_file, cwd=cwd)
        async with process:
            bridge = BridgeProcess(process, stderr_path)
            try:
                yield bridge
            finally:
                if process.returncode is None:
                    process.kill()
                    with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                        await process.wait()
    finally:
        stderr_file.close()


INITIALIZE_PARAMS: dict[str, Any] = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "raw-test", "version": "0"},
}


@contextmanager
def serving_endpoint(*, json_response: bool = False) -> Generator[Endpoint]:
    """A fresh test MCP server (sessions, recorded requests and tool events start empty) for the block.

    `json_response=True`: a server that answers with JSON bodies instead of SSE.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    found = Endpoint(
        f"http://127.0.0.1:{port}/mcp", secrets.token_urlsafe(32), [], ToolEvents(), [], json_response
    )
    mcp_app = build_server(found.events).streamable_http_app(json_response=json_response)
    app = BearerGate(mcp_app, found.token, found)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive(), "the test MCP server thread died"
        assert time.monotonic() < deadline, "the test MCP server did not start within 10 s"
        time.sleep(0.01)
    try:
        yield found
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
