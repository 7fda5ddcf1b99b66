"""Fault: `kill -9` of a real `mcphost serve` in the middle of a burst of events, then a restart.

On a SQLite file and on PostgreSQL. Every event the killed server acknowledged (202 with a run id) must
end in a terminal run: the runs that were queued run on the restarted server, in their conversations'
order; the runs that were running fail `host.restarted`, and submitting their event again (same
`event_id`, the documented retry) runs it as a second attempt linked to the first. At the end no run is
`running` or `queued`: none is left without a live executor.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests._json import obj
from tests.mcphost.hostkit import MISBEHAVE, MISBEHAVE_RUNNER, REPO

pytestmark = pytest.mark.timeout(300)  # two server start-ups and a few seconds of runs, on a loaded machine

CONVERSATIONS = ("k0", "k1", "k2", "k3")
PER_CONVERSATION = 25
KILL_AFTER_ACKS = 12
SLOW_S = 0.5
"""Each run sleeps this long, so runs are running and queued when the server is killed."""
TERMINAL = {"completed", "failed", "cancelled"}


def write_config(tmp_path: Path, database_url: str) -> Path:
    path = tmp_path / "mcphost.toml"
    path.write_text(
        f'[host]\ndatabase_url = "{database_url}"\ndata_dir = "{tmp_path / "data"}"\nbundled_plugins = false\n'
        f'[[plugins]]\nname = "misbehave"\ncommand = {json.dumps(MISBEHAVE)}\n'
        f'[[agents]]\nid = "burst"\nrunner = "{MISBEHAVE_RUNNER}"\n'
        f"match = {{ conversation_id = {json.dumps(list(CONVERSATIONS))} }}\n",
        encoding="utf-8",
    )
    return path


class Server:
    """One `mcphost serve` process on a free port of `address` (loopback unless told)."""

    def __init__(self, config: Path, log: Path, *, listen: str = "127.0.0.1:0") -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCPHOST_")}
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        self.log = log
        with log.open("w") as err:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "mcphost.cli",
                    "serve",
                    "--config",
                    str(config),
                    "--listen",
                    listen,
                ],
                cwd=config.parent,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        self.url = ""

    async def ready(self) -> str:
        with anyio.fail_after(180):  # a hang guard: start-ups on a loaded machine
            while "serving on " not in (text := self.log.read_text(errors="replace")):
                assert self.process.poll() is None, f"mcphost serve exited:\n{text}"
                await anyio.sleep(0.05)
        self.url = text.split("serving on ", 1)[1].split()[0]
        return self.url


def event(conversation: str, index: int) -> dict[str, Any]:
    return {
        "event_id": f"evt-{conversation}-{index:03d}",
        "event_type": "message.received",
        "conversation": {"conversation_id": conversation},
        "actor": {"actor_id": "u1"},
        "input": {"text": f"slow:{SLOW_S}"},
    }


async def listed(client: httpx2.AsyncClient, status: str) -> list[dict[str, Any]]:
    return (await client.get("/v1/runs", params={"status": status})).json()["items"]


async def wait_terminal(client: httpx2.AsyncClient, run_id: str) -> dict[str, Any]:
    with anyio.fail_after(180):
        while True:
            run = (await client.get(f"/v1/runs/{run_id}")).json()["run"]
            if run["status"] in TERMINAL:
                return run
            await anyio.sleep(0.2)


async def test_every_acknowledged_event_ends_in_a_terminal_run_after_kill_9_mid_burst(
    database_url: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path, database_url)
    first = Server(config, tmp_path / "serve-1.log")
    plugin_groups: list[int] = []
    second: Server | None = None
    try:
        url = await first.ready()
        acked: dict[str, dict[str, Any]] = {}  # event_id -> the 202 answer
        killed = anyio.Event()
        killed_at = 0.0

        async with httpx2.AsyncClient(base_url=url, timeout=10) as client:
            plugin_groups += [
                p["pid"] for p in (await client.get("/v1/runners")).json()["plugins"] if p["pid"]
            ]

            async def kill_when_due() -> None:
                nonlocal killed_at
                # Kill while an acknowledged run is early in its sleep: a run about to end could end
                # between the listing and the signal, and a running run whose 202 is still on its way
                # is not in `acked`.
                with anyio.fail_after(60):
                    while True:
                        if len(acked) >= KILL_AFTER_ACKS:
                            mine = {answer["run_id"] for answer in acked.values()}
                            if any(
                                run["run_id"] in mine and time.time() - run["started_at"] < SLOW_S / 2
                                for run in await listed(client, "running")
                            ):
                                break
                        await anyio.sleep(0.01)
                first.process.send_signal(signal.SIGKILL)
                killed_at = time.time()
                killed.set()

            async def post_burst(conversation: str) -> None:
                for index in range(PER_CONVERSATION):
                    if killed.is_set():
                        return
                    body = event(conversation, index)
                    try:
                        response = await client.post("/v1/events", json=body)
                    except httpx2.TransportError:
                        return  # the server is gone: this event was never acknowledged
                    assert response.status_code == 202, response.text
                    acked[body["event_id"]] = response.json()
                    await anyio.sleep(0.02)

            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_when_due)
                for conversation in CONVERSATIONS:
                    tg.start_soon(post_burst, conversation)
        first.process.wait(timeout=30)
        assert first.process.returncode == -signal.SIGKILL
        assert KILL_AFTER_ACKS <= len(acked) < len(CONVERSATIONS) * PER_CONVERSATION

        second = Server(config, tmp_path / "serve-2.log")
        async with httpx2.AsyncClient(base_url=await second.ready(), timeout=10) as client:
            plugin_groups += [
                p["pid"] for p in (await client.get("/v1/runners")).json()["plugins"] if p["pid"]
            ]
            ended = {event_id: await wait_terminal(client, a["run_id"]) for event_id, a in acked.items()}
            restarted = [
                e for e, run in ended.items() if obj(run["error"] or {}).get("code") == "host.restarted"
            ]
            requeued = [
                e
                for e, run in ended.items()
                if run["status"] == "completed" and run["started_at"] > killed_at
            ]
            assert restarted, "no run was running at the kill"
            assert requeued, "no queued run was run again after the restart"
            assert set(restarted) | {e for e, run in ended.items() if run["status"] == "completed"} == set(
                acked
            )

            # Re-queued runs kept their conversation's order: one at a time, oldest admission first.
            for conversation in CONVERSATIONS:
                mine = sorted(
                    (
                        run
                        for e, run in ended.items()
                        if e.startswith(f"evt-{conversation}-") and e in requeued
                    ),
                    key=lambda run: run["created_at"],
                )
                for earlier, later in itertools.pairwise(mine):
                    assert earlier["ended_at"] <= later["started_at"]

            # The documented retry: the same event again. A run that failed host.restarted gets a new,
            # linked attempt; any other acknowledged event gets its run back.
            conversation_of = {e: e.split("-")[1] for e in acked}
            for event_id in restarted:
                index = int(event_id.rsplit("-", 1)[1])
                again = (await client.post("/v1/events", json=event(conversation_of[event_id], index))).json()
                assert again["created"] is True
                retried = await wait_terminal(client, again["run_id"])
                assert retried["status"] == "completed"
                assert (retried["attempt"], retried["previous_run_id"]) == (2, acked[event_id]["run_id"])
                view = (await client.get(f"/v1/runs/{acked[event_id]['run_id']}")).json()
                assert [a["run_id"] for a in view["attempts"]] == [acked[event_id]["run_id"], again["run_id"]]
            some_completed = requeued[0]
            replay = (
                await client.post(
                    "/v1/events",
                    json=event(conversation_of[some_completed], int(some_completed.rsplit("-", 1)[1])),
                )
            ).json()
            assert (replay["created"], replay["run_id"]) == (False, acked[some_completed]["run_id"])

            # Nothing is left running or queued (events admitted but never acknowledged included).
            with anyio.fail_after(180):
                while True:
                    if not await listed(client, "running") and not await listed(client, "queued"):
                        break
                    await anyio.sleep(0.2)
        second.process.send_signal(signal.SIGTERM)
        assert second.process.wait(timeout=60) == 0
    finally:
        for server in (first, second):
            if server is not None and server.process.poll() is None:
                server.process.kill()
                server.process.wait(timeout=30)
        for pgid in plugin_groups:  # the killed server could not stop its plugin
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
