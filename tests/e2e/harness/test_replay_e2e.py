"""A Claude Code run recorded and replayed: the real CLI against the fake Messages API both times, its
MCP calls answered by the host first and by the recording on the replay; on a host model, its model
calls too, with no model upstream on the replay."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from mcphost.config import Settings, settings_from_mapping
from mcphost.recording import export_recording
from mcphost.replay import replay_document
from tests._json import arr, obj
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
from tests.fakes.openai import fake_openai
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


HOST_KEY_ENV = "MCPHOST_E2E_REPLAY_KEY"
REFUSING_UPSTREAM = "http://127.0.0.1:9"
"""The discard port: nothing listens there, so a connection is refused at once."""


def _host_model_agent(tmp_path: Path, prompt: str) -> dict[str, Any]:
    agent = claude_agent("claude", REFUSING_UPSTREAM, tmp_path / "harness", model="host:sonnet")
    return {**agent, "record": True, "prompt": prompt, "resources": {"models": ["sonnet"]}}


def _replay_settings(
    tmp_path: Path,
    agent: dict[str, Any],
    base_url: str,
    *,
    plugin: tuple[str, str] = ("claude-code", "mcphost_runners.claude_code"),
    model: tuple[str, str, str] = ("sonnet", "anthropic", "claude-sonnet-4-5"),
) -> Settings:
    """The local config of a replay: `agent` on `plugin` (name, module), host model `model` (id,
    provider, upstream name) at `base_url`."""
    model_id, provider, upstream = model
    return settings_from_mapping(
        {
            "host": {"data_dir": str(tmp_path / "unused"), "bundled_plugins": False},
            "plugins": [{"name": plugin[0], "command": [sys.executable, "-m", plugin[1]]}],
            "agents": [agent],
            "models": {model_id: host_model(provider, base_url, HOST_KEY_ENV, upstream)},
        },
        source="<replay e2e>",
        environ={},
    )


async def test_claude_code_on_a_host_model_replays_with_no_model_upstream_and_a_changed_prompt_diverges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOST_KEY_ENV, "sk-ant-replay-host-key")
    turn = calls_then_answers(
        [ToolCall("mcp__mcphost__state_set", {"scope": "conversation", "key": "color", "value": "green"})],
        "Saved: {result}",
    )
    agent = _host_model_agent(tmp_path, "You are a test agent.")
    async with fake_anthropic(turn) as fake:
        models = {"sonnet": host_model("anthropic", fake.base_url, HOST_KEY_ENV, "claude-sonnet-4-5")}
        async with harness_host(tmp_path, [agent], models=models) as host:
            first = await run_event(host, message("claude", unique("conv"), "Remember that I like green."))
            assert first.run.status.value == "completed", first.terminal
            document = await export_recording(host.stores, first.run.run_id)
        upstream_calls = len(fake.requests)
    # The fake upstream is stopped: from here on, no model API answers anywhere.
    model_calls = [c for c in document.calls if c.tool.startswith("models/")]
    assert upstream_calls >= 2
    assert [c.tool for c in model_calls] == ["models/anthropic/v1/messages"] * upstream_calls
    for call in model_calls:
        assert call.outcome == "ok"
        assert len(str(call.arguments["sha256"])) == 64
        assert call.arguments["stream"] is True
        events = [obj(e) for e in arr(call.answer["events"])]
        assert events[0]["event"] == "message_start"
        assert events[-1]["event"] == "message_stop"
        assert call.answer["usage"] == {
            "input_tokens": INPUT_TOKENS,
            "output_tokens": OUTPUT_TOKENS,
            "cached_tokens": 0,
            "model": "claude-sonnet-4-5",
        }
    assert [
        c.tool for c in document.calls if c.tool not in ("tools/list",) and not c.tool.startswith("models/")
    ] == ["state_set"]

    # Replayed with the model's base_url refusing connections and no key in the environment: every model
    # call comes from the recording.
    monkeypatch.delenv(HOST_KEY_ENV)
    report = await replay_document(document, _replay_settings(tmp_path, agent, REFUSING_UPSTREAM))
    assert report.diverged is False, (report.differences, report.unrecorded_calls)
    assert report.status == "completed"

    # A changed prompt: the first model call has no recorded answer; it is reported, not sent upstream.
    async with fake_anthropic(turn) as watching:
        changed = _host_model_agent(tmp_path, "You are a different test agent.")
        diverged = await replay_document(document, _replay_settings(tmp_path, changed, watching.base_url))
    assert watching.requests == []
    assert watching.other_paths == []
    assert diverged.diverged is True
    [unrecorded, *_] = [c for c in diverged.unrecorded_calls if "model_call" in c]
    assert unrecorded["model_call"] == "models/anthropic/v1/messages"
    assert unrecorded["model"] == "sonnet"
    assert unrecorded["changed"] == ["system"]
    assert any(d["aspect"] == "model_call" for d in diverged.differences)


async def test_codex_on_a_host_model_replays_with_no_model_upstream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOST_KEY_ENV, "sk-openai-replay-host-key")
    turn = calls_then_answers(
        [ToolCall("mcp__mcphost__state_set", {"scope": "conversation", "key": "color", "value": "green"})],
        "Saved: {result}",
    )
    agent = codex_agent("codex", REFUSING_UPSTREAM, tmp_path / "harness", model="host:gpt")
    agent = {**agent, "record": True, "resources": {"models": ["gpt"]}}
    async with fake_openai(turn) as fake:
        models = {"gpt": host_model("openai", fake.base_url, HOST_KEY_ENV, "gpt-4o-mini")}
        async with harness_host(tmp_path, [agent], models=models) as host:
            first = await run_event(host, message("codex", unique("conv"), "Remember that I like green."))
            assert first.run.status.value == "completed", first.terminal
            document = await export_recording(host.stores, first.run.run_id)
        upstream_calls = len(fake.requests)
    # The fake upstream is stopped; the replay's model base URL refuses connections; no key is set.
    monkeypatch.delenv(HOST_KEY_ENV)
    model_calls = [c for c in document.calls if c.tool.startswith("models/")]
    assert upstream_calls >= 2
    assert [c.tool for c in model_calls] == ["models/openai/v1/responses"] * upstream_calls
    settings = _replay_settings(
        tmp_path,
        agent,
        REFUSING_UPSTREAM,
        plugin=("codex-agent", "mcphost_runners.codex"),
        model=("gpt", "openai", "gpt-4o-mini"),
    )
    report = await replay_document(document, settings)
    assert report.diverged is False, (report.differences, report.unrecorded_calls)
    assert report.status == "completed"
