"""Warm Claude Code sessions through a real host: one long-lived `claude -p --input-format stream-json`
per conversation behind `/sessions/{session_id}/mcp`, against the fake Messages API."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcphost.app import Host
from mcphost.warm import WarmSessions
from tests.e2e.harness.hostkit import Finished, claude_agent, harness_host, message, run_event, unique
from tests.fakes.anthropic import fake_anthropic
from tests.fakes.script import ModelRequest, Reply, Text, ToolCall
from tests.mcphost.facts.conftest import raises_mcp_error

pytestmark = pytest.mark.slow

OUTSIDE = "Please write the actor scope."


def script(request: ModelRequest) -> Reply:
    """Echo every user message the model was sent; on OUTSIDE, first call a tool outside the grant."""
    if not request.is_agent_turn:
        return Text("mcphost fake title")
    if request.user_text.startswith(OUTSIDE) and not request.tool_results:
        return ToolCall("mcp__mcphost__state_set", {"scope": "actor", "key": "k", "value": 1})
    said = [m for m in _user_texts(request.body) if not m.startswith("<")]
    return Text(
        "Seen: " + " | ".join(said) + (f" Tool: {request.tool_results[-1]}" if request.tool_results else "")
    )


def _user_texts(body: Any) -> list[str]:
    texts: list[str] = []
    for item in body.get("messages", []):
        if item.get("role") != "user":
            continue
        content = item.get("content")
        parts = (
            [content]
            if isinstance(content, str)
            else [p.get("text", "") for p in content if p.get("type") == "text"]
        )
        texts.extend(p for p in parts if p)
    return texts


def warm_of(finished: Finished) -> dict[str, Any] | None:
    return finished.terminal.get("metadata", {}).get("external", {}).get("warm")


def warm_pid(finished: Finished) -> int:
    warm = warm_of(finished)
    assert warm is not None, finished.terminal
    return int(warm["pid"])


def diagnostics_of(finished: Finished) -> list[str]:
    return [d["kind"] for d in finished.terminal.get("metadata", {}).get("diagnostics", [])]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_warm_turns_keep_memory_in_one_process_and_the_endpoint_refuses_between_runs(
    tmp_path: Path,
) -> None:
    async with fake_anthropic(script) as fake:
        agent = claude_agent("claude", fake.base_url, tmp_path / "harness", warm=True)
        async with harness_host(tmp_path, [agent]) as host:
            conversation = unique("conv")
            first = await run_event(host, message("claude", conversation, "Remember that I like green."))
            assert first.run.status.value == "completed", first.terminal
            pid = warm_pid(first)
            assert warm_of(first) == {"pid": pid, "reused": False, "turns": 1}
            assert alive(pid)  # the warm process outlives its first turn

            second = await run_event(host, message("claude", conversation, "What do I like?"))
            assert second.run.status.value == "completed", second.terminal
            assert warm_of(second) == {"pid": pid, "reused": True, "turns": 2}
            assert "Remember that I like green." in second.answer  # the process kept the first turn
            assert second.session_id == first.session_id

            # A tool outside the current run's grant is refused by the session endpoint, under the run.
            third = await run_event(host, message("claude", conversation, OUTSIDE))
            assert third.run.status.value == "completed", third.terminal
            assert warm_pid(third) == pid
            assert [(a.tool, a.outcome, a.code) for a in third.audit] == [
                ("state_set", "refused", "unauthorized")
            ]
            assert "unauthorized" in third.answer

            # Between runs a real MCP client with the session's URL and token is refused.
            await _assert_refused_between_runs(host, conversation)


async def _assert_refused_between_runs(host: Host, conversation: str) -> None:
    warm = host.facts.warm
    assert warm is not None
    session_id = WarmSessions.session_id("claude", conversation, None)
    assert warm.run_of(session_id) is None
    url = f"{host.orchestrator.public_url.rstrip('/')}/sessions/{session_id}/mcp"
    headers = {"Authorization": f"Bearer {warm.token(session_id)}"}
    async with httpx2.AsyncClient(headers=headers, timeout=10) as http:
        with raises_mcp_error("has no active run") as caught:
            async with Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as client:
                await client.call_tool("run_context", {})
        assert caught


async def test_a_killed_warm_process_falls_back_to_a_cold_spawn_and_is_replaced(tmp_path: Path) -> None:
    async with fake_anthropic(script) as fake:
        agent = claude_agent("claude", fake.base_url, tmp_path / "harness", warm=True)
        async with harness_host(tmp_path, [agent]) as host:
            conversation = unique("conv")
            first = await run_event(host, message("claude", conversation, "Remember that I like green."))
            assert first.run.status.value == "completed", first.terminal
            pid = warm_pid(first)
            os.killpg(pid, signal.SIGKILL)
            with anyio.fail_after(10):
                while alive(pid) and not _zombie(pid):  # noqa: ASYNC110  # no event tells a process died
                    await anyio.sleep(0.05)

            second = await run_event(host, message("claude", conversation, "What do I like?"))
            assert second.run.status.value == "completed", second.terminal
            assert warm_of(second) is None  # a cold spawn answered
            assert "warm_fallback" in diagnostics_of(second)
            assert "Remember that I like green." in second.answer  # it resumed the session

            third = await run_event(host, message("claude", conversation, "And now?"))
            assert third.run.status.value == "completed", third.terminal
            replaced = warm_of(third)
            assert replaced is not None
            assert replaced["pid"] != pid
            assert replaced["reused"] is False
            assert "Remember that I like green." in third.answer


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


async def test_two_warm_sessions_run_in_parallel_in_their_own_processes(tmp_path: Path) -> None:
    async with fake_anthropic(script) as fake:
        agent = claude_agent("claude", fake.base_url, tmp_path / "harness", warm=True)
        async with harness_host(tmp_path, [agent]) as host:
            a, b = unique("conv-a"), unique("conv-b")
            results: dict[str, Finished] = {}

            async def turn(conversation: str, text: str) -> None:
                results[conversation] = await run_event(host, message("claude", conversation, text))

            async with anyio.create_task_group() as tg:
                tg.start_soon(turn, a, "I am A.")
                tg.start_soon(turn, b, "I am B.")
            first_a, first_b = results[a], results[b]
            assert first_a.run.status.value == first_b.run.status.value == "completed"
            async with anyio.create_task_group() as tg:
                tg.start_soon(turn, a, "Who am I?")
                tg.start_soon(turn, b, "Who am I?")
            assert "I am A." in results[a].answer
            assert "I am B." not in results[a].answer
            assert "I am B." in results[b].answer
            assert "I am A." not in results[b].answer
            assert warm_pid(results[a]) == warm_pid(first_a)
            assert warm_pid(results[b]) == warm_pid(first_b)
            assert warm_pid(first_a) != warm_pid(first_b)
