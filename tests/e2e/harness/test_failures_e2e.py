"""Failure paths of the harness runners through mcphost, each on its own, with the real CLIs where the
failure is the CLI's: not installed, crashing, hanging past the deadline (no process of its group
survives), an MCP server it cannot reach (fail closed), a tool permission denied, malformed stream lines."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from mcphost.app import Host
from mcphost.common.procgroup import group_alive, group_members
from tests.e2e.harness.hostkit import (
    CLAUDE_RUNNER,
    CODEX_RUNNER,
    Finished,
    claude_agent,
    codex_agent,
    harness_host,
    message,
    run_event,
    unique,
)
from tests.fakes import noisy_cli
from tests.fakes.anthropic import fake_anthropic
from tests.fakes.harness_support import require_cli
from tests.fakes.openai import fake_openai
from tests.fakes.script import Hang, ModelRequest, Reply, Script, Text, ToolCall, always, calls_then_answers

pytestmark = pytest.mark.slow
HARNESSES = ["claude", "codex"]


def fake_for(harness: str) -> Any:
    return fake_anthropic if harness == "claude" else fake_openai


def agent_for(harness: str, base_url: str, tmp_path: Path, **config: Any) -> dict[str, Any]:
    make = claude_agent if harness == "claude" else codex_agent
    return make(harness, base_url, tmp_path / "harness", **config)


@asynccontextmanager
async def served(
    harness: str, script: Script, tmp_path: Path, **config: Any
) -> AsyncGenerator[tuple[Any, Host]]:
    """A fake model for `harness` and a host with one agent on it (bot id = the harness's name)."""
    async with (
        fake_for(harness)(script) as fake,
        harness_host(tmp_path, [agent_for(harness, fake.base_url, tmp_path, **config)]) as host,
    ):
        yield fake, host


def processes_with(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains `marker`."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


async def test_a_cli_that_is_not_installed_fails_the_run_with_runner_not_found(tmp_path: Path) -> None:
    # The bundled registration: no [[plugins]] entry, the host's own claude-code and codex-agent plugins.
    agents = [
        {"id": "claude", "runner": CLAUDE_RUNNER, "match": {"bot_id": "claude"}, "config": {}},
        {"id": "codex", "runner": CODEX_RUNNER, "match": {"bot_id": "codex"}, "config": {}},
    ]
    for agent in agents:
        agent["config"] = {
            "cli_path": str(tmp_path / "not-installed" / "cli"),
            "data_dir": str(tmp_path / "h"),
        }
    async with harness_host(tmp_path, agents, bundled=True) as host:
        for agent_id in ("claude", "codex"):
            done = await run_event(host, message(agent_id, unique("conv"), "hello"))
            assert done.run.status.value == "failed"
            assert done.run.error is not None
            assert done.run.error.code == "runner.not_found"
            assert "npm ci" in done.run.error.message
            assert done.transcript == [("user", "hello")]


def kill_the_cli(marker: str) -> Script:
    """A model that, asked for its first agent turn, SIGKILLs the CLI that asked (found by `marker` in its
    command line) and never answers."""

    def script(request: ModelRequest) -> Reply:
        if request.is_agent_turn:
            for pid in processes_with(marker):
                os.kill(pid, signal.SIGKILL)
        return Hang()

    return script


@pytest.mark.parametrize("harness", HARNESSES)
async def test_a_cli_that_crashes_fails_the_run_with_runner_crashed(tmp_path: Path, harness: str) -> None:
    marker = unique("crash-marker")
    async with served(harness, kill_the_cli(marker), tmp_path) as (_, host):
        done = await run_event(host, message(harness, unique("conv"), f"please answer {marker}"))
    assert done.run.status.value == "failed"
    assert done.run.error is not None
    assert done.run.error.code == "runner.crashed", done.run.error
    assert "status -9" in done.run.error.message
    assert processes_with(marker) == []


@pytest.mark.parametrize("harness", HARNESSES)
async def test_a_cli_hanging_past_the_deadline_is_stopped_with_its_whole_group(
    tmp_path: Path, harness: str
) -> None:
    # The bridge transport gives the CLI a child process (the stdio MCP bridge) that must die with it.
    hang = always(Hang())
    async with served(harness, hang, tmp_path, mcp_transport="bridge", timeout_s=20) as (fake, host):
        done = await run_event(host, message(harness, unique("conv"), "take your time"))
        bridges = processes_with(f"/runs/{done.run.run_id}/mcp")
    assert fake.agent_turns, "the model was never asked"
    assert done.run.status.value == "failed"
    assert done.run.error is not None
    assert done.run.error.code == "runner.timeout", done.run.error
    group = done.run.error.details["process_group"]
    assert isinstance(group, int)
    assert not group_alive(group)
    assert group_members(group) == []
    assert bridges == []


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("harness", HARNESSES)
async def test_an_mcp_server_the_cli_cannot_reach_fails_the_run_closed(tmp_path: Path, harness: str) -> None:
    async with served(harness, always(Text("answered without the host's tools")), tmp_path) as (fake, host):
        # Runs are told to reach their MCP server where nothing listens.
        host.orchestrator.public_url = f"http://127.0.0.1:{closed_port()}"
        done = await run_event(host, message(harness, unique("conv"), "hello"))
    assert done.run.status.value == "failed"
    assert done.run.error is not None
    assert done.run.error.code == "runner.mcp_unavailable", done.run.error
    assert [role for role, _ in done.transcript] == ["user"]  # no answer was delivered
    assert done.session_id is None
    if harness == "codex":
        assert fake.requests == []  # the server is required: Codex never even asked the model


@pytest.mark.parametrize("harness", HARNESSES)
async def test_a_tool_the_grant_does_not_allow_is_refused_by_the_host(tmp_path: Path, harness: str) -> None:
    # The agent may keep conversation state only; writing actor state is refused by mcphost.
    script = calls_then_answers(
        [ToolCall("mcp__mcphost__state_set", {"scope": "actor", "key": "k", "value": 1})], "Refused: {result}"
    )
    async with served(harness, script, tmp_path) as (_, host):
        done = await run_event(host, message(harness, unique("conv"), "save it for me"))
    assert done.run.status.value == "completed", done.terminal
    assert [(a.tool, a.outcome, a.code) for a in done.audit] == [("state_set", "refused", "unauthorized")]
    [call] = done.data("tool.call.completed")
    assert call["error_code"] == "unauthorized"
    assert "may not write 'actor' state" in call["error_message"]
    assert "may not write 'actor' state" in done.answer


async def test_a_tool_claude_code_may_not_use_is_denied_and_reported(tmp_path: Path) -> None:
    script = calls_then_answers([ToolCall("Write", {"file_path": "notes.txt", "content": "x"})], "Could not.")
    async with served("claude", script, tmp_path) as (_, host):
        done = await run_event(host, message("claude", unique("conv"), "write a note"))
    assert done.run.status.value == "failed"
    assert done.run.error is not None
    assert done.run.error.code == "unauthorized"
    assert [d["tool_name"] for d in done.run.error.details["permission_denials"]] == ["Write"]
    [call] = done.data("tool.call.completed")
    assert (call["tool_name"], call["error_code"]) == ("Write", "unauthorized")
    assert done.answer == "Could not."  # the answer is still delivered
    assert done.audit == []  # nothing reached mcphost
    assert not (Path(done.working_directory or tmp_path) / "notes.txt").exists()


@pytest.mark.parametrize("harness", HARNESSES)
async def test_malformed_stream_lines_become_diagnostics_and_the_run_completes(
    tmp_path: Path, harness: str
) -> None:
    noisy = noisy_cli.write_wrapper(tmp_path, require_cli(harness))
    script = calls_then_answers([ToolCall("mcp__mcphost__history_page", {"limit": 3})], "History: {result}")
    async with served(harness, script, tmp_path, cli_path=str(noisy)) as (_, host):
        done: Finished = await run_event(host, message(harness, unique("conv"), "anything before?"))
    assert done.run.status.value == "completed", done.terminal
    assert done.answer.startswith("History:")
    assert [a.tool for a in done.audit] == ["history_page"]
    diagnostics = done.terminal["metadata"]["diagnostics"]
    kinds = [(d["kind"], d["line"]) for d in diagnostics if d["line"] in range(2, 7)]
    assert kinds == [
        ("unparseable_line", 2),
        ("unparseable_line", 3),
        ("unparseable_line", 4),
        ("unknown_event", 5),
        ("unparseable_line", 6),
    ]
