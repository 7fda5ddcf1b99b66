"""A host restart with runs in flight on runtimes loses nothing: a real `mcphost serve` is killed -9 (or
stopped with SIGTERM) while a real `mcphost runtime` executes one of its runs (and holds another in the
queue), the runner
keeps producing results while no host answers, and a new `mcphost serve` on the same port and
database adopts both runs: the runtime's buffered results arrive once and in order, its claim's MCP
token still works, and each run ends once — none `host.restarted`. On a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import signal
import socket
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.e2e.test_runtimes import (
    LEASE_S,
    Daemon,
    cli,
    mcp_status,
    results,
    submit,
    wait_alive,
    wait_file,
    wait_terminal,
    write_config,
)
from tests.faults.test_host_kill import Server

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def texts(stored: list[dict[str, Any]]) -> list[str]:
    """The run's streamed and final texts, in stream order."""
    found: list[str] = []
    for result in stored:
        if result["type"] == "message.delta":
            found.append(result["data"]["chunk"]["content"])
        elif result["type"] == "message.completed":
            found.append(result["data"]["message"]["content"])
    return found


async def wait_results(client: httpx2.AsyncClient, run_id: str, count: int) -> list[dict[str, Any]]:
    """The run's results once at least `count` are stored."""
    with anyio.fail_after(180):
        while True:
            if len(stored := await results(client, run_id)) >= count:
                return stored
            await anyio.sleep(0.1)


async def kept_results_arrived(client: httpx2.AsyncClient, run_id: str) -> None:
    """The results the runtime kept while no host answered arrived once, in order."""
    stored = await wait_results(client, run_id, 4)
    assert texts(stored) == ["step 1", "step 2", "step 3", "step 4"], stored


async def completed_once(client: httpx2.AsyncClient, run_id: str) -> None:
    """The `steps:` run completed, every result once and in order, one terminal result."""
    run = await wait_terminal(client, run_id)
    assert run["status"] == "completed", run
    stored = await results(client, run_id)
    assert texts(stored) == ["step 1", "step 2", "step 3", "step 4", "stepped"], stored
    assert [r["seq"] for r in stored] == list(range(1, len(stored) + 1))
    assert sum(r["type"] in ("run.completed", "run.failed") for r in stored) == 1
    assert not any("host.restarted" in str(r) for r in stored)


def stop(server: Server) -> None:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=60)


@pytest.mark.parametrize("how", ["kill -9", "SIGTERM"])
async def test_a_host_restarted_on_the_same_database_loses_no_remote_run(
    database_url: str, tmp_path: Path, how: str
) -> None:
    config = write_config(tmp_path, database_url)
    listen = f"127.0.0.1:{free_port()}"
    first = Server(config, tmp_path / "serve-1.log", listen=listen)
    second: Server | None = None
    daemon: Daemon | None = None
    steps = tmp_path / "steps.token"
    try:
        url = await first.ready()
        token = cli(config, "runtimes", "add", "r1", "--labels", "pool=a").strip()
        async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
            daemon = Daemon(config, url, token, "r1")  # one slot: the second run waits in the queue
            await wait_alive(client, daemon)
            held = await submit(client, f"steps:{steps}", "c-held")
            mcp_token = await wait_file(steps)
            assert texts(await wait_results(client, held, 1)) == ["step 1"]
            waiting = await submit(client, "after the restart", "c-waiting")
            assert (await client.get(f"/v1/runs/{waiting}")).json()["run"]["status"] == "running"

            if how == "kill -9":  # nothing of the host's shutdown runs
                first.process.kill()
            else:  # a graceful stop drains local runs, and leaves remote ones to the next host
                first.process.send_signal(signal.SIGTERM)
            first.process.wait(timeout=60)
            if how == "SIGTERM":
                log = (tmp_path / "serve-1.log").read_text()
                assert "2 run(s) executing on runtimes left running there" in log, log
            (tmp_path / "steps.token.release").write_text("")
            await wait_file(tmp_path / "steps.token.produced")
            await anyio.sleep(LEASE_S + 1)  # the claim's lease lapses while no host answers

            second = Server(config, tmp_path / "serve-2.log", listen=listen)
            assert await second.ready() == url
            await kept_results_arrived(client, held)
            assert (await client.get(f"/v1/runs/{held}")).json()["run"]["status"] == "running"
            assert await mcp_status(client, held, mcp_token) == 200, "the claim's MCP token still works"
            (tmp_path / "steps.token.finish").write_text("")

            await completed_once(client, held)

            # The run still queued for a runtime was adopted too and claimed once the slot was free.
            run = await wait_terminal(client, waiting)
            assert run["status"] == "completed", run
            assert texts(await results(client, waiting)) == ["after the restart"]
            log = (tmp_path / "serve-2.log").read_text()
            assert "2 re-adopted (running on runtimes)" in log, log
    finally:
        if daemon is not None:
            daemon.stop()
        for server in (first, second):
            if server is not None:
                stop(server)


async def test_a_live_replica_adopts_the_remote_runs_of_a_replica_that_died(
    database_url: str, tmp_path: Path
) -> None:
    """Two replicas on PostgreSQL; the runtime talks to the second only. The first admits and follows a
    run, is killed -9 mid-run, and the second — alive all along — adopts the run: the results the
    runtime produced meanwhile arrive once, in order, and the run ends once."""
    if not database_url.startswith("postgresql"):
        pytest.skip("replicas share a PostgreSQL database")
    config = write_config(tmp_path, database_url)
    first = Server(config, tmp_path / "serve-1.log")
    second = Server(config, tmp_path / "serve-2.log")
    daemon: Daemon | None = None
    steps = tmp_path / "steps.token"
    try:
        url = await first.ready()
        other = await second.ready()
        token = cli(config, "runtimes", "add", "r1", "--labels", "pool=a").strip()
        async with (
            httpx2.AsyncClient(base_url=url, timeout=30) as admitting,
            httpx2.AsyncClient(base_url=other, timeout=30) as client,
        ):
            daemon = Daemon(config, other, token, "r1")
            await wait_alive(client, daemon)
            held = await submit(admitting, f"steps:{steps}", "c-held")  # the first replica follows it
            await wait_file(steps)
            assert texts(await wait_results(client, held, 1)) == ["step 1"]

            first.process.kill()
            first.process.wait(timeout=30)
            (tmp_path / "steps.token.release").write_text("")
            await kept_results_arrived(client, held)
            (tmp_path / "steps.token.finish").write_text("")

            await completed_once(client, held)
            log = (tmp_path / "serve-2.log").read_text()
            assert "1 run(s) executing on runtimes for stopped host(s)" in log, log
    finally:
        if daemon is not None:
            daemon.stop()
        for server in (first, second):
            stop(server)
