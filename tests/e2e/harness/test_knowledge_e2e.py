"""The real Claude Code and Codex CLIs use what the host granted their agent: the fake model lists the
knowledge bases, calls `knowledge_retrieve` through the run's MCP server and answers with the chunk it
got back; a configured skill reaches the harness's skill folder and the run context."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness.hostkit import claude_agent, codex_agent, harness_host, message, run_event, unique
from tests.fakes.anthropic import fake_anthropic
from tests.fakes.openai import fake_openai
from tests.fakes.script import Script, ToolCall, calls_then_answers

pytestmark = pytest.mark.slow

FACT = "The staging signing key rotates every 17 days, at 03:00 UTC."


def _harness(name: str) -> tuple[Callable[[Script], AbstractAsyncContextManager[Any]], Callable[..., Any]]:
    return (fake_anthropic, claude_agent) if name == "claude" else (fake_openai, codex_agent)


@pytest.fixture
def docs(tmp_path: Path) -> dict[str, Any]:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "operations.md").write_text(
        f"# Key rotation\n\n{FACT}\n\n# Backups\n\nNightly, kept 30 days.\n"
    )
    (folder / "style.md").write_text("# Writing style\n\nShort sentences. No jargon.\n")
    return {"docs": {"name": "Operations docs", "paths": [str(folder)]}}


@pytest.mark.parametrize("harness", ["claude", "codex"])
async def test_a_harness_answers_from_the_knowledge_base_its_agent_is_granted(
    tmp_path: Path, docs: dict[str, Any], harness: str
) -> None:
    fake_model, make_agent = _harness(harness)
    script = calls_then_answers(
        [
            ToolCall("mcp__mcphost__knowledge_list", {}),
            ToolCall(
                "mcp__mcphost__knowledge_retrieve",
                {"kb_id": "docs", "query": "how often does the staging signing key rotate", "top_k": 2},
            ),
        ],
        "From the docs: {result}",
    )
    async with fake_model(script) as fake:
        agent = make_agent(harness, fake.base_url, tmp_path / "harness")
        agent["resources"] = {"knowledge_bases": ["docs"]}
        async with harness_host(tmp_path, [agent], knowledge=docs) as host:
            report = await host.knowledge.ingest("docs")
            assert sorted(Path(key).name for key in report.added) == ["operations.md", "style.md"]
            assert report.skipped == []
            run = await run_event(host, message(harness, unique("conv"), "How often does the key rotate?"))
            assert run.run.status.value == "completed", run.terminal
            assert [(a.tool, a.outcome) for a in run.audit] == [
                ("knowledge_list", "ok"),
                ("knowledge_retrieve", "ok"),
            ]
            assert "rotates every 17 days" in run.answer
            assert "operations.md" in run.answer  # the chunk names its document


SKILLS = {
    "key-rotation": {
        "display_name": "Key rotation",
        "description": "Use when someone asks when or how signing keys rotate; check the operations docs.",
    }
}


@pytest.mark.parametrize(("harness", "folder"), [("claude", ".claude/skills"), ("codex", ".agents/skills")])
async def test_a_granted_skill_reaches_the_harness_and_the_instructions_prompt(
    tmp_path: Path, harness: str, folder: str
) -> None:
    fake_model, make_agent = _harness(harness)
    script = calls_then_answers([ToolCall("mcp__mcphost__run_context", {})], "Context: {result}")
    async with fake_model(script) as fake:
        agent = make_agent(harness, fake.base_url, tmp_path / "harness")
        agent["resources"] = {"skills": ["key-rotation"]}
        async with harness_host(tmp_path, [agent], skills=SKILLS) as host:
            run = await run_event(host, message(harness, unique("conv"), "When do keys rotate?"))
            assert run.run.status.value == "completed", run.terminal
            assert run.working_directory is not None
            skill_file = Path(run.working_directory) / folder / "key-rotation" / "SKILL.md"
            text = skill_file.read_text()
            assert 'name: "key-rotation"' in text
            assert "# Key rotation" in text
            assert SKILLS["key-rotation"]["description"] in text
            # run_context answered with the same context: the skill is among its resources.
            assert '"skill_name":"key-rotation"' in run.answer.replace(" ", "")
