"""The real Claude Code CLI through mcphost: a fake Messages API on 127.0.0.1 calls mcphost tools over the
per-run MCP server and answers with what they returned; the session carries over to the next event."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.harness.hostkit import claude_agent, harness_host, message, run_event, unique
from tests.fakes.anthropic import fake_anthropic
from tests.fakes.script import ToolCall, calls_then_answers

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("transport", ["http", "bridge"])
async def test_claude_code_calls_host_tools_answers_with_them_and_resumes_its_session(
    tmp_path: Path, transport: str
) -> None:
    first_turn = calls_then_answers(
        [
            ToolCall("mcp__mcphost__state_set", {"scope": "conversation", "key": "color", "value": "green"}),
            ToolCall("mcp__mcphost__state_get", {"scope": "conversation", "key": "color"}),
        ],
        "Saved. Tools said: {results}",
    )
    async with fake_anthropic(first_turn) as fake:
        agent = claude_agent("claude", fake.base_url, tmp_path / "harness", mcp_transport=transport)
        async with harness_host(tmp_path, [agent]) as host:
            conversation = unique("conv")
            first = await run_event(host, message("claude", conversation, "Remember that I like green."))
            assert first.run.status.value == "completed", first.terminal

            # The tools reached the model under the harness's names, and ran through mcphost.
            offered = fake.agent_turns[0].offered_tools
            assert {
                "mcp__mcphost__state_set",
                "mcp__mcphost__state_get",
                "mcp__mcphost__history_page",
            } <= set(offered)
            assert [(a.tool, a.outcome) for a in first.audit] == [("state_set", "ok"), ("state_get", "ok")]
            assert [d["tool_name"] for d in first.data("tool.call.completed")] == [
                "mcp__mcphost__state_set",
                "mcp__mcphost__state_get",
            ]
            assert '"value":"green"' in first.answer.replace(" ", "")
            assert first.answer.startswith("Saved. Tools said:")
            assert first.session_id is not None
            assert first.working_directory is not None
            assert (Path(first.working_directory) / "agent-context.json").is_file()
            usage = first.terminal["data"]["usage"]
            assert usage["output_tokens"] > 0
            assert usage["cost_usd"] is not None

            # The second event resumes the same session and reads the first turn back from history.
            fake.script = calls_then_answers(
                [ToolCall("mcp__mcphost__history_page", {"limit": 10})], "Earlier: {result}"
            )
            before = len(fake.requests)
            second = await run_event(host, message("claude", conversation, "What did I say before?"))
            assert second.run.status.value == "completed", second.terminal
            assert second.session_id == first.session_id
            assert second.working_directory == first.working_directory
            assert "state.updated" not in second.types  # the same session: nothing to save again
            resumed = fake.requests[before]
            assert resumed.headers["x-claude-code-session-id"] == first.session_id
            assert "Remember that I like green." in json.dumps(resumed.body["messages"])
            assert [(a.tool, a.outcome) for a in second.audit] == [("history_page", "ok")]
            assert "Remember that I like green." in second.answer
            assert "Saved. Tools said:" in second.answer  # the first answer is in the history too
