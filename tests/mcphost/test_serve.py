"""`mcphost serve`, `send`, `run`, `grant` and `revoke` as a user runs them: real subprocesses, a real
SQLite file, real plugin processes, real HTTP, the real MCP client and the real bridge.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import uvicorn.server
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from mcphost.app import open_host
from mcphost.models import RunStatus
from mcphost.serving import bind_socket, serve_http, serve_locally
from mcphost.stores import open_stores
from tests._json import structured
from tests.e2e.httpkit import PROBE, PROBE_PROMPT, parse_sse
from tests.mcphost.hostkit import MISBEHAVE, REPO, host_settings, message

ENV_DROP = ("MCPHOST_CONFIG", "MCPHOST_DATABASE_URL", "MCPHOST_DATA_DIR", "MCPHOST_API_KEY", "MCPHOST_URL")
BIN = Path(sys.executable).parent


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROP}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env | extra


def mcphost(*args: str, cwd: Path, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcphost.cli", *args],
        cwd=cwd,
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(tmp_path: Path, *, listen: str = "127.0.0.1:8787", extra: str = "") -> Path:
    text = (
        f'[host]\ndata_dir = "{tmp_path / "data"}"\nlisten = "{listen}"\n{extra}'
        f'[[plugins]]\nname = "misbehave"\ncommand = {json.dumps(MISBEHAVE)}\n'
        f'[[plugins]]\nname = "probe"\ncommand = {json.dumps(PROBE)}\n'
        '[[agents]]\nid = "echo"\nrunner = "plugin:mcphost/echo/default"\nmatch = { conversation_id = "cli" }\n'
        '[[agents]]\nid = "bad"\nrunner = "plugin:test/misbehave/default"\nmatch = { conversation_id = ["m1", "m2"] }\n'
        f'[[agents]]\nid = "probe"\nrunner = "plugin:test/probe/default"\nprompt = "{PROBE_PROMPT}"\n'
        'match = { conversation_id = "p1" }\n'
    )
    path = tmp_path / "mcphost.toml"
    path.write_text(text, encoding="utf-8")
    return path


@dataclass
class Server:
    process: subprocess.Popen[str]
    url: str
    stderr: Path

    def log(self) -> str:
        return self.stderr.read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout: float = 30) -> tuple[int, float]:
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=timeout)
        return code, time.monotonic() - started


@pytest.fixture
def start_server(tmp_path: Path) -> Generator[Any, None, None]:
    started: list[Server] = []

    def start(*args: str, **env: str) -> Server:
        stderr = tmp_path / f"serve-{len(started)}.log"
        with stderr.open("w") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "mcphost.cli", "serve", *args],
                cwd=tmp_path,
                env=cli_env(**env),
                stdout=subprocess.DEVNULL,
                stderr=err,
                stdin=subprocess.DEVNULL,
                text=True,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = stderr.read_text(encoding="utf-8", errors="replace")
            if "serving on " in text:
                url = text.split("serving on ", 1)[1].split()[0]
                server = Server(process, url, stderr)
                started.append(server)
                return server
            if process.poll() is not None:
                raise AssertionError(f"mcphost serve exited with {process.returncode}:\n{text}")
            time.sleep(0.05)
        process.kill()
        raise AssertionError("mcphost serve did not start within 60 s")

    yield start
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(timeout=30)


def plugin_pids(url: str, **headers: str) -> list[int]:
    """Every plugin's pid, once each has one: the plugins no agent uses start after the server listens."""
    deadline = time.monotonic() + 60
    while True:
        view = httpx2.get(f"{url}/v1/runners", headers=headers, timeout=10).json()
        pids = [p["pid"] for p in view["plugins"]]
        if all(isinstance(pid, int) for pid in pids):
            return pids
        assert time.monotonic() < deadline, view
        time.sleep(0.1)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def test_serve_and_send_stream_a_reply_and_sigterm_stops_cleanly(tmp_path: Path, start_server: Any) -> None:
    config = write_config(tmp_path)
    server: Server = start_server("--config", str(config), "--listen", "127.0.0.1:0", "--grace", "2")
    assert "on the uvloop event loop" in server.log()  # installed with the dev group (the `speed` extra)
    sent = mcphost("send", "hello over http", "--url", server.url, "--config", str(config), cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout == "hello over http\n"
    run_id, status = sent.stderr.split()[:2]
    assert status == "completed"
    failed = mcphost("send", "fail", "--conversation", "m1", "--url", server.url, cwd=tmp_path)
    assert failed.returncode == 1
    assert "failed  runner.error" in failed.stderr
    as_json = mcphost("send", "ok", "--conversation", "m2", "--url", server.url, "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    lines = [
        json.loads(line)
        for line in as_json.stdout.splitlines()
        if line.startswith("{") and line.endswith("}")
    ]
    assert [r["type"] for r in lines if "seq" in r] == ["message.completed", "run.completed"]
    refused = mcphost("send", "x", "--agent", "ghost", "--url", server.url, cwd=tmp_path)
    assert refused.returncode == 1
    assert "not_found" in refused.stderr
    # the event goes as JSON: the server, which validates every event, names the field at fault
    invalid = mcphost("send", "x", "--conversation", "c" * 300, "--url", server.url, cwd=tmp_path)
    assert invalid.returncode == 1
    assert invalid.stderr.startswith("mcphost: error: invalid_argument: body.conversation.conversation_id: ")
    assert "Traceback" not in invalid.stderr
    # `grant` prints the address really bound (--listen), not the configured 127.0.0.1:8787 ...
    granted = mcphost("grant", "--conversation", "cli", "--json", "--config", str(config), cwd=tmp_path)
    assert json.loads(granted.stdout)["url"].startswith(f"{server.url}/runs/run_"), granted.stderr
    told = mcphost(
        "grant",
        "--conversation",
        "cli",
        "--json",
        "--url",
        "https://mcp.example",
        "--config",
        str(config),
        cwd=tmp_path,
    )
    assert json.loads(told.stdout)["url"].startswith("https://mcp.example/runs/run_")  # ... unless told

    pids = plugin_pids(server.url)
    # The bundled plugins no agent uses were started once the server listened: all of them are listed.
    listed = httpx2.get(f"{server.url}/v1/runners", timeout=10).json()
    assert {p["name"] for p in listed["plugins"] if p["state"] == "running"} >= {
        "echo",
        "memo",
        "claude-code",
        "codex-agent",
    }
    code, took = server.stop()
    assert code == 0, server.log()
    assert took < 15, server.log()
    assert "mcphost: stopped" in server.log()
    assert not [pid for pid in pids if group_alive(pid)]
    assert not (tmp_path / "data" / "serving.json").exists()
    after = mcphost("grant", "--conversation", "cli", "--json", "--config", str(config), cwd=tmp_path)
    assert json.loads(after.stdout)["url"].startswith("http://127.0.0.1:8787/runs/run_")
    shown = mcphost("show", run_id, "--config", str(config), "--json", cwd=tmp_path)
    assert json.loads(shown.stdout)["run"]["status"] == "completed"


def test_uvloop_can_be_switched_off_and_asyncio_serves_the_same(tmp_path: Path, start_server: Any) -> None:
    config = write_config(tmp_path)
    server: Server = start_server("--config", str(config), "--listen", "127.0.0.1:0", MCPHOST_UVLOOP="false")
    assert "on the asyncio event loop" in server.log()
    sent = mcphost("send", "hello on asyncio", "--url", server.url, cwd=tmp_path)
    assert (sent.returncode, sent.stdout) == (0, "hello on asyncio\n"), sent.stderr
    code, _took = server.stop()
    assert code == 0, server.log()


def test_sigterm_lets_runs_finish_within_the_grace_period_then_cancels_them_and_leaves_no_plugin(
    tmp_path: Path, start_server: Any
) -> None:
    config = write_config(tmp_path)
    grace = 1.5
    server: Server = start_server("--config", str(config), "--listen", "127.0.0.1:0", "--grace", str(grace))
    quick = httpx2.post(f"{server.url}/v1/events", json=_event("slow:0.5", "m1"), timeout=10).json()["run_id"]
    slow = httpx2.post(f"{server.url}/v1/events", json=_event("slow:60", "m2"), timeout=10).json()["run_id"]
    _wait_running(server.url, slow)
    pids = plugin_pids(server.url)
    assert len(pids) >= 3
    # Result streams open across the signal: the drain, not the SSE library, ends them, each with its run.
    streams = {run_id: _Stream(f"{server.url}/v1/runs/{run_id}/results") for run_id in (quick, slow)}

    code, took = server.stop()
    assert code == 0, server.log()
    assert took < grace + 10, server.log()
    assert not [pid for pid in pids if group_alive(pid)], "plugin processes survived the shutdown"
    ends = {run_id: stream.end() for run_id, stream in streams.items()}
    assert ends[quick] == {"run_id": quick, "status": "completed"}
    assert ends[slow]["status"] == "cancelled", ends

    async def runs() -> tuple[Any, Any]:
        url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'mcphost.db'}"
        async with open_stores(url, tmp_path / "data") as stores:
            return await stores.runs.get(quick), await stores.runs.get(slow)

    finished, cancelled = anyio.run(runs)
    assert finished.status is RunStatus.COMPLETED  # it finished within the grace period
    assert cancelled.status is RunStatus.CANCELLED
    assert cancelled.error.details["reason"] == "the host is shutting down"


