"""A Claude Code run recorded and replayed: the real CLI against the fake Messages API both times, its
MCP calls answered by the host first and by the recording on the replay."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mcphost.config import settings_from_mapping
from mcphost.recording import export_recording
from mcphost.replay import replay_document
from tests.e2e.harness.hostkit import claude_agent, harness_host, message, run_event, unique
from tests.fakes.anthropic import fake_anthropic
from tests.fakes.script import ToolCall, calls_then_answers

pytestmark = pytest.mark.slow


async def test_a_recorded_claude_code_run_replays_without_divergence(tmp_path: Path) -> None:
    turn = calls_then_answers(
        [
            ToolCall("mcp__mcphost__state_set", {"scope": "conversation", "key": "color", "value": "green"}),
            ToolCall("mcp__mcphost__state_get", {"scope": "conversation", "key": "color"}),
        ],
        "Saved. Tools said: {results}",
    )
    async with fake_anthropic(turn) as fake:
        agent = {**claude_agent("claude", fake.base_url, tmp_path / "harness"), "record": True}
        async with harness_host(tmp_path, [agent]) as host:
            first = await run_event(host, message("claude", unique("conv"), "Remember that I like green."))
            assert first.run.status.value == "completed", first.terminal
            document = await export_recording(host.stores, first.run.run_id)
        tools = [c.tool for c in document.calls]
        assert [t for t in tools if t != "tools/list"] == ["state_set", "state_get"]
        assert "tools/list" in tools

        fake.script = turn
        settings = settings_from_mapping(
            {
                "host": {"data_dir": str(tmp_path / "unused"), "bundled_plugins": False},
                "plugins": [
                    {"name": "claude-code", "command": [sys.executable, "-m", "mcphost_runners.claude_code"]}
                ],
                "agents": [agent],
            },
            source="<replay e2e>",
            environ={},
        )
        report = await replay_document(document, settings)

    assert report.diverged is False, report.differences
    assert report.status == "completed"
