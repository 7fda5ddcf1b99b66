"""The two servers under comparison, each a subprocess on 127.0.0.1, and one echo run on each over HTTP.

Owns starting, readiness and stopping (terminate, then kill after a bounded wait, always), the load
generator's HTTP client (`client`: one aiohttp session, the same for both sides), and the client side of
one run:

- mcphost: `mcphost serve` from this environment with a config written for the benchmark (the bundled
  echo runner as the only plugin, one agent bound to it, `max_concurrent_runs`, logs at warning, a fresh
  SQLite file or PostgreSQL database). A run is `POST /v1/events?stream=true` read to `event: end`, which
  the server sends once the run is closed, and checked to end `completed` with the echoed text.
- LangGraph: `serve.py` in LangGraph's own environment (`bench/peers/langgraph/`), the server behind
  `langgraph dev`, with its queue woken on run creation (see that file). A run (`langgraph_run`) is a
  stateless `POST /runs/wait`: LangGraph makes a temporary thread for it and deletes it once the run is
  done, so its in-memory store stays the same size however many runs it serves. Its queue and thread
  look-ups scan every stored run and thread (`langgraph_runtime_inmem.ops.Runs.next`), so with a kept
  thread per run its CPU per run grows with the runs served (5 ms fresh, 11 ms after 2,000 runs):
  stateless is its best case. A turn of one kept thread (`langgraph_turn`, the soak's) is
  `POST /threads/{id}/runs/wait` with `if_not_exists: create`. Both answer once the run is done and are
  checked to hold the echoed text.

The client is aiohttp, not httpx: at c=64 an httpx client spends about 1.1 ms of CPU per run against
aiohttp's 0.3 ms (same runs, same machine), and on two cores the client's CPU is taken from the servers.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import anyio
import anyio.abc
import httpx2

from bench._databases import Workspace
from bench._host import ECHO_COMMAND, ECHO_RUNNER
from bench.startup import BIN, clean_env, free_port

PEER_DIR = Path(__file__).parent / "langgraph"
PEER_PYTHON = PEER_DIR / ".venv" / "bin" / "python"
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0
TEXT = "hello"

MCPHOST_SETTINGS = {"max_concurrent_runs": 64, "log_level": "warning", "bundled_plugins": False}
"""`[host]` settings of the mcphost side besides its database (the rest are defaults)."""
PEER_JOBS = 64
"""LangGraph's `N_JOBS_PER_WORKER` (runs in flight; `langgraph dev` defaults to 10): as mcphost's."""
PEER_ENV = {"LOG_LEVEL": "WARNING", "LANGSMITH_TRACING": "false", "LANGGRAPH_CLI_NO_ANALYTICS": "1"}
"""LangGraph logs every run at INFO by default; mcphost runs at warning, so both log warnings only."""


def peer_available() -> str | None:
    """None when LangGraph's environment is installed here, else why not."""
    if not PEER_PYTHON.exists():
        return f"LangGraph's environment is not installed: run `uv sync --locked --directory {PEER_DIR}`"
    probe = subprocess.run(
        [str(PEER_PYTHON), "-c", "import langgraph_api, langgraph_runtime_inmem"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"LangGraph is not importable in {PEER_DIR}/.venv: {probe.stderr.decode()[-300:]}"
    return None


@dataclass
class Server:
    """A started server: its process (the root of the tree whose CPU is measured) and its base URL."""

    name: str
    process: anyio.abc.Process
    url: str

    @property
    def pid(self) -> int:
        return self.process.pid


def _toml_config(ws: Workspace, listen: str) -> str:
    s = json.dumps  # a JSON string is a valid TOML basic string
    host = {
        "database_url": ws.database_url,
        "data_dir": str(ws.data_dir),
        "listen": listen,
        **MCPHOST_SETTINGS,
    }
    lines = ["[host]"]
    for key, value in host.items():
        lines.append(f"{key} = {str(value).lower() if isinstance(value, bool) else s(value)}")
    lines += [
        "",
        "[[plugins]]",
        f"name = {s('echo')}",
        f"command = [{', '.join(s(part) for part in ECHO_COMMAND)}]",
        "",
        "[[agents]]",
        f"id = {s('echo')}",
        f"runner = {s(ECHO_RUNNER)}",
        f"match = {{ bot_id = {s('echo')} }}",
    ]
    return "\n".join(lines) + "\n"


@asynccontextmanager
async def _started(
    name: str, argv: list[str], url: str, ready_path: str, cwd: Path, env: dict[str, str]
) -> AsyncGenerator[Server, None]:
    log = (cwd / f"{name}.log").open("wb")
    process = await anyio.open_process(argv, cwd=cwd, env=env, stdout=log, stderr=log)
    try:
        async with httpx2.AsyncClient(timeout=2.0) as client:
            with anyio.fail_after(READY_TIMEOUT_S):
                while True:
                    if process.returncode is not None:
                        tail = (cwd / f"{name}.log").read_text(errors="replace")[-2000:]
                        raise RuntimeError(f"{name} exited {process.returncode} before serving:\n{tail}")
                    try:
                        if (await client.get(url + ready_path)).status_code == 200:
                            break
                    except httpx2.TransportError:
                        pass
                    await anyio.sleep(0.1)
        yield Server(name, process, url)
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.terminate()
                with anyio.move_on_after(STOP_TIMEOUT_S):
                    await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()
            log.close()


PORT_ATTEMPTS = 3
"""Ports tried for one `mcphost serve` (another process can take a free port before the server binds it)."""
MAIN_OF_PATH = "import sys; from mcphost.cli import main; sys.exit(main())"
"""`mcphost`'s entry point from whichever tree is first on `sys.path`."""


@asynccontextmanager
async def mcphost_server(
    ws: Workspace, folder: Path, *, tree: Path | None = None
) -> AsyncGenerator[Server, None]:
    """`mcphost serve` on a free loopback port with the echo agent, on `ws`'s database; with `tree`, the
    code of that checkout (first on `PYTHONPATH`) on this environment's interpreter and packages."""
    await anyio.Path(folder).mkdir(parents=True, exist_ok=True)
    server: Server | None = None
    async with AsyncExitStack() as stack:
        for attempt in range(1, PORT_ATTEMPTS + 1):
            # A free port can be taken by another process before the server binds it: try another.
            port = free_port()
            config = folder / f"mcphost-{port}.toml"
            await anyio.Path(config).write_text(_toml_config(ws, f"127.0.0.1:{port}"))
            argv = [str(BIN / "mcphost"), "serve", "--config", str(config)]
            # uvloop is used when installed; MCPHOST_BENCH_UVLOOP=false measures asyncio's own loop instead.
            env = clean_env() | {"MCPHOST_UVLOOP": os.environ.get("MCPHOST_BENCH_UVLOOP", "true")}
            if tree is not None:  # the console script's own import would be this tree's: start it from `tree`
                argv = [str(BIN / "python"), "-c", MAIN_OF_PATH, "serve", "--config", str(config)]
                env["PYTHONPATH"] = str(tree)
            url = f"http://127.0.0.1:{port}"
            try:
                server = await stack.enter_async_context(
                    _started(f"mcphost-{port}", argv, url, "/healthz", folder, env)
                )
            except RuntimeError as exc:
                if attempt < PORT_ATTEMPTS and "Address already in use" in str(exc):
                    continue
                raise
            break
        assert server is not None  # the last attempt raised otherwise
        yield server


@asynccontextmanager
async def langgraph_server(folder: Path) -> AsyncGenerator[Server, None]:
    """LangGraph's in-memory server (`serve.py`) on a free loopback port; its files go under `folder`."""
    port = free_port()
    await anyio.Path(folder).mkdir(parents=True, exist_ok=True)
    argv = [str(PEER_PYTHON), str(PEER_DIR / "serve.py"), str(port), str(PEER_JOBS)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "MCPHOST_"))} | PEER_ENV
    async with _started(f"langgraph-{port}", argv, f"http://127.0.0.1:{port}", "/ok", folder, env) as s:
        yield s


