"""Helpers for the harness runner tests: the pinned CLIs, contexts with MCP access, a result collector.

The pinned CLIs live in `<repo>/node_modules/.bin/` (installed by `npm ci`, as `.ci/run` does). A test
that needs one calls `require_cli(name)`: in CI (`CI` set) a missing binary fails the test; elsewhere it
skips with a message saying to run `npm ci`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcphost.protocol import (
    AgentRunContext,
    AgentRunResult,
    BridgeCommand,
    ConversationInfo,
    Delivery,
    EventInfo,
    JSONObject,
    MCPAccess,
    RunInput,
    RunProjection,
    Runtime,
    StateSnapshot,
    Trigger,
)
from mcphost_runners.sdk import AgentRunner, RunOutput

REPO = Path(__file__).resolve().parents[2]
NODE_BIN = REPO / "node_modules" / ".bin"
TOKEN = "test-run-token-not-a-secret"

_counter = 0


def cli_path(name: str) -> Path:
    return NODE_BIN / name


def require_cli(name: str) -> Path:
    """The pinned CLI `name`; fails in CI and skips elsewhere when it is not installed."""
    path = cli_path(name)
    if path.is_file() and os.access(path, os.X_OK):
        return path
    message = f"{path} is missing: run `npm ci` in {REPO} to install the pinned harness CLIs"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def mcp_access(url: str, token: str = TOKEN) -> MCPAccess:
    return MCPAccess(
        url=url,
        headers={"Authorization": f"Bearer {token}"},
        bridge=BridgeCommand(
            command=[sys.executable, "-m", "mcphost_bridge", "--url", url], env={"MCPHOST_RUN_TOKEN": token}
        ),
        protocol_versions=["2025-11-25"],
    )


def harness_context(
    text: str | None = "hello",
    *,
    config: JSONObject | None = None,
    mcp_url: str | None = "http://127.0.0.1:9/runs/run/mcp",
    conversation_state: JSONObject | None = None,
    streaming: bool = True,
    conversation: bool = True,
    deadline_s: float = 60.0,
    run_id: str | None = None,
) -> AgentRunContext:
    """A run context as the host would send it to a harness runner."""
    global _counter
    _counter += 1
    now = time.time()
    ctx = AgentRunContext(
        run_id=run_id or f"run_harness{os.getpid()}x{_counter:04d}",
        trigger=Trigger(type="message.received", source="api", timestamp=now),
        event=EventInfo(
            event_id=f"evt_h{_counter}", event_type="message.received", event_time=now, source="api"
        ),
        conversation=ConversationInfo(conversation_id=f"conv_h{_counter}") if conversation else None,
        input=RunInput(text=text),
        delivery=Delivery(supports_streaming=streaming),
        state=StateSnapshot(conversation=conversation_state or {}),
        runtime=Runtime(host_version="test", trace_id=f"trace_{_counter}", deadline_at=now + deadline_s),
        config=config or {},
    )
    if mcp_url is not None:
        ctx = ctx.model_copy(update={"context": ctx.context.model_copy(update={"mcp": mcp_access(mcp_url)})})
    return ctx


class Collected:
    """Every result a runner emitted, as JSON, with small accessors."""

    def __init__(self) -> None:
        self.results: list[JSONObject] = []

    async def send(self, result: AgentRunResult) -> None:
        self.results.append(result.model_dump(mode="json"))

    @property
    def types(self) -> list[str]:
        return [str(r["type"]) for r in self.results]

    def of(self, kind: str) -> list[JSONObject]:
        return [r for r in self.results if r["type"] == kind]

    def data(self, kind: str) -> list[dict[str, Any]]:
        return [r["data"] for r in self.of(kind)]

    @property
    def terminal(self) -> JSONObject:
        assert self.results, "the runner emitted nothing"
        last = self.results[-1]
        assert last["type"] in ("run.completed", "run.failed"), self.types
        return last

    def state(self) -> dict[str, Any]:
        return {d["key"]: d["value"] for d in self.data("state.updated")}

    def __iter__(self) -> Iterator[JSONObject]:
        return iter(self.results)


async def run_directly(
    runner: AgentRunner, ctx: AgentRunContext, projection: RunProjection | None = None
) -> Collected:
    """Run `runner` in this process (no plugin wire) with `projection`, and collect its results."""
    collected = Collected()
    out = RunOutput(ctx.run_id, collected.send, projection=projection)
    await runner.run(ctx, out)
    return collected
