"""Warm harness sessions through a real host, for both harnesses: one long-lived CLI per conversation
behind `/sessions/{session_id}/mcp` — Claude Code's `claude -p --input-format stream-json` against the
fake Messages API, Codex's `codex app-server` against the fake Responses API."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import AsyncGenerator, Callable, Generator
from contextlib import AbstractAsyncContextManager, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcphost.app import Host
from mcphost.warm import WarmSessions
from tests.e2e.harness.hostkit import (
    Finished,
    claude_agent,
    codex_agent,
    harness_host,
    message,
    run_event,
    unique,
)
from tests.fakes.anthropic import fake_anthropic
from tests.fakes.openai import fake_openai
from tests.fakes.script import ModelRequest, Reply, Script, Text, ToolCall
from tests.mcphost.facts._helpers import raises_mcp_error

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Harness:
    """One harness under test: its agent and the fake model API it talks to."""

    agent_id: str
    agent: Callable[..., dict[str, Any]]
    fake: Callable[[Script], AbstractAsyncContextManager[Any]]

    def warm_agent(self, base_url: str, tmp_path: Path) -> dict[str, Any]:
        return self.agent(self.agent_id, base_url, tmp_path / "harness", warm=True)


@asynccontextmanager
async def warm_host(harness: Harness, tmp_path: Path) -> AsyncGenerator[tuple[Any, Host]]:
    """The harness's fake model API answering `script`, and a host with its warm agent."""
    async with (
        harness.fake(script) as fake,
        harness_host(tmp_path, [harness.warm_agent(fake.base_url, tmp_path)]) as host,
    ):
        yield fake, host


HARNESSES = [
    pytest.param(Harness("claude", claude_agent, fake_anthropic), id="claude-code"),
    pytest.param(Harness("codex", codex_agent, fake_openai), id="codex"),
]

OUTSIDE = "Please write the actor scope."
REMEMBER = "Remember that I like green."


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
    """The user messages of a Messages API (`messages`) or Responses API (`input`) request, in order."""
    texts: list[str] = []
    items: list[Any] = body.get("messages") or body.get("input") or []
    for item in items:
        if item.get("role") != "user" or item.get("type", "message") != "message":
            continue
        content = item.get("content")
        parts: list[str] = (
            [content]
            if isinstance(content, str)
            else [p.get("text", "") for p in content if p.get("type") in ("text", "input_text")]
        )
        texts.extend(p for p in parts if p)
    return texts


async def first_turn(host: Host, agent_id: str) -> tuple[str, Finished]:
    """A new conversation and its first turn (REMEMBER), completed."""
    conversation = unique("conv")
    first = await run_event(host, message(agent_id, conversation, REMEMBER))
    assert first.run.status.value == "completed", first.terminal
    return conversation, first


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


@pytest.mark.parametrize("harness", HARNESSES)
async def test_warm_turns_keep_memory_in_one_process_and_the_endpoint_refuses_between_runs(
    tmp_path: Path, harness: Harness
) -> None:
    name = harness.agent_id
    async with warm_host(harness, tmp_path) as (fake, host):
        conversation, first = await first_turn(host, name)
        pid = warm_pid(first)
        assert warm_of(first) == {"pid": pid, "reused": False, "turns": 1}
        assert alive(pid)  # the warm process outlives its first turn

        before = len(fake.requests)
        second = await run_event(host, message(name, conversation, "What do I like?"))
        assert second.run.status.value == "completed", second.terminal
        assert warm_of(second) == {"pid": pid, "reused": True, "turns": 2}
        # The model was sent the first turn's history by the same process.
        sent = [t for r in fake.requests[before:] if r.is_agent_turn for t in _user_texts(r.body)]
        assert REMEMBER in sent
        assert REMEMBER in second.answer  # the process kept the first turn
        assert second.session_id == first.session_id

        # A tool outside the current run's grant is refused by the session endpoint, under the run.
        third = await run_event(host, message(name, conversation, OUTSIDE))
        assert third.run.status.value == "completed", third.terminal
        assert warm_pid(third) == pid
        assert [(a.tool, a.outcome, a.code) for a in third.audit] == [
            ("state_set", "refused", "unauthorized")
        ]
        assert "unauthorized" in third.answer

        # Between runs a real MCP client with the session's URL and token is refused.
        await _assert_refused_between_runs(host, name, conversation)


