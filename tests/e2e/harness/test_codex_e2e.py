"""The real Codex CLI through mcphost: a fake Responses API on 127.0.0.1 calls mcphost tools (offered as
the `mcp__mcphost` namespace) and answers with what they returned; the thread carries over to the next
event through `codex exec resume`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.harness.hostkit import codex_agent, harness_host, message, run_event, unique
from tests.fakes.openai import fake_openai
from tests.fakes.script import ToolCall, calls_then_answers

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("transport", ["http", "bridge"])
async def test_codex_calls_host_tools_answers_with_them_and_resumes_its_thread(
    tmp_path: Path, transport: str
) -> None:
    first_turn = calls_then_answers(
        [
            ToolCall("mcp__mcphost__state_set", {"scope": "conversation", "key": "color", "value": "blue"}),
            ToolCall("mcp__mcphost__state_get", {"scope": "conversation", "key": "color"}),
        ],
        "Saved. Tools said: {results}",
    )
    async with fake_openai(first_turn) as fake:
        agent = codex_agent("codex", fake.base_url, tmp_path / "harness", mcp_transport=transport)
        async with harness_host(tmp_path, [agent]) as host:
            conversation = unique("conv")
            first = await run_event(host, message("codex", conversation, "Remember that I like blue."))
            assert first.run.status.value == "completed", first.terminal

            request = fake.agent_turns[0]
            namespace = [t for t in request.body["tools"] if t.get("type") == "namespace"]
            assert "mcp__mcphost" in [t["name"] for t in namespace]
            assert {"mcp__mcphost__state_set", "mcp__mcphost__history_page"} <= set(request.offered_tools)
            assert request.headers["authorization"] == "Bearer sk-fake-not-a-secret"
            assert [(a.tool, a.outcome) for a in first.audit] == [("state_set", "ok"), ("state_get", "ok")]
            assert [d["tool_name"] for d in first.data("tool.call.completed")] == [
                "mcp__mcphost__state_set",
                "mcp__mcphost__state_get",
            ]
            assert '"value":"blue"' in first.answer.replace(" ", "")
            assert first.answer.startswith("Saved. Tools said:")
            assert first.session_id is not None
            assert first.terminal["data"]["usage"]["input_tokens"] > 0

            fake.script = calls_then_answers(
                [ToolCall("mcp__mcphost__history_page", {"limit": 10})], "Earlier: {result}"
            )
            before = len(fake.requests)
            second = await run_event(host, message("codex", conversation, "What did I say before?"))
            assert second.run.status.value == "completed", second.terminal
            assert second.session_id == first.session_id
            assert "state.updated" not in second.types
            resumed = json.dumps(fake.requests[before].body["input"])
            assert "Remember that I like blue." in resumed  # the thread's earlier turn was resumed
            assert [(a.tool, a.outcome) for a in second.audit] == [("history_page", "ok")]
            assert "Remember that I like blue." in second.answer
