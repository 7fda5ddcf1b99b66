"""Two real `mcphost serve` processes on one database, for the replica tests (`replicas` in conftest.py).

One configuration serves every replica test: the probe plugin only (no bundled runners: nothing here
runs them, and each would be one more process per server to start on a loaded machine), and two probe
agents told apart by conversation, `probe` (conversation `r1`, granted a knowledge base and a skill)
and `warm` (conversation `w1`, `warm = true`). Both servers start at once and are stopped at once.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio
import httpx2

from tests.e2e.httpkit import PROBE, PROBE_PROMPT, PROBE_RUNNER
from tests.faults.test_host_kill import Server

CONTEXT_CONVERSATION = "r1"
"""Runs the `probe` agent, granted the `handbook` knowledge base and the `triage` skill."""
WARM_CONVERSATION = "w1"
"""Runs the `warm` agent (`warm = true`)."""


def write_config(folder: Path, database_url: str) -> Path:
    path = folder / "mcphost.toml"
    path.write_text(
        f'[host]\ndatabase_url = "{database_url}"\ndata_dir = "{folder / "data"}"\nbundled_plugins = false\n'
        f'[[plugins]]\nname = "probe"\ncommand = {json.dumps(PROBE)}\n'
        '[knowledge.handbook]\nname = "Handbook"\ndescription = "How we work"\n'
        '[skills.triage]\ndisplay_name = "Ticket triage"\ndescription = "Sort new tickets by urgency."\n'
        f'[[agents]]\nid = "probe"\nrunner = "{PROBE_RUNNER}"\nprompt = "{PROBE_PROMPT}"\n'
        f'match = {{ conversation_id = "{CONTEXT_CONVERSATION}" }}\n'
        'resources = { knowledge_bases = ["handbook"], skills = ["triage"] }\n'
        f'[[agents]]\nid = "warm"\nrunner = "{PROBE_RUNNER}"\nprompt = "{PROBE_PROMPT}"\n'
        f'match = {{ conversation_id = "{WARM_CONVERSATION}" }}\nconfig = {{ warm = true }}\n',
        encoding="utf-8",
    )
    return path


@dataclass(frozen=True)
class Replicas:
    """Two `mcphost serve` processes of one configuration (and so one database), both serving."""

    config: Path
    database_url: str
    first: Server
    second: Server

    @property
    def urls(self) -> tuple[str, str]:
        return self.first.url, self.second.url

    def stop(self) -> None:
        """SIGTERM both (a graceful stop) and wait for both; a no-op for one already stopped."""
        running = [s for s in (self.first, self.second) if s.process.poll() is None]
        for server in running:
            server.process.send_signal(signal.SIGTERM)
        for server in running:
            server.process.wait(timeout=60)


async def start_replicas(folder: Path, database_url: str) -> Replicas:
    """Start both servers together and wait until both serve (the caller stops them)."""
    config = write_config(folder, database_url)
    replicas = Replicas(
        config, database_url, Server(config, folder / "serve-1.log"), Server(config, folder / "serve-2.log")
    )
    try:
        await replicas.first.ready()
        await replicas.second.ready()
    except BaseException:
        replicas.stop()
        raise
    return replicas


async def start_held_run(
    api: httpx2.AsyncClient, conversation: str, mode: Literal["keep", "warm"], path: Path
) -> tuple[str, str]:
    """Start a probe run in `conversation` that writes to `path` and stays running (the `keep:` and
    `warm:` modes of probe_plugin.py); its run id and what it wrote, once written."""
    event = {
        "event_type": "message.received",
        "conversation": {"conversation_id": conversation},
        "input": {"text": f"{mode}:120:{path}"},
    }
    run_id: str = (await api.post("/v1/events", json=event)).json()["run_id"]
    written = anyio.Path(path)  # renamed into place by the plugin: never seen half written
    with anyio.fail_after(120):  # a hang guard: a plugin start on a loaded machine
        while not await written.exists():  # noqa: ASYNC110  # written by the plugin's process
            await anyio.sleep(0.05)
    return run_id, await written.read_text()