def test_serve_refuses_a_public_address_without_an_api_key_and_requires_the_key_with_one(
    tmp_path: Path, start_server: Any
) -> None:
    config = write_config(tmp_path)
    refused = mcphost("serve", "--config", str(config), "--listen", "0.0.0.0:0", cwd=tmp_path, timeout=30)
    assert refused.returncode == 2
    assert "Refusing to listen on '0.0.0.0' without an API key" in refused.stderr
    assert "Traceback" not in refused.stderr

    key = "k-" + "x" * 30
    server: Server = start_server("--config", str(config), "--listen", "0.0.0.0:0", MCPHOST_API_KEY=key)
    assert httpx2.get(f"{server.url}/v1/runs", timeout=10).status_code == 401
    without = mcphost("send", "hi", "--url", server.url, cwd=tmp_path)
    assert without.returncode == 1
    assert "unauthorized" in without.stderr
    with_key = mcphost("send", "hi", "--url", server.url, "--api-key-env", "MY_KEY", cwd=tmp_path, MY_KEY=key)
    assert with_key.returncode == 0, with_key.stderr
    assert with_key.stdout == "hi\n"
    assert server.stop()[0] == 0


def test_serve_needs_each_key_variable_and_the_cli_commands_get_what_their_keys_role_allows(
    tmp_path: Path, start_server: Any
) -> None:
    sender, reader = "ci-" + "s" * 30, "ro-" + "r" * 30
    config = write_config(tmp_path)
    digest = hashlib.sha256(reader.encode()).hexdigest()
    with config.open("a", encoding="utf-8") as file:
        file.write(
            '[[api_keys]]\nname = "ci"\nkey_env = "CI_KEY"\nrole = "sender"\n'
            f'[[api_keys]]\nname = "ro"\nkey_sha256 = "{digest}"\nrole = "reader"\n'
        )
    refused = mcphost("serve", "--config", str(config), "--listen", "127.0.0.1:0", cwd=tmp_path, timeout=30)
    assert refused.returncode == 2
    assert "api_keys[0] (name 'ci').key_env: the environment variable 'CI_KEY' is not set" in refused.stderr
    assert "Traceback" not in refused.stderr

    server: Server = start_server("--config", str(config), "--listen", "127.0.0.1:0", CI_KEY=sender)
    sent = mcphost("send", "hi", "--url", server.url, "--json", cwd=tmp_path, MCPHOST_API_KEY=sender)
    assert sent.returncode == 0, sent.stderr
    run_id = json.loads(sent.stdout.splitlines()[-1])["run_id"]
    as_reader = mcphost("send", "hi", "--url", server.url, cwd=tmp_path, MCPHOST_API_KEY=reader)
    assert as_reader.returncode == 1
    assert (
        "unauthorized: POST /v1/events needs a key with the role 'sender'; key 'ro' has the role 'reader'"
        in (as_reader.stderr)
    )
    cancel = mcphost("cancel", run_id, "--url", server.url, cwd=tmp_path, MCPHOST_API_KEY=reader)
    assert cancel.returncode == 1
    assert "needs a key with the role 'operator' (or a 'sender' key, for the runs its events created)" in (
        cancel.stderr
    )
    mine = mcphost("cancel", run_id, "--url", server.url, cwd=tmp_path, MCPHOST_API_KEY=sender)
    assert "conflict: Run" in mine.stderr  # its own run, found: it has ended already
    assert "Traceback" not in as_reader.stderr + cancel.stderr + mine.stderr
    assert sender not in server.log()
    assert reader not in server.log()
    assert server.stop()[0] == 0


