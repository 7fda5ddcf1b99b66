"""A run's projection reaches the harness CLI: the real Claude Code and Codex runners, started on the
replaying stand-in CLI (`tests/fakes/replay_cli.py`), run it in the projected workspace with the
projected secrets in its environment (under the variables mcphost controls) and the skill folders'
files in the harness's skills folder (`.claude/skills/<id>/`, Codex `.agents/skills/<id>/`)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from mcphost.protocol import ProjectedSkill, RunProjection, SkillFile, SkillInfo
from mcphost_runners.claude_code import ClaudeCodeRunner
from mcphost_runners.codex import CodexRunner
from mcphost_runners.harness import HarnessRunner
from tests.fakes.harness_support import harness_context, run_directly
from tests.fakes.replay_cli import write_wrapper

RECORDED = Path(__file__).resolve().parents[1] / "fakes" / "recorded"
SKILL_MD = b"---\nname: review\ndescription: Review.\n---\n# Review\n"
SCRIPT = b"#!/bin/sh\necho checked\n"


def projection(workspace: Path) -> RunProjection:
    files = [
        SkillFile(path="SKILL.md", data=base64.b64encode(SKILL_MD).decode()),
        SkillFile(path="scripts/check.sh", data=base64.b64encode(SCRIPT).decode(), executable=True),
    ]
    return RunProjection(
        env={"GH_TOKEN": "projected-value", "HOME": "/not/mine"},
        workspace=str(workspace),
        workspace_name="repo-a",
        skills=[ProjectedSkill(skill_id="review", files=files)],
    )


async def run_harness(
    runner: HarnessRunner, recording: str, tmp_path: Path, workspace: Path | None
) -> tuple[list[str], dict[str, Any]]:
    captured = tmp_path / "started.json"
    ctx = harness_context(
        "Review the change",
        config={
            "cli_path": str(write_wrapper(tmp_path)),
            "data_dir": str(tmp_path / "data"),
            "environment": {"REPLAY_ARGV": str(captured), "REPLAY_FILE": str(RECORDED / recording)},
        },
    )
    skills = [SkillInfo(skill_name="review", display_name="Review", description="Review a change.")]
    ctx = ctx.model_copy(update={"resources": ctx.resources.model_copy(update={"skills": skills})})
    given = projection(workspace) if workspace is not None else projection(tmp_path / "missing")
    collected = await run_directly(runner, ctx, given)
    started: dict[str, Any] = json.loads(captured.read_text()) if captured.exists() else {}
    return collected.types, started | {"results": collected}


@pytest.mark.parametrize(
    ("runner", "recording", "skills_folder"),
    [
        (ClaudeCodeRunner(), "claude_code_tool_call.jsonl", ".claude/skills"),
        (CodexRunner(), "codex_tool_call.jsonl", ".agents/skills"),
    ],
)
async def test_the_cli_runs_in_the_workspace_with_the_secret_and_the_skill_files(
    tmp_path: Path, runner: HarnessRunner, recording: str, skills_folder: str
) -> None:
    workspace = tmp_path / "repo-a"
    workspace.mkdir()
    types, started = await run_harness(runner, recording, tmp_path, workspace)
    assert types[-1] == "run.completed", started["results"].terminal
    assert started["cwd"] == str(workspace.resolve())
    assert started["env"]["GH_TOKEN"] == "projected-value"
    assert started["env"]["HOME"] != "/not/mine"  # mcphost's own variables win over a projected one
    skill = workspace / skills_folder / "review"
    assert (skill / "SKILL.md").read_bytes() == SKILL_MD
    assert (skill / "scripts" / "check.sh").read_bytes() == SCRIPT
    assert os.access(skill / "scripts" / "check.sh", os.X_OK)
    assert not os.access(skill / "SKILL.md", os.X_OK)


async def test_a_workspace_missing_on_this_machine_fails_the_run_naming_it(tmp_path: Path) -> None:
    types, started = await run_harness(ClaudeCodeRunner(), "claude_code_tool_call.jsonl", tmp_path, None)
    assert types == ["run.failed"]
    failed = started["results"].terminal["data"]
    assert failed["code"] == "invalid_argument"
    assert "workspace 'repo-a' maps to" in failed["message"]
    assert "not an existing folder on this machine" in failed["message"]
    assert "cwd" not in started  # the CLI never started
