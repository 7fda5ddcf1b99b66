"""bridge: how soon `mcphost-bridge` lists its endpoint's tools, from a cold process.

- Subject: spawn `python -m mcphost_bridge --url …`, write `initialize` (2025-11-25) or `server/discover`
  (2026-07-28), wait for its answer, then write `notifications/initialized` (handshake era) and
  `tools/list`: milliseconds from the spawn to the `tools/list` answer's line on stdout — what a stdio client
  such as Claude Code waits for before it can offer the tools. The endpoint is a stub in this process that
  answers at once (JSON bodies), so the time is the bridge's.
- Baseline, alternated with it (ABBA): `python -c "import httpx2"`, the import an HTTP client in Python
  cannot do without, in a fresh process.
- Target: p50 ≤ 300 ms over 10 cold starts (issue 27, item 3), judged on the subject's median; the ratio to
  the baseline is reported beside it, so a loaded machine shows as a slow baseline too.

`MCPHOST_BENCH_BRIDGE_PYTHONPATH` puts a directory first on the bridge's import path, to time another
version of `mcphost_bridge` (an older checkout) against the same baseline.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Generator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream

from bench._alternate import alternate
from bench._config import BenchConfig
from bench._stats import Row, Stat, judge

NAME = "bridge"
ROUNDS = 10
TARGET_MS = 300.0
TIMEOUT_S = 60.0
_TOOLS: list[dict[str, Any]] = [
    {"name": f"tool_{i}", "description": "a tool", "inputSchema": {"type": "object", "properties": {}}}
    for i in range(12)
]
_OPENING: dict[str, dict[str, Any]] = {
    "initialize": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
    "server/discover": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
}


class _StubEndpoint(BaseHTTPRequestHandler):
    """Answers the opening message and `tools/list` at once (JSON bodies); accepts notifications."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        method = request.get("method")
        if "id" not in request:
            self._reply(202, b"")
            return
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "stub", "version": "0"},
            }
        elif method == "server/discover":
            result = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}}
        else:
            result = {"tools": _TOOLS}
        body = json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "result": result}).encode()
        self._reply(200, body, session=method == "initialize")

    def do_GET(self) -> None:
        self._reply(405, b"")

    def do_DELETE(self) -> None:
        self._reply(204, b"")

    def _reply(self, status: int, body: bytes, *, session: bool = False) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        if session:
            self.send_header("mcp-session-id", "bench")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def stub_endpoint() -> Generator[str]:
    """The stub served on a loopback port in a thread; yields its MCP URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StubEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPHOST_")}
    env["MCPHOST_RUN_TOKEN"] = "bench"
    if extra := os.environ.get("MCPHOST_BENCH_BRIDGE_PYTHONPATH"):
        env["PYTHONPATH"] = extra
    return env


async def _line(stdout: ByteReceiveStream, buffer: bytearray) -> dict[str, Any]:
    while b"\n" not in buffer:
        chunk = await stdout.receive()
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return json.loads(line)


async def tools_list_ms(url: str, opening: str) -> float:
    """Spawn the bridge and list tools through it; ms from the spawn to the `tools/list` answer."""
    start = time.perf_counter_ns()
    async with await anyio.open_process(
        [sys.executable, "-m", "mcphost_bridge", "--url", url], env=_env()
    ) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        buffer = bytearray()
        first = {"jsonrpc": "2.0", "id": 1, "method": opening, "params": _OPENING[opening]}
        with anyio.fail_after(TIMEOUT_S):
            await process.stdin.send(json.dumps(first).encode() + b"\n")
            await _line(process.stdout, buffer)
            rest: list[dict[str, Any]] = []
            if opening == "initialize":
                rest.append({"jsonrpc": "2.0", "method": "notifications/initialized"})
                params: dict[str, Any] = {}
            else:
                params = {"_meta": _OPENING[opening]["_meta"]}
            rest.append({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": params})
            await process.stdin.send(b"".join(json.dumps(m).encode() + b"\n" for m in rest))
            answer = await _line(process.stdout, buffer)
        elapsed = (time.perf_counter_ns() - start) / 1e6
        result: dict[str, Any] = answer.get("result", {})
        tools: list[Any] = result.get("tools", [])
        if len(tools) != len(_TOOLS):
            raise RuntimeError(f"the bridge answered tools/list with {answer!r}")
        await process.stdin.aclose()
        with anyio.fail_after(TIMEOUT_S):
            await process.wait()
    return elapsed


async def _python_ms(code: str) -> float:
    start = time.perf_counter_ns()
    await anyio.run_process([sys.executable, "-c", code], env=_env())
    return (time.perf_counter_ns() - start) / 1e6


async def run(cfg: BenchConfig) -> list[Row]:
    del cfg  # 10 cold starts whatever the preset: the target is defined over 10
    rows: list[Row] = []

    async def import_httpx() -> list[float]:
        return [await _python_ms("import httpx2")]

    with stub_endpoint() as url:
        for opening, era in (("initialize", "2025-11-25"), ("server/discover", "2026-07-28")):

            async def listed(opening: str = opening) -> list[float]:
                return [await tools_list_ms(url, opening)]

            samples = await alternate(import_httpx, listed, rounds=ROUNDS, warmup=0, min_rounds=ROUNDS)
            subject = Stat.of(samples.subject, "ms")
            rows.append(
                Row(
                    benchmark=NAME,
                    case=f"mcphost-bridge → tools/list answered, {era} (`{opening}` first)",
                    baseline_label="`python -c 'import httpx2'`",
                    subject_label="`python -m mcphost_bridge`, spawn to the tools/list answer",
                    baseline=Stat.of(samples.baseline, "ms"),
                    subject=subject,
                    target=f"p50 ≤ {TARGET_MS:g} ms",
                    verdict=judge(subject.p50 <= TARGET_MS),
                )
            )
    return rows