def test_send_to_nothing_fails_clearly(tmp_path: Path) -> None:
    done = mcphost("send", "hi", "--url", f"http://127.0.0.1:{free_port()}", cwd=tmp_path)
    assert done.returncode == 1
    assert "cannot reach mcphost at" in done.stderr
    assert "Traceback" not in done.stderr


def test_mcphost_run_serves_the_runs_mcp_endpoint_for_the_command(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    done = mcphost("run", "probe", "--conversation", "p1", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["url"].startswith("http://127.0.0.1:")
    assert not reply["url"].startswith("http://127.0.0.1:8787/")  # an ephemeral port, not the configured one
    assert reply["prompt"] == PROBE_PROMPT
    assert reply["history"] == ["probe"]


def test_grant_prints_working_configs_and_revoke_ends_the_grant(tmp_path: Path, start_server: Any) -> None:
    port = free_port()
    config = write_config(tmp_path, listen=f"127.0.0.1:{port}")
    server: Server = start_server("--config", str(config))
    assert mcphost("send", "first words", "--config", str(config), cwd=tmp_path).returncode == 0

    text = mcphost("grant", "--conversation", "cli", "--ttl", "10m", "--config", str(config), cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    token_line = next(
        line for line in text.stdout.splitlines() if line.startswith("export MCPHOST_RUN_TOKEN=")
    )
    token = token_line.split("=", 1)[1].strip("'")
    text_run = text.stdout.split()[2]  # "Inspection grant run_... on conversation ..."
    assert text.stdout.count(token) == 1  # printed once, marked secret
    assert "SECRET" in text.stdout
    for marker in (
        "claude mcp add-json mcphost",
        "codex -c",
        "[mcp_servers.mcphost]",
        '"servers"',
        '"mcpServers"',
        "mcphost-bridge",
    ):
        assert marker in text.stdout

    made = mcphost("grant", "--conversation", "cli", "--config", str(config), "--json", cwd=tmp_path)
    grant = json.loads(made.stdout)
    assert grant["url"] == f"http://127.0.0.1:{port}/runs/{grant['run_id']}/mcp"
    http_config = grant["configs"]["claude_code"]["http"]["mcp_config"]["mcpServers"]["mcphost"]
    bridge_config = grant["configs"]["claude_code"]["bridge"]["mcp_config"]["mcpServers"]["mcphost"]
    assert (
        grant["configs"]["codex"]["http"]["overrides"][1]
        == 'mcp_servers.mcphost.bearer_token_env_var="MCPHOST_RUN_TOKEN"'
    )
    assert Path(bridge_config["command"]).is_absolute()  # works outside `uv run`, from any directory
    printed_lines = text.stdout.splitlines()
    for form in ("http", "bridge"):  # the guide prints the very lines of the --json document
        for line in (
            grant["configs"]["claude_code"][form]["command"],
            grant["configs"]["codex"][form]["command"],
        ):
            assert line.replace(grant["run_id"], "RUN") in [p.replace(text_run, "RUN") for p in printed_lines]

    async def use_grant() -> tuple[list[str], list[str], list[str]]:
        headers = {
            k: v.replace("${MCPHOST_RUN_TOKEN}", grant["token"]) for k, v in http_config["headers"].items()
        }
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(streamable_http_client(http_config["url"], http_client=http)) as client,  # pyright: ignore[reportArgumentType]
        ):
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            page = await client.call_tool("history_page", {"limit": 10})
            history: list[str] = [item["content"] for item in structured(page)["items"]]
        bridge = StdioServerParameters(
            command=bridge_config["command"],
            args=bridge_config["args"],
            env={"MCPHOST_RUN_TOKEN": grant["token"], "PATH": os.environ.get("PATH", "")},
        )
        async with Client(bridge) as client:
            bridged = sorted(t.name for t in (await client.list_tools()).tools)
        return tools, history, bridged

    tools, history, bridged = anyio.run(use_grant)
    assert tools == sorted(grant["tools"])
    assert "artifacts_create" not in tools  # read-only without --write
    assert history == ["first words", "first words"]
    assert bridged == tools

    narrow = mcphost(
        "grant",
        "--conversation",
        "cli",
        "--tools",
        "history_*",
        "--write",
        "--config",
        str(config),
        "--json",
        cwd=tmp_path,
    )
    assert json.loads(narrow.stdout)["tools"] == ["history_page", "history_search", "run_context"]
    bad = mcphost("grant", "--conversation", "cli", "--ttl", "soon", "--config", str(config), cwd=tmp_path)
    assert bad.returncode == 2
    assert "expected a duration" in bad.stderr

    revoked = mcphost("revoke", grant["run_id"], "--config", str(config), cwd=tmp_path)
    assert revoked.returncode == 0, revoked.stderr
    assert "revoked" in revoked.stderr

    async def refused() -> int:
        # The server's grant cache trusts a lookup for 2 s; the revocation is seen after that.
        status = 0
        async with httpx2.AsyncClient(timeout=10) as http:
            for _ in range(60):
                response = await http.post(
                    grant["url"],
                    headers={
                        "Authorization": f"Bearer {grant['token']}",
                        "Accept": "application/json, text/event-stream",
                    },
                    json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                )
                status = response.status_code
                if status == 401:
                    break
                await anyio.sleep(0.1)
        return status

    assert anyio.run(refused) == 401
    again = mcphost("revoke", grant["run_id"], "--config", str(config), cwd=tmp_path)
    assert "already ended" in again.stderr
    assert server.stop()[0] == 0


def _event(text: str, conversation: str) -> dict[str, Any]:
    return {
        "event_type": "message.received",
        "conversation": {"conversation_id": conversation},
        "input": {"text": text},
    }


class _Stream:
    """A result stream read on its own thread; the constructor returns once the stream is open."""

    def __init__(self, url: str) -> None:
        self.text = ""
        self._open = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(url,), daemon=True)
        self._thread.start()
        assert self._open.wait(60), "the result stream did not open within 60 s"

    def _read(self, url: str) -> None:
        with httpx2.stream("GET", url, timeout=60) as response:
            self._open.set()
            for text in response.iter_text():
                self.text += text

    def end(self) -> dict[str, Any]:
        """The stream's `event: end` data, after the server closed it."""
        self._thread.join(60)
        assert not self._thread.is_alive(), "the result stream was not closed"
        events = parse_sse(self.text)
        assert events[-1].event == "end", self.text
        return events[-1].data


def _wait_running(url: str, run_id: str) -> None:
    for _ in range(300):
        if httpx2.get(f"{url}/v1/runs/{run_id}", timeout=10).json()["run"]["status"] == "running":
            return
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} never started")


