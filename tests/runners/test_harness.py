"""The harness frame: projection files, the working folder, the CLI's environment, finding the CLI,
per-session serialization and config errors (`mcphost_runners/harness.py`, `mcphost_runners/_harness_files.py`)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import anyio
import pytest
from pydantic import ValidationError

from mcphost.protocol import ArtifactRef, MediaContent, Resources, SkillInfo
from mcphost_runners._harness_files import (
    CONTEXT_SCHEMA,
    OutsideRootError,
    context_document,
    inside,
    write_private,
    write_projection,
)
from mcphost_runners.claude_code import ClaudeCodeConfig, ClaudeCodeRunner
from mcphost_runners.codex import CodexConfig, CodexRunner
from mcphost_runners.harness import (
    SESSION_KEY,
    WORKDIR_KEY,
    ExternalSession,
    HarnessConfig,
    SessionLocks,
    harness_environment,
    prepare_workspace,
    prompt_of,
    resolve_cli,
    run_token,
    session_key,
)
from tests.fakes.harness_support import TOKEN, harness_context, run_directly


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- projection ---------------------------------------------------------------------------------------


def test_the_projection_holds_the_run_context_without_the_token(tmp_path: Path) -> None:
    ctx = harness_context("what did we decide?", conversation_state={"topic": "pricing"})
    written = write_projection(ctx, tmp_path)
    assert sorted(p.name for p in written) == ["CONTEXT.md", "agent-context.json"]
    document = json.loads((tmp_path / "agent-context.json").read_text())
    assert document["schema"] == CONTEXT_SCHEMA == "mcphost.external_harness_context.v1"
    assert set(document) == {
        "schema",
        "run_id",
        "event",
        "actor",
        "subject",
        "input",
        "delivery",
        "resources",
        "context",
        "state",
        "runtime",
    }
    assert document["run_id"] == ctx.run_id
    assert document["input"]["text"] == "what did we decide?"
    assert document["state"]["conversation"] == {"topic": "pricing"}
    assert ctx.context.mcp is not None
    assert document["context"]["mcp"]["url"] == ctx.context.mcp.url
    for path in written:
        assert TOKEN not in path.read_text()
        assert mode(path) == 0o600
    markdown = (tmp_path / "CONTEXT.md").read_text()
    assert "what did we decide?" in markdown
    assert "mcp__mcphost__" in markdown


def test_context_document_drops_every_copy_of_the_token() -> None:
    ctx = harness_context()
    assert ctx.context.mcp is not None
    document = context_document(ctx)
    assert TOKEN not in json.dumps(document)
    assert document["context"]["mcp"]["bridge"] == {"command": ctx.context.mcp.bridge.command}


def test_granted_skills_become_skill_files_with_safe_folder_names(tmp_path: Path) -> None:
    ctx = harness_context()
    skills = [
        SkillInfo(
            skill_name="release-notes", display_name="Release notes", description="Write release notes."
        ),
        SkillInfo(skill_name="../../escape", display_name="Escape", description="Tries to leave."),
    ]
    ctx = ctx.model_copy(update={"resources": Resources(skills=skills)})
    write_projection(ctx, tmp_path)
    skill = tmp_path / ".claude" / "skills" / "release-notes" / "SKILL.md"
    assert skill.read_text().startswith(
        '---\nname: "release-notes"\ndescription: "Write release notes."\n---'
    )
    assert (tmp_path / ".claude" / "skills" / "escape" / "SKILL.md").is_file()
    assert not (tmp_path.parent / "escape").exists()


def test_attachments_are_listed_by_id_for_the_harness_to_read() -> None:
    ctx = harness_context("look at this")
    media = MediaContent(type="image", artifact_id="art_1", mime_type="image/png")
    ctx = ctx.model_copy(
        update={
            "input": ctx.input.model_copy(
                update={
                    "contents": [media],
                    "attachments": [ArtifactRef(artifact_id="art_2", mime_type="text/csv")],
                }
            )
        }
    )
    prompt = prompt_of(ctx)
    assert prompt.startswith("look at this")
    assert "art_1 (image/png)" in prompt
    assert "art_2 (text/csv)" in prompt


def test_an_event_without_text_points_the_harness_at_the_context_file() -> None:
    assert "CONTEXT.md" in prompt_of(harness_context(None))


@pytest.mark.parametrize("name", ["../outside.txt", "/etc/passwd", "a/../../outside.txt"])
def test_nothing_is_written_outside_the_root(tmp_path: Path, name: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(OutsideRootError):
        write_private(root, name, "x")
    assert not (tmp_path / "outside.txt").exists()


def test_a_symlink_pointing_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (root / "link").symlink_to(elsewhere)
    with pytest.raises(OutsideRootError):
        inside(root, "link", "file.txt")
    with pytest.raises(OutsideRootError):
        write_private(root, "link/file.txt", "x")
    assert list(elsewhere.iterdir()) == []


def test_an_existing_file_is_rewritten_private(tmp_path: Path) -> None:
    target = tmp_path / "mcp.json"
    target.write_text("old")
    target.chmod(0o644)
    write_private(tmp_path, "mcp.json", "new")
    assert target.read_text() == "new"
    assert mode(target) == 0o600


# -- the working folder and the external session ----------------------------------------------------------


def test_each_run_gets_a_private_folder_under_the_data_dir(tmp_path: Path) -> None:
    ctx = harness_context()
    config = HarnessConfig(data_dir=str(tmp_path / "data"))
    workspace = prepare_workspace(ctx, config, ExternalSession())
    assert workspace.cwd == (tmp_path / "data" / "runs" / ctx.run_id).resolve()
    assert workspace.root == workspace.cwd
    assert not workspace.resumable
    assert mode(workspace.cwd) == 0o700


def test_a_resumed_session_works_in_its_earlier_folder(tmp_path: Path) -> None:
    config = HarnessConfig(data_dir=str(tmp_path))
    first = prepare_workspace(harness_context(), config, ExternalSession())
    session = ExternalSession("sess-1", str(first.cwd))
    second = prepare_workspace(harness_context(), config, session)
    assert second.cwd == first.cwd
    assert second.resumable


def test_a_session_folder_outside_the_runs_folder_is_never_reused(tmp_path: Path) -> None:
    config = HarnessConfig(data_dir=str(tmp_path / "data"))
    foreign = tmp_path / "somewhere-else"
    foreign.mkdir()
    ctx = harness_context()
    workspace = prepare_workspace(ctx, config, ExternalSession("sess-1", str(foreign)))
    assert workspace.cwd == (tmp_path / "data" / "runs" / ctx.run_id).resolve()
    assert not workspace.resumable


def test_a_configured_working_directory_is_used_and_the_projection_kept_per_run(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    ctx = harness_context()
    config = HarnessConfig(data_dir=str(tmp_path / "data"), working_directory=str(project))
    workspace = prepare_workspace(ctx, config, ExternalSession())
    assert workspace.cwd == project.resolve()
    write_projection(ctx, workspace.root, workspace.projection)
    assert (project / ".mcphost" / "runs" / ctx.run_id / "agent-context.json").is_file()
    with pytest.raises(ValueError, match="not an existing folder"):
        prepare_workspace(ctx, HarnessConfig(working_directory=str(tmp_path / "missing")), ExternalSession())


def test_the_session_is_read_from_conversation_state() -> None:
    ctx = harness_context(conversation_state={SESSION_KEY: "abc", WORKDIR_KEY: "/x/runs/run_1"})
    assert ExternalSession.from_state(ctx) == ExternalSession("abc", "/x/runs/run_1")
    assert (
        ExternalSession.from_state(harness_context(conversation_state={SESSION_KEY: 7})) == ExternalSession()
    )


def test_run_token_is_taken_from_the_context() -> None:
    mcp = harness_context().context.mcp
    assert mcp is not None
    assert run_token(mcp) == TOKEN


# -- environment and CLI ----------------------------------------------------------------------------------


def test_the_cli_environment_is_an_allow_list_plus_what_the_agent_names() -> None:
    plugin_env = {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "HOME": "/root",
        "MCPHOST_API_KEY": "host-secret",
        "AWS_SECRET_ACCESS_KEY": "cloud-secret",
        "ANTHROPIC_API_KEY": "from-the-plugin-env",
        "BASH_FUNC_x%%": "() { :; }",
    }
    config = HarnessConfig(
        environment={"ANTHROPIC_BASE_URL": "http://127.0.0.1:1"}, pass_env=["ANTHROPIC_API_KEY"]
    )
    env = harness_environment(
        config, defaults={"DISABLE_TELEMETRY": "1"}, controlled={"HOME": "/private/home"}, source=plugin_env
    )
    assert env == {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "DISABLE_TELEMETRY": "1",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:1",
        "ANTHROPIC_API_KEY": "from-the-plugin-env",
        "HOME": "/private/home",
    }


@pytest.mark.parametrize(
    ("model", "config", "message"),
    [
        (HarnessConfig, {"environment": {"HOME": "/x"}}, "set by the runner"),
        (HarnessConfig, {"pass_env": ["MCPHOST_RUN_TOKEN"]}, "set by the runner"),
        (ClaudeCodeConfig, {"environment": {"CLAUDE_CONFIG_DIR": "/x"}}, "set by the runner"),
        (CodexConfig, {"environment": {"CODEX_HOME": "/x"}}, "set by the runner"),
        (HarnessConfig, {"environment": {"not a name": "x"}}, "not a valid environment variable name"),
        (HarnessConfig, {"extra_mcp_servers": {"mcphost": {}}}, "the run's own server"),
        (CodexConfig, {"config_overrides": {"mcp_servers.mcphost.url": "x"}}, "run's own server"),
        (HarnessConfig, {"mcp_transport": "carrier-pigeon"}, "'http' or 'bridge'"),
        (ClaudeCodeConfig, {"max_turns": 0}, "greater than or equal to 1"),
    ],
)
def test_bad_config_is_refused_with_the_field_named(
    model: type[HarnessConfig], config: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        model.model_validate(config)


async def test_a_run_with_an_unknown_config_key_fails_naming_it(tmp_path: Path) -> None:
    ctx = harness_context(config={"data_dir": str(tmp_path), "temperature": 0.2})
    collected = await run_directly(ClaudeCodeRunner(), ctx)
    assert collected.types == ["run.failed"]
    failed = collected.terminal["data"]
    assert failed["code"] == "invalid_argument"
    assert "config.temperature" in failed["message"]


def test_the_cli_is_found_by_path_then_on_path_then_in_node_modules(tmp_path: Path) -> None:
    tool = tmp_path / "bin" / "claude"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert resolve_cli("claude", str(tool), None) == tool
    assert resolve_cli("claude", str(tmp_path / "missing"), None) is None
    assert resolve_cli("claude", None, str(tool.parent)) == tool
    assert resolve_cli("no-such-cli-anywhere", None, str(tool.parent)) is None
    not_executable = tmp_path / "plain"
    not_executable.write_text("")
    assert resolve_cli("claude", str(not_executable), None) is None


async def test_a_missing_cli_fails_the_run_with_runner_not_found(tmp_path: Path) -> None:
    for runner in (ClaudeCodeRunner(), CodexRunner()):
        ctx = harness_context(config={"data_dir": str(tmp_path), "cli_path": str(tmp_path / "nope")})
        collected = await run_directly(runner, ctx)
        assert collected.types == ["run.failed"]
        assert collected.terminal["data"]["code"] == "runner.not_found"
        assert "npm ci" in collected.terminal["data"]["message"]


async def test_a_run_without_mcp_access_fails_closed(tmp_path: Path) -> None:
    tool = tmp_path / "claude"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    ctx = harness_context(config={"data_dir": str(tmp_path), "cli_path": str(tool)}, mcp_url=None)
    collected = await run_directly(ClaudeCodeRunner(), ctx)
    assert collected.terminal["data"]["code"] == "runner.mcp_unavailable"


# -- serialization per external session ------------------------------------------------------------------


async def test_turns_of_one_session_run_one_at_a_time_and_other_sessions_in_parallel() -> None:
    locks = SessionLocks()
    running: dict[str, int] = {"a": 0, "b": 0}
    peak: dict[str, int] = {"a": 0, "b": 0}

    async def turn(key: str) -> None:
        async with locks.hold(key):
            running[key] += 1
            peak[key] = max(peak[key], running[key])
            await anyio.sleep(0.05)
            running[key] -= 1

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(turn, "a")
                tg.start_soon(turn, "b")
            await anyio.sleep(0.01)
            assert running == {"a": 1, "b": 1}  # one per session, both sessions at once
    assert peak == {"a": 1, "b": 1}
    assert len(locks) == 0  # nothing kept once no turn waits


def test_the_lock_key_is_the_session_once_there_is_one() -> None:
    ctx = harness_context()
    assert session_key("codex", ctx, ExternalSession("t-1")) == "codex:session:t-1"
    assert session_key("codex", ctx, ExternalSession()).startswith("codex:conversation:")
    assert session_key("codex", harness_context(conversation=False), ExternalSession()).startswith(
        "codex:run:"
    )


def test_both_runners_declare_what_they_need() -> None:
    for runner, runner_id in ((ClaudeCodeRunner(), "plugin:mcphost/claude-code/default"),):
        manifest = runner.manifest(author="mcphost", plugin="claude-code")
        assert manifest.id == runner_id
        assert manifest.permissions.state == ["read", "write"]
        assert manifest.capabilities.stateful_session
        assert {f.name for f in manifest.config_schema} >= {
            "cli_path",
            "data_dir",
            "mcp_transport",
            "max_turns",
        }
    manifest = CodexRunner().manifest(author="mcphost", plugin="codex-agent")
    assert manifest.id == "plugin:mcphost/codex-agent/default"
    assert {f.name for f in manifest.config_schema} >= {"cli_path", "base_url", "sandbox", "config_overrides"}


def test_the_process_environment_is_not_changed_by_building_one() -> None:
    before = dict(os.environ)
    harness_environment(HarnessConfig(environment={"X_TEST": "1"}), defaults={}, controlled={"HOME": "/x"})
    assert dict(os.environ) == before
