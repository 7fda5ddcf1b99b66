"""Helpers of the runtime e2e tests (test_runtimes.py on loopback, test_runtimes_netns.py across network
namespaces): the host's configuration, `mcphost runtime` daemons as real processes, and polls of the
host's HTTP API for runtimes, runs and their results.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx2

from tests.e2e.httpkit import PROBE, PROBE_RUNNER
from tests.mcphost.hostkit import REPO

LEASE_S = 3.0
TERMINAL = {"completed", "failed", "cancelled"}


def write_config(
    folder: Path, database_url: str, *, lease_s: float = LEASE_S, api_key: str | None = None
) -> Path:
    """A host with the probe plugin and one agent, `remote`, run by runtimes labelled pool=a (`api_key`:
    the admin key /v1 needs, required to listen on anything but loopback)."""
    path = folder / "mcphost.toml"
    key = "" if api_key is None else f"api_key = {json.dumps(api_key)}\n"
    path.write_text(
        f'[host]\ndatabase_url = "{database_url}"\ndata_dir = "{folder / "data"}"\nbundled_plugins = false\n'
        f"runtime_lease_s = {lease_s}\n{key}"
        f'[[plugins]]\nname = "probe"\ncommand = {json.dumps(PROBE)}\n'
        f'[[agents]]\nid = "remote"\nrunner = "{PROBE_RUNNER}"\ntimeout_s = 240\n'
        '[agents.runtime]\nlabels = { pool = "a" }\n',
        encoding="utf-8",
    )
    return path


def cli(config: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPHOST_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-m", "mcphost.cli", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        cwd=config.parent,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


class Daemon:
    """One `mcphost runtime` process in a session of its own (so kill -9 takes its plugins too), started
    through `prefix` when given (`ip netns exec NS`, which execs it: the same process)."""

    def __init__(self, config: Path, url: str, token: str, name: str, prefix: Sequence[str] = ()) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCPHOST_")}
        env["PYTHONPATH"] = str(REPO)
        env["MCPHOST_RUNTIME_TOKEN"] = token
        workdir = config.parent / name
        workdir.mkdir()
        self.name = name
        self.token = token
        self.log = config.parent / f"{name}.log"
        with self.log.open("w") as err:
            self.process = subprocess.Popen(
                [
                    *prefix,
                    sys.executable,
                    "-m",
                    "mcphost.cli",
                    "--log-level",
                    "info",
                    "runtime",
                    "--host",
                    url,
                    "--config",
                    str(config),
                    "--workdir",
                    str(workdir),
                ],
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )

    def logged(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """kill -9 the daemon and everything it started."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


async def runtimes(client: httpx2.AsyncClient) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in (await client.get("/v1/runtimes")).json()["runtimes"]}


async def wait_alive(client: httpx2.AsyncClient, daemon: Daemon) -> None:
    with anyio.fail_after(180):
        while not (await runtimes(client)).get(daemon.name, {}).get("alive"):
            assert daemon.process.poll() is None, daemon.logged()
            await anyio.sleep(0.2)


async def submit(client: httpx2.AsyncClient, text: str, conversation: str) -> str:
    answer = await client.post(
        "/v1/events",
        json={
            "event_type": "message.received",
            "conversation": {"conversation_id": conversation},
            "actor": {"actor_id": "u1"},
            "input": {"text": text},
        },
    )
    assert answer.status_code == 202, answer.text
    return answer.json()["run_id"]


async def wait_terminal(client: httpx2.AsyncClient, run_id: str, timeout: float = 180) -> dict[str, Any]:
    with anyio.fail_after(timeout):
        while True:
            run = (await client.get(f"/v1/runs/{run_id}")).json()["run"]
            if run["status"] in TERMINAL:
                return run
            await anyio.sleep(0.1)


async def results(client: httpx2.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    page = await client.get(f"/v1/runs/{run_id}/results", headers={"accept": "application/json"})
    return page.json()["results"]


def messages(stored: list[dict[str, Any]]) -> list[str]:
    """The text of each `message.completed` result, in order."""
    return [r["data"]["message"]["content"] for r in stored if r["type"] == "message.completed"]


async def wait_file(path: Path, *, not_equal: str | None = None, timeout: float = 180) -> str:
    found = anyio.Path(path)
    with anyio.fail_after(timeout):
        while True:
            if await found.exists() and (text := await found.read_text()) != not_equal:
                return text
            await anyio.sleep(0.1)


INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
)


async def mcp_status(client: httpx2.AsyncClient, run_id: str, token: str) -> int:
    answer = await client.post(
        f"/runs/{run_id}/mcp",
        content=INITIALIZE,
        headers={
            "authorization": f"Bearer {token}",
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
        },
    )
    return answer.status_code