async def test_small_answers_are_not_held_back_by_nagle(tmp_path: Path) -> None:
    # asyncio sets TCP_NODELAY on accepted sockets only when the listening socket is IPPROTO_TCP. Without
    # it, each answer written in two pieces (headers, then body) waits for a delayed ACK: ~40 ms a request.
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def thirty_requests(sock: socket.socket) -> float:
        with sock:
            async with serve_http(app, sock) as url, httpx2.AsyncClient() as http:
                assert (await http.get(url)).text == "ok"  # the keep-alive connection is open
                started = time.monotonic()
                for _ in range(30):
                    assert (await http.get(url)).text == "ok"
                return time.monotonic() - started

    ours = bind_socket("127.0.0.1", 0)
    assert ours.proto == socket.IPPROTO_TCP
    # The baseline, measured here on the same machine: a listening socket made the plain way (proto 0),
    # whose accepted sockets keep Nagle on. Load slows both alike; Nagle costs ~40 ms per request.
    plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    plain.bind(("127.0.0.1", 0))
    plain.listen()
    with_nagle = await thirty_requests(plain)
    took = await thirty_requests(ours)
    assert took < with_nagle / 3, f"30 small requests took {took:.2f} s; with Nagle {with_nagle:.2f} s"


class _RecordedSleeps:
    """`asyncio` as uvicorn's server module sees it, with each `sleep` recorded."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, delay: float, result: Any = None) -> Any:
        self.sleeps.append(delay)
        return await asyncio.sleep(delay, result)


async def test_stopping_waits_for_a_response_in_flight_but_not_for_uvicorns_fixed_sleeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stop lets a response being written finish (graceful), closes an idle keep-alive connection, and
    is over once both are gone: uvicorn's own shutdown slept a fixed 0.1 s after asking connections to
    close and 0.1 s per look, which every `mcphost run` paid."""
    recorded = _RecordedSleeps()
    monkeypatch.setattr(uvicorn.server, "asyncio", recorded)
    release = anyio.Event()
    entered = anyio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/slow":
            entered.set()
            await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    answers: list[str] = []
    sock = bind_socket("127.0.0.1", 0)
    with sock:
        async with (
            httpx2.AsyncClient() as idle,
            httpx2.AsyncClient() as busy,
            anyio.create_task_group() as tg,
        ):
            async with serve_http(app, sock) as url:
                assert (await idle.get(url)).text == "ok"  # an idle keep-alive connection stays open

                async def slow() -> None:
                    answers.append((await busy.get(f"{url}/slow")).text)

                tg.start_soon(slow)
                await entered.wait()
                tg.start_soon(_release_soon, release)
            # The block is left with /slow still running: the stop waited for its answer.
            assert answers == ["ok"]
    assert 0.1 not in recorded.sleeps, recorded.sleeps


