"""Projection on runtimes: a real `mcphost serve` and two real `mcphost runtime` daemons (SQLite file and
PostgreSQL). A run of an agent with a workspace waits for a runtime the host maps that workspace for
(`[runtimes.<name>] workspaces`), then works in that folder on it, with the agent's secret in its
projection (sent in the claim answer only: in no database row and no log line of the host or the
runtimes) and its skill folder's files written into the harness's skills folder there.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from tests.e2e.test_runtimes import LEASE_S, Daemon, cli, results, runtimes, submit, wait_alive, wait_terminal
from tests.faults.test_host_kill import Server
from tests.mcphost.test_projection_runs import (
    PROJECTION,
    PROJECTION_RUNNER,
    SCRIPT,
    SKILL_MD,
    every_row,
    skill_folder,
)

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

SECRET_ENV = "PROJECTION_E2E_SECRET"
"""Not `MCPHOST_*`: the test's servers and daemons drop those from their environment."""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write_config(folder: Path, database_url: str) -> Path:
    skill_folder(folder)
    (folder / "r1-repo").mkdir()
    path = folder / "mcphost.toml"
    path.write_text(
        f'[host]\ndatabase_url = "{database_url}"\ndata_dir = "{folder / "data"}"\nbundled_plugins = false\n'
        f"runtime_lease_s = {LEASE_S}\n"
        f'[[plugins]]\nname = "projection"\ncommand = {json.dumps(PROJECTION)}\n'
        f'[secrets.gh_token]\nenv = "{SECRET_ENV}"\n'
        '[skills.review]\npath = "skills/review"\n'
        f'[runtimes.r1]\nworkspaces = {{ "repo-a" = "{folder / "r1-repo"}" }}\n'
        f'[[agents]]\nid = "repo"\nrunner = "{PROJECTION_RUNNER}"\ntimeout_s = 240\nsecrets = ["gh_token"]\n'
        'workspace = "repo-a"\nmatch = { conversation_id = "c-repo" }\nresources = { skills = ["review"] }\n'
        '[agents.runtime]\nlabels = { pool = "a" }\n'
        f'[[agents]]\nid = "plain"\nrunner = "{PROJECTION_RUNNER}"\ntimeout_s = 240\n'
        'match = { conversation_id = "c-plain" }\n[agents.runtime]\nlabels = { pool = "a" }\n',
        encoding="utf-8",
    )
    return path


async def report(client: httpx2.AsyncClient, run_id: str) -> dict[str, Any]:
    run = await wait_terminal(client, run_id)
    assert run["status"] == "completed", run
    done = next(r for r in await results(client, run_id) if r["type"] == "message.completed")
    return json.loads(done["data"]["message"]["content"])


async def test_a_remote_run_gets_its_workspace_secret_and_skill_files_on_the_runtime_that_has_it(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "e2e-s3cr3t-" + _sha(str(tmp_path))[:24]
    config = write_config(tmp_path, database_url)
    monkeypatch.setenv(SECRET_ENV, secret)
    server = Server(config, tmp_path / "serve.log")  # the host alone has the secret in its environment
    monkeypatch.delenv(SECRET_ENV)
    daemons: list[Daemon] = []
    asked = json.dumps({"vars": ["GH_TOKEN"], "harness": str(tmp_path / "harness-data")})
    try:
        url = await server.ready()
        tokens = {n: cli(config, "runtimes", "add", n, "--labels", "pool=a").strip() for n in ("r1", "r2")}
        async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
            second = Daemon(config, url, tokens["r2"], "r2")  # no [runtimes.r2]: it has no workspace
            daemons.append(second)
            await wait_alive(client, second)

            # r2 runs the plain agent's run, but never claims the run that needs workspace repo-a.
            waiting = await submit(client, asked, "c-repo")
            plain = await report(client, await submit(client, asked, "c-plain"))
            assert plain["env"] == {"GH_TOKEN": None}
            assert plain["workspace"] is None
            assert plain["skills"] == {}
            await anyio.sleep(2 * LEASE_S)
            assert (await client.get(f"/v1/runs/{waiting}")).json()["run"]["status"] not in (
                "completed",
                "failed",
            )
            assert (await runtimes(client))["r2"]["running"] == 0

            # r1 has repo-a: it claims the run, which works there with the secret and the skill's files.
            first = Daemon(config, url, tokens["r1"], "r1")
            daemons.append(first)
            await wait_alive(client, first)
            got = await report(client, waiting)
    finally:
        for daemon in daemons:
            daemon.stop()
        server.process.terminate()
        server.process.wait(timeout=60)

    repo = (tmp_path / "r1-repo").resolve()
    assert got["env"] == {"GH_TOKEN": _sha(secret)}
    assert got["process_env"] == {"GH_TOKEN": False}
    assert got["workspace"] == str(repo)
    assert got["harness_cwd"] == str(repo)
    assert got["skills"] == {"review": ["SKILL.md", "scripts/check.sh"]}
    assert got["harness_files"] == {
        "review/SKILL.md": {"sha256": _sha(SKILL_MD), "executable": False},
        "review/scripts/check.sh": {"sha256": _sha(SCRIPT), "executable": True},
    }
    assert (repo / ".claude" / "skills" / "review" / "SKILL.md").read_text() == SKILL_MD
    assert "skill://review/SKILL.md" in got["resources"]

    for log in [server.log, *(d.log for d in daemons)]:
        assert secret not in log.read_text(errors="replace"), log
    engine = create_async_engine(database_url)
    try:
        assert secret not in await every_row(engine)
    finally:
        await engine.dispose()
