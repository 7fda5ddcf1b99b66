"""`examples/claude-code.toml` and `examples/codex.toml` as written, run by `mcphost run` (a subprocess, as
a user runs it) with the real CLIs against a fake model on 127.0.0.1. Only what must change does: the
interpreter, the model endpoint and the pinned CLI's path."""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path

import anyio
import pytest

from mcphost.config import load_settings
from mcphost.protocol import JSONValue
from mcphost_runners.claude_code import ClaudeCodeConfig
from mcphost_runners.codex import CodexConfig, toml_value
from tests.fakes.anthropic import fake_anthropic
from tests.fakes.harness_support import REPO, require_cli
from tests.fakes.openai import fake_openai
from tests.fakes.script import ToolCall, calls_then_answers

pytestmark = pytest.mark.slow
EXAMPLES = REPO / "examples"


async def mcphost(*args: str, cwd: Path, timeout: float = 90) -> tuple[int, str, str]:
    """`mcphost ARGS` in `cwd` with no inherited mcphost configuration: (exit code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPHOST_")}
    with anyio.fail_after(timeout):
        done = await anyio.run_process(
            [sys.executable, "-m", "mcphost.cli", *args], cwd=cwd, env=env, check=False
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def adapted(example: str, *, extra: dict[str, JSONValue], replace: dict[str, str]) -> str:
    text = (EXAMPLES / example).read_text(encoding="utf-8").replace('"python"', json.dumps(sys.executable))
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    # [agents.config] is the last table of both examples: more keys go at its end.
    return text + "".join(f"{key} = {toml_value(value)}\n" for key, value in extra.items())


def test_the_examples_configure_valid_agents() -> None:
    for example, model in (("claude-code.toml", ClaudeCodeConfig), ("codex.toml", CodexConfig)):
        settings = load_settings(EXAMPLES / example, environ={})
        [agent] = settings.agents
        model.model_validate({**agent.config, "prompt": agent.prompt})
        [plugin] = settings.plugins
        assert plugin.env  # the API key reaches the plugin through its own env ...
        assert set(agent.config["pass_env"]) == set(plugin.env)  # ... and the CLI through pass_env


async def test_the_claude_code_example_answers_from_host_tools(tmp_path: Path) -> None:
    example = tomllib.loads((EXAMPLES / "claude-code.toml").read_text(encoding="utf-8"))
    script = calls_then_answers([ToolCall("mcp__mcphost__history_page", {"limit": 5})], "History: {result}")
    async with fake_anthropic(script) as fake:
        config = adapted(
            "claude-code.toml",
            extra={
                "cli_path": str(require_cli("claude")),
                "environment": {"ANTHROPIC_BASE_URL": fake.base_url},
            },
            replace={},
        )
        (tmp_path / "mcphost.toml").write_text(config, encoding="utf-8")
        code, out, err = await mcphost("run", "what did we say?", "--conversation", "c1", cwd=tmp_path)
        assert code == 0, err
        assert out.startswith("History: {")
        [turn] = fake.agent_turns[:1]
        assert turn.headers["x-api-key"] == example["plugins"][0]["env"]["ANTHROPIC_API_KEY"]
        assert "sonnet" in turn.body["model"]  # the alias, resolved by Claude Code
        assert "mcp__mcphost__history_page" in turn.offered_tools
        # A second message in the same conversation resumes the same Claude Code session.
        code, _, err = await mcphost("run", "and now?", "--conversation", "c1", cwd=tmp_path)
        assert code == 0, err
        sessions = {r.headers["x-claude-code-session-id"] for r in fake.agent_turns}
        assert len(sessions) == 1


async def test_the_codex_example_answers_from_host_tools(tmp_path: Path) -> None:
    example = tomllib.loads((EXAMPLES / "codex.toml").read_text(encoding="utf-8"))
    script = calls_then_answers([ToolCall("mcp__mcphost__history_page", {"limit": 5})], "History: {result}")
    async with fake_openai(script) as fake:
        config = adapted(
            "codex.toml",
            extra={"cli_path": str(require_cli("codex"))},
            # A model from Codex's catalog gets the MCP tools behind its tool-search tool, which the fake
            # does not speak: an unknown name offers them directly.
            replace={'"https://api.openai.com/v1"': json.dumps(fake.base_url), '"gpt-5.5"': '"mcphost-fake"'},
        )
        (tmp_path / "mcphost.toml").write_text(config, encoding="utf-8")
        code, out, err = await mcphost("run", "what did we say?", cwd=tmp_path)
    assert code == 0, err
    assert "History:" in out
    [turn, _] = fake.agent_turns
    assert turn.headers["authorization"] == "Bearer " + example["plugins"][0]["env"]["OPENAI_API_KEY"]
    assert "mcp__mcphost__history_page" in turn.offered_tools