async def _assert_refused_between_runs(host: Host, agent_id: str, conversation: str) -> None:
    warm = host.facts.warm
    assert warm is not None
    session_id = WarmSessions.session_id(agent_id, conversation, None)
    assert await warm.current_run(session_id) is None
    url = f"{host.orchestrator.public_url.rstrip('/')}/sessions/{session_id}/mcp"
    headers = {"Authorization": f"Bearer {warm.token(session_id)}"}
    async with httpx2.AsyncClient(headers=headers, timeout=10) as http:
        with raises_mcp_error("has no active run") as caught:
            async with Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as client:
                await client.call_tool("run_context", {})
        assert caught


@pytest.mark.parametrize("harness", HARNESSES)
async def test_a_killed_warm_process_falls_back_to_a_cold_spawn_and_is_replaced(
    tmp_path: Path, harness: Harness
) -> None:
    name = harness.agent_id
    async with warm_host(harness, tmp_path) as (_, host):
        conversation, first = await first_turn(host, name)
        pid = warm_pid(first)
        os.killpg(pid, signal.SIGKILL)
        with anyio.fail_after(10):
            while alive(pid) and not _zombie(pid):  # noqa: ASYNC110  # no event tells a process died
                await anyio.sleep(0.05)

        second = await run_event(host, message(name, conversation, "What do I like?"))
        assert second.run.status.value == "completed", second.terminal
        assert warm_of(second) is None  # a cold spawn answered
        assert "warm_fallback" in diagnostics_of(second)
        assert REMEMBER in second.answer  # it resumed the session

        third = await run_event(host, message(name, conversation, "And now?"))
        assert third.run.status.value == "completed", third.terminal
        replaced = warm_of(third)
        assert replaced is not None
        assert replaced["pid"] != pid
        assert replaced["reused"] is False
        assert REMEMBER in third.answer


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.parametrize("harness", HARNESSES)
async def test_two_warm_sessions_run_in_parallel_in_their_own_processes(
    tmp_path: Path, harness: Harness
) -> None:
    name = harness.agent_id
    async with warm_host(harness, tmp_path) as (_, host):
        a, b = unique("conv-a"), unique("conv-b")
        results: dict[str, Finished] = {}

        async def turn(conversation: str, text: str) -> None:
            results[conversation] = await run_event(host, message(name, conversation, text))

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


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def uvicorn_log() -> Generator[list[logging.LogRecord]]:
    """What uvicorn logs (its INFO lines included) while the block runs. Entered after the fake model API
    started: its uvicorn configures these loggers and drops handlers added before."""
    logger = logging.getLogger("uvicorn.error")
    handler, level = _Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.mark.parametrize("harness", HARNESSES)
async def test_a_host_stops_without_waiting_on_the_connection_of_a_live_warm_process(
    tmp_path: Path, harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # Codex's app-server keeps a GET stream open on its session endpoint for its whole life; the host
    # closes it before uvicorn stops, so uvicorn neither waits for the connection nor cancels it.
    with ExitStack() as stack:
        async with warm_host(harness, tmp_path) as (_, host):
            first = await run_event(host, message(harness.agent_id, unique("conv"), "Hello."))
            assert first.run.status.value == "completed", first.terminal
            pid = warm_pid(first)
            assert alive(pid)
            records = stack.enter_context(uvicorn_log())  # until the host and the fake stopped
    said = [r.getMessage() for r in records]
    assert "Shutting down" in said  # the host's uvicorn stopped while we listened
    assert not [m for m in said if m.startswith("Waiting for connections to close")], said
    errors = [r for r in [*records, *caplog.records] if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, [r.getMessage() for r in errors]
    assert not alive(pid) or _zombie(pid)  # the warm process stopped with its plugin