async def _release_soon(release: anyio.Event) -> None:
    await anyio.sleep(0.05)
    release.set()


async def test_a_host_without_models_or_channels_builds_no_upstream_http_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each client loads a TLS context (~50 ms of a start): only a host with `[models]` or channels needs
    one to reach an upstream."""
    made: list[object] = []
    original = httpx2.AsyncClient.__init__

    def counting(self: httpx2.AsyncClient, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(httpx2.AsyncClient, "__init__", counting)
    settings = host_settings(f"sqlite+aiosqlite:///{tmp_path / 'host.db'}", tmp_path)
    async with open_host(settings) as host:
        assert host.settings.models == {}
    assert made == []


async def test_a_one_shot_hosts_loopback_app_serves_its_runs_endpoints_and_nothing_else(
    database_url: str, tmp_path: Path
) -> None:
    """`mcphost run`'s app (`app.run_app`): no `/v1`, console or health route; the run endpoints keep
    their own checks — another run's token, a foreign Host — with the answers the full app gives."""
    settings = host_settings(database_url, tmp_path)
    async with open_host(settings) as host, serve_locally(host) as url:
        first = (await host.orchestrator.submit(message("one", bot="echo", conversation="c1"), via="cli")).run
        other = (await host.orchestrator.submit(message("two", bot="echo", conversation="c2"), via="cli")).run
        ctx = await host.orchestrator.context(first.run_id)
        assert ctx is not None
        assert ctx.context.mcp is not None
        bearer = ctx.context.mcp.headers["Authorization"]
        listing: dict[str, object] = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        accept = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
        async with httpx2.AsyncClient(base_url=url, timeout=30) as http:
            for path in ("/v1/runs", "/healthz", "/console/", "/metrics"):
                assert (await http.get(path)).status_code == 404, path
            crossed = await http.post(
                f"/runs/{other.run_id}/mcp", json=listing, headers={**accept, "Authorization": bearer}
            )
            assert crossed.status_code == 401
            assert crossed.json()["error"]["message"] == "token does not belong to this run"
            rebound = await http.post(
                f"/runs/{first.run_id}/mcp",
                json=listing,
                headers={**accept, "Authorization": bearer, "Host": "evil.example"},
            )
            assert rebound.status_code == 421
            model = await http.post(
                f"/runs/{other.run_id}/models/anthropic/v1/messages",
                json={"model": "m", "max_tokens": 1, "messages": []},
                headers={"x-api-key": bearer.removeprefix("Bearer ")},
            )
            assert model.status_code == 401
            assert model.json()["error"]["type"] == "authentication_error"
        for run in (first, other):
            assert (await host.orchestrator.wait(run.run_id)).status is RunStatus.COMPLETED
