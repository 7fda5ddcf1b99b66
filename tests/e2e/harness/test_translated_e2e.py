"""The real CLIs on host models of another wire format, translated by the host (the `translate` extra).

Claude Code speaks Anthropic Messages to the run's endpoint and the host calls an OpenAI-compatible
Chat Completions model; Codex speaks Responses and the host calls an Anthropic model. Each completes a
tool call and an answer through the host, with the host's key upstream and every call counted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.harness.hostkit import (
    claude_agent,
    codex_agent,
    harness_host,
    host_model,
    message,
    run_event,
    unique,
)
from tests.fakes.anthropic import INPUT_TOKENS, OUTPUT_TOKENS, fake_anthropic
from tests.fakes.openai_chat import serve_fake_chat
from tests.fakes.script import ToolCall, calls_then_answers

pytestmark = pytest.mark.slow

HOST_KEY_ENV = "MCPHOST_E2E_PROVIDER_KEY"
HOST_KEY = "sk-host-only-translated-e2e"
SAVE = ToolCall("mcp__mcphost__state_set", {"scope": "conversation", "key": "k", "value": "v"})


async def test_claude_code_runs_on_an_openai_compatible_host_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOST_KEY_ENV, HOST_KEY)
    async with serve_fake_chat() as fake:
        fake.answer_with(calls_then_answers([SAVE], "Done: {result}"))
        agent = claude_agent("claude", "http://127.0.0.1:9/unused", tmp_path / "harness", model="host:local")
        agent["resources"] = {"models": ["local"]}
        models = {"local": host_model("openai-compatible", fake.base_url, HOST_KEY_ENV, "llama-fake")}
        async with harness_host(tmp_path, [agent], models=models) as host:
            done = await run_event(host, message("claude", unique("conv"), "Save something."))
            calls = await host.stores.usage.calls(done.run.run_id)
    assert done.run.status.value == "completed", done.terminal["data"]
    assert done.answer.startswith("Done:")
    assert [(a.tool, a.outcome) for a in done.audit] == [("state_set", "ok")]
    assert fake.requests
    assert {r.model for r in fake.requests} == {"llama-fake"}
    assert {r.headers["authorization"] for r in fake.requests} == {f"Bearer {HOST_KEY}"}
    # Claude Code's own tools and the run's MCP tools reached the chat model as functions.
    assert "mcp__mcphost__state_set" in fake.requests_seen[-1].offered_tools
    assert len(calls) == len(fake.requests)
    assert {(c.status, c.api, c.model_id) for c in calls} == {("ok", "anthropic", "local")}
    assert all(c.input_tokens == 10 and c.output_tokens == 5 for c in calls)  # the fake's usage


async def test_codex_runs_on_an_anthropic_host_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOST_KEY_ENV, HOST_KEY)
    async with fake_anthropic(calls_then_answers([SAVE], "Done: {result}")) as fake:
        agent = codex_agent("codex", "http://127.0.0.1:9/unused", tmp_path / "harness", model="host:sonnet")
        agent["resources"] = {"models": ["sonnet"]}
        models = {"sonnet": host_model("anthropic", fake.base_url, HOST_KEY_ENV, "claude-sonnet-4-5")}
        async with harness_host(tmp_path, [agent], models=models) as host:
            done = await run_event(host, message("codex", unique("conv"), "Save something."))
            calls = await host.stores.usage.calls(done.run.run_id)
    assert done.run.status.value == "completed", (done.terminal["data"], fake.other_paths)
    assert done.answer.startswith("Done:")
    assert [(a.tool, a.outcome) for a in done.audit] == [("state_set", "ok")]
    assert fake.requests
    assert {r.path for r in fake.requests} == {"/v1/messages"}
    assert {r.headers["x-api-key"] for r in fake.requests} == {HOST_KEY}
    assert {r.body["model"] for r in fake.requests} == {"claude-sonnet-4-5"}
    assert "mcp__mcphost__state_set" in fake.agent_turns[-1].offered_tools
    assert len(calls) == len(fake.requests)
    assert {(c.status, c.api, c.model_id) for c in calls} == {("ok", "responses", "sonnet")}
    assert sum(c.input_tokens for c in calls) == INPUT_TOKENS * len(calls)
    assert sum(c.output_tokens for c in calls) == OUTPUT_TOKENS * len(calls)
