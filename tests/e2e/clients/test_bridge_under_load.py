"""Claude Code with the printed bridged `add-json` config, on a loaded machine, without `MCP_CONNECTION_NONBLOCKING`.

By default Claude Code connects MCP servers in the background and sends its first turn once they are up or
after a short grace; a stdio server that is slow to list its tools (a bridge importing the SDK on a busy host)
missed it, so the first turn went out without mcphost's tools (issue 27: 11 of 15 cold runs under load). The
bridge now lists them within a fraction of a second, so the printed config needs no extra variable: ten cold
`claude -p` runs, with one CPU-burning process per core alongside, each offer the tools on the first turn and
call one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mcphost_runners.claude_code import CLAUDE_DEFAULT_ENV
from tests.e2e.clients.test_printed_configs import CREATE, client_env, granted, run
from tests.e2e.harness.hostkit import FAKE_KEY
from tests.fakes.anthropic import fake_anthropic
from tests.fakes.harness_support import require_cli
from tests.fakes.script import calls_then_answers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # ten Claude Code runs on a machine kept busy

RUNS = 10
BLOCKING_VARIABLE = "MCP_CONNECTION_NONBLOCKING"


@contextmanager
def cpu_burners() -> Generator[None]:
    """One busy-looping process per core until the block ends (stopped by their own pids)."""
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait(10)


async def test_the_printed_bridged_add_json_offers_the_tools_on_every_cold_start_under_load(
    tmp_path: Path,
) -> None:
    claude = str(require_cli("claude"))
    project = tmp_path / "project"
    project.mkdir()
    defaults = {name: value for name, value in CLAUDE_DEFAULT_ENV.items() if name != BLOCKING_VARIABLE}
    async with (
        fake_anthropic(calls_then_answers([CREATE], "Done: {results}")) as fake,
        granted(tmp_path) as (host, grant),
    ):
        env = client_env(
            tmp_path, grant, ANTHROPIC_BASE_URL=fake.base_url, ANTHROPIC_API_KEY=FAKE_KEY, **defaults
        )
        assert BLOCKING_VARIABLE not in env
        await run(["bash", "-c", grant.configs["claude_code"]["bridge"]["command"]], env, project)
        argv = [
            claude,
            "-p",
            "--allowedTools",
            "mcp__mcphost",
            "--permission-mode",
            "dontAsk",
            "--max-turns",
            "4",
        ]
        offered: list[bool] = []
        with cpu_burners():
            for _ in range(RUNS):
                first_turn = len(fake.agent_turns)
                await run([*argv, "--", "Save a note."], env, project)
                assert len(fake.agent_turns) > first_turn, "Claude Code sent no agent turn"
                offered.append("mcp__mcphost__artifacts_create" in fake.agent_turns[first_turn].offered_tools)
        assert offered == [True] * RUNS
        audit = await host.stores.audit.list(grant.run_id, limit=100)
        assert [a.tool for a in audit].count("artifacts_create") == RUNS
