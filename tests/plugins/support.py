"""Helpers shared by the plugin, registry and runner tests: contexts, specs and a run collector."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from mcphost.plugins.process import PluginProcess, PluginSpec, PluginTimings, RawResult, RunAnswerStatus
from mcphost.protocol import (
    AgentRunContext,
    ConversationInfo,
    Delivery,
    EventInfo,
    JSONObject,
    RunInput,
    Runtime,
    StateSnapshot,
    Trigger,
)

PLUGINS = Path(__file__).parent
REPO = PLUGINS.parent.parent
FAST = PluginTimings(
    initialize=5.0, shutdown=1.0, exit=1.0, terminate=1.0, kill=1.0, backoff_initial=0.05, backoff_max=0.2
)
"""Short waits so lifecycle tests finish quickly."""

_counter = 0


def echo_spec(name: str = "echo", env: dict[str, str] | None = None) -> PluginSpec:
    return PluginSpec(name, [sys.executable, "-m", "mcphost_runners.echo"], env or {}, REPO)


def script_spec(
    script: str, *args: str, name: str | None = None, env: dict[str, str] | None = None
) -> PluginSpec:
    return PluginSpec(
        name or script.removesuffix(".py"), [sys.executable, str(PLUGINS / script), *args], env or {}, REPO
    )


def make_context(
    text: str | None = "hello",
    *,
    run_id: str | None = None,
    streaming: bool = True,
    conversation: bool = True,
    conversation_state: JSONObject | None = None,
) -> AgentRunContext:
    global _counter
    _counter += 1
    now = time.time()
    return AgentRunContext(
        run_id=run_id or f"run_test{_counter:06d}",
        trigger=Trigger(type="message.received", source="api", timestamp=now),
        event=EventInfo(
            event_id=f"evt_{_counter}", event_type="message.received", event_time=now, source="api"
        ),
        conversation=ConversationInfo(conversation_id="conv_1") if conversation else None,
        input=RunInput(text=text),
        delivery=Delivery(supports_streaming=streaming),
        state=StateSnapshot(conversation=conversation_state or {}),
        runtime=Runtime(host_version="test", trace_id=f"trace_{_counter}", deadline_at=now + 60),
    )


async def collect(
    plugin: PluginProcess, ctx: AgentRunContext, runner: str = "default", buffer: int = 1000
) -> tuple[RunAnswerStatus, list[RawResult]]:
    """Run to the end and return the status with every result, in arrival order."""
    send, receive = anyio.create_memory_object_stream[RawResult](buffer)
    got: list[RawResult] = []

    async def drain() -> None:
        async with receive:
            async for item in receive:
                got.append(item)

    status: RunAnswerStatus | None = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            status = await plugin.run(runner, ctx, send)
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:  # let tests see the error run() raised, not the task group's wrapper
            raise group.exceptions[0] from None
        raise
    assert status is not None
    return status, got


def types_of(results: list[RawResult]) -> list[str]:
    return [str(r.obj.get("type")) for r in results]


async def eventually(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Wait until `predicate()` holds, failing the test after `timeout` seconds."""
    with anyio.move_on_after(timeout):
        while True:
            if predicate():
                return
            await anyio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