KEEPALIVE_S = 2.0
"""How long the client keeps an idle connection (below the servers' keep-alive timeout)."""

ClientError = (RuntimeError, aiohttp.ClientError, TimeoutError)
"""What one failed run raises: counted as a failed run, never fatal to a measurement."""

RunOne = Callable[[aiohttp.ClientSession, Server, str], Awaitable[None]]
"""One run on one server with the shared client; the string names the conversation / thread."""


@asynccontextmanager
async def client(concurrency: int) -> AsyncGenerator[aiohttp.ClientSession, None]:
    """The load generator's HTTP session: keep-alive connections for `concurrency` runs in flight."""
    # Idle connections are dropped by the client after KEEPALIVE_S, before either server's own 5 s
    # (uvicorn's default): while the other side runs its round, a connection the server closes at the
    # moment the client reuses it would fail a run ("Server disconnected") that measured nothing.
    connector = aiohttp.TCPConnector(limit=concurrency + 8, limit_per_host=0, keepalive_timeout=KEEPALIVE_S)
    timeout = aiohttp.ClientTimeout(total=300, sock_connect=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        yield session


def _echo_event(conversation: str) -> dict[str, object]:
    return {
        "event_type": "message.received",
        "conversation": {"conversation_id": conversation, "bot_id": "echo"},
        "actor": {"actor_id": "bench-user"},
        "input": {"text": TEXT},
    }


async def mcphost_run(session: aiohttp.ClientSession, server: Server, conversation: str) -> None:
    """One echo run through `POST /v1/events?stream=true`, read to the end of its body (the server ends
    it with the `end` event), then parsed once, as the LangGraph side reads and parses its one answer:
    reading line by line cost the client 2-3x the LangGraph side's CPU per run, on the cores both
    servers share."""
    body = _echo_event(conversation)
    async with session.post(f"{server.url}/v1/events", params={"stream": "true"}, json=body) as response:
        raw = await response.read()
    if response.status != 200:
        raise RuntimeError(f"mcphost answered {response.status}: {raw[:500]!r}")
    events = [_sse_event(block) for block in raw.replace(b"\r\n", b"\n").split(b"\n\n") if block.strip()]
    if any(name == "error" for name, _ in events):
        raise RuntimeError(f"mcphost sent an error event: {raw[-500:]!r}")
    end = json.loads(events[-1][1]) if events and events[-1][0] == "end" else None
    echoed = any(TEXT.encode() in data for _, data in events[:-1])
    if end is None or end.get("status") != "completed" or not echoed:
        raise RuntimeError(f"mcphost run did not complete with the echo: end={end!r}, echoed={echoed}")


def _sse_event(block: bytes) -> tuple[str, bytes]:
    """One server-sent event's name and data (its `data:` lines joined)."""
    name, data = "", list[bytes]()
    for line in block.split(b"\n"):
        if line.startswith(b"event:"):
            name = line[6:].strip().decode()
        elif line.startswith(b"data:"):
            data.append(line[5:].strip())
    return name, b"\n".join(data)


async def mcphost_wait(session: aiohttp.ClientSession, server: Server, conversation: str) -> None:
    """One echo run through `POST /v1/events?wait=true`: answered once the run has ended, with its results."""
    body = _echo_event(conversation)
    async with session.post(f"{server.url}/v1/events", params={"wait": "true"}, json=body) as response:
        text = await response.text()
    if response.status != 200 or TEXT not in text or '"completed"' not in text:
        raise RuntimeError(f"mcphost run did not complete with the echo: {response.status} {text[:500]!r}")


async def _langgraph_wait(session: aiohttp.ClientSession, url: str, body: Mapping[str, object]) -> None:
    async with session.post(url, json=body) as response:
        text = await response.text()
    try:
        reply = json.loads(text).get("reply") if response.status == 200 else None
    except (ValueError, AttributeError):
        reply = None
    if reply != TEXT:
        raise RuntimeError(f"LangGraph run did not echo: {response.status} {text[:500]!r}")


async def langgraph_run(session: aiohttp.ClientSession, server: Server, conversation: str) -> None:
    """One stateless echo run through `POST /runs/wait` (a temporary thread, deleted when it is done)."""
    del conversation  # each run is a new, temporary thread, as each mcphost run gets a new conversation
    await _langgraph_wait(
        session, f"{server.url}/runs/wait", {"assistant_id": "echo", "input": {"text": TEXT}}
    )


async def langgraph_turn(session: aiohttp.ClientSession, server: Server, thread: str) -> None:
    """One echo run on LangGraph in `thread` (created by its first run), like a turn of a conversation."""
    body = {"assistant_id": "echo", "input": {"text": TEXT}, "if_not_exists": "create"}
    await _langgraph_wait(session, f"{server.url}/threads/{thread}/runs/wait", body)
