"""memo as the quickstart's default agent, end to end through the real host: `mcphost run` in a fresh
directory (embedded default config, SQLite under ./.mcphost/) serving each run's MCP endpoint on an
ephemeral loopback port, memo reading and writing host facts through it."""

from __future__ import annotations

from pathlib import Path

from mcphost.stores import open_stores
from tests.examples.clikit import mcphost


async def test_the_quickstart_counts_turns_and_quotes_what_was_said_earlier(tmp_path: Path) -> None:
    code, first, err = await mcphost("run", "hello", cwd=tmp_path)
    assert code == 0, err
    assert first.startswith("Turn 1. I heard “hello”. Nothing earlier in this conversation yet")
    code, second, err = await mcphost("run", "tea or coffee?", cwd=tmp_path)
    assert code == 0, err
    assert second.startswith("Turn 2. I heard “tea or coffee?”. You said “hello” earlier.\n")
    assert second.endswith("over MCP with state_get, history_page, history_search, state_set.)\n")
    assert "completed  agent=default" in err

    # The facts really came over the per-run MCP endpoint: the host audited every call.
    data = tmp_path / ".mcphost"
    async with open_stores(f"sqlite+aiosqlite:///{data / 'mcphost.db'}", data) as stores:
        [run] = (await stores.runs.list(limit=1)).items
        audit = await stores.audit.list(run.run_id, limit=100)
        transcript = (await stores.transcript.page("cli", None, limit=100)).items
    assert run.runner_id == "plugin:mcphost/memo/default"
    assert [(a.tool, a.outcome) for a in audit] == [
        ("state_get", "ok"),
        ("history_page", "ok"),
        ("history_search", "ok"),
        ("state_set", "ok"),
    ]
    assert [t.role for t in transcript] == ["assistant", "user", "assistant", "user"]  # newest first
    assert transcript[0].content == second.removesuffix("\n")
