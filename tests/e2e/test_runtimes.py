"""A real `mcphost serve` and two real `mcphost runtime` daemons on 127.0.0.1, on a SQLite file and on
PostgreSQL: a remote run completes (its runner reaching the host's MCP server with the claim's token), a
cancel reaches a remote run, `kill -9` of the runtime running a run sends it to the other runtime where
it completes once (the killed claim's MCP token refused meanwhile), and a drained runtime claims nothing.

The same daemons across a real network link (network namespaces, a link taken down mid-run, a short
outage) are test_runtimes_netns.py; the helpers both use are runtimes.py.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import anyio
import httpx2
import pytest

from tests.e2e.httpkit import PROBE_RUNNER
from tests.e2e.runtimes import (
    LEASE_S,
    Daemon,
    cli,
    mcp_status,
    messages,
    results,
    runtimes,
    submit,
    wait_alive,
    wait_file,
    wait_terminal,
    write_config,
)
from tests.faults.test_host_kill import Server

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

CANCEL_GRACE_S = 5.0
"""The orchestrator's grace for a cancelled runner: a remote run that ends sooner was stopped by its
runtime, not cut off by the host."""


async def test_runs_move_between_two_real_runtimes(database_url: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, database_url)
    server = Server(config, tmp_path / "serve.log")
    daemons: list[Daemon] = []
    try:
        url = await server.ready()
        tokens = {
            name: cli(config, "runtimes", "add", name, "--labels", "pool=a").strip() for name in ("r1", "r2")
        }
        async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
            first = Daemon(config, url, tokens["r1"], "r1")
            daemons.append(first)
            await wait_alive(client, first)
            assert (await runtimes(client))["r1"]["capabilities"]["runners"] == [PROBE_RUNNER]

            # 1. A remote run completes; its runner used the host's MCP server with its claim's token.
            run_id = await submit(client, "probe", "c-probe")
            run = await wait_terminal(client, run_id)
            assert run["status"] == "completed", run
            reply = json.loads(
                next(r for r in await results(client, run_id) if r["type"] == "message.completed")["data"][
                    "message"
                ]["content"]
            )
            assert "run_context" in reply["tools"]
            assert reply["url"] == f"{url}/runs/{run_id}/mcp"

            # 1b. Its runner's stderr is kept as an artifact of the run; the run says where it ran.
            run_id = await submit(client, "stderr:hello from the runner", "c-stderr")
            assert (await wait_terminal(client, run_id))["status"] == "completed"
            placement = (await client.get(f"/v1/runs/{run_id}/runtime")).json()["runtime"]
            assert (placement["runtime_name"], placement["fence"], placement["state"]) == ("r1", 1, "ended")
            assert [e["event"] for e in placement["events"]] == ["queued", "claimed", "output", "ended"]
            output = await client.get(f"/v1/artifacts/{placement['output_artifact_id']}/content")
            assert f"hello from the runner ({run_id})\n" in output.text
            shown = cli(config, "show", run_id)
            assert f"ran on runtime r1 ({placement['runtime_id']})  attempt 1  fence 1  [ended]" in shown
            assert f"output {placement['output_artifact_id']}" in shown

            # 2. A cancel reaches the remote run: the runtime stops its runner before the host's grace.
            held = tmp_path / "held.token"
            run_id = await submit(client, f"keep:120:{held}", "c-cancel")
            await wait_file(held)
            started = time.monotonic()
            assert (
                await client.post(f"/v1/runs/{run_id}/cancel", json={"reason": "stop"})
            ).status_code == 202
            run = await wait_terminal(client, run_id)
            took = time.monotonic() - started
            assert run["status"] == "cancelled", run
            assert took < CANCEL_GRACE_S, (
                f"the cancel took {took:.2f} s: the runtime never stopped the runner"
            )
            print(f"cancel reached the remote run and ended it in {took:.2f} s")

            # 3. kill -9 of the runtime running a run: requeued, completed once on the other runtime.
            second = Daemon(config, url, tokens["r2"], "r2")
            daemons.append(second)
            await wait_alive(client, second)
            kept = tmp_path / "kept.token"
            run_id = await submit(client, f"keep:6:{kept}", "c-kill")
            old_token = await wait_file(kept)
            holders = [d for d in daemons if (await runtimes(client))[d.name]["running"] == 1]
            assert len(holders) == 1
            victim = holders[0]
            survivor = next(d for d in daemons if d is not victim)
            killed_at = time.monotonic()
            victim.kill()
            new_token = await wait_file(kept, not_equal=old_token)
            moved_in = time.monotonic() - killed_at
            assert await mcp_status(client, run_id, old_token) == 401, (
                "the killed claim's MCP token is fenced out"
            )
            assert await mcp_status(client, run_id, new_token) == 200
            run = await wait_terminal(client, run_id)
            assert run["status"] == "completed", run
            stored = await results(client, run_id)
            assert messages(stored) == ["kept"]
            assert sum(r["type"] in ("run.completed", "run.failed") for r in stored) == 1
            print(f"after kill -9, the run was running again on {survivor.name} within {moved_in:.2f} s")

            # 4. A drained runtime claims nothing new; enabled again, it takes the waiting run.
            drained = await client.post(f"/v1/runtimes/{survivor.name}/drain")
            assert drained.json()["state"] == "draining"
            run_id = await submit(client, "after drain", "c-drain")
            await anyio.sleep(LEASE_S)
            assert (await client.get(f"/v1/runs/{run_id}")).json()["run"]["status"] == "running"
            assert (await runtimes(client))[survivor.name]["running"] == 0
            await client.post(f"/v1/runtimes/{survivor.name}/enable")
            run = await wait_terminal(client, run_id)
            assert run["status"] == "completed", run
    finally:
        for daemon in daemons:
            daemon.stop()
        if server.process.poll() is None:
            server.process.send_signal(signal.SIGTERM)
            server.process.wait(timeout=60)
