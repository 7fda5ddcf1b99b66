"""The host under benchmark: settings, events, and the baseline's hand-built run context.

Owns how benchmarks configure a host: the echo plugin (the bundled `python -m mcphost_runners.echo`, the only
bundled plugin started) plus `bench._hold_plugin` (a runner that holds a run open for a while), one
agent per runner selected by `bot_id`, logging kept quiet. Also builds the `AgentRunContext` the baseline driver sends, shaped like the one the host sends (event, conversation,
actor, input, delivery, MCP access with a token), so both sides move the same bytes over stdio.
"""

from __future__ import annotations

import logging
import secrets
import sys
import time
from collections.abc import AsyncGenerator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from bench._databases import Workspace
from bench._stdio import StdioDriver
from mcphost.app import Host, open_host
from mcphost.config import HostSettings, PluginConfig, Settings
from mcphost.llm import ModelConfig
from mcphost.models import AgentConfig, AgentEventEnvelope, new_id
from mcphost.protocol import (
    ActorInfo,
    AgentRunContext,
    AvailableApis,
    ContextAccess,
    ConversationInfo,
    EventInfo,
    JSONObject,
    MCPAccess,
    RunInput,
    Runtime,
    Trigger,
)
from mcphost.stores.results import StoredResult

ECHO_RUNNER = "plugin:mcphost/echo/default"
HOLD_RUNNER = "plugin:bench/hold/default"
ECHO_COMMAND = [sys.executable, "-m", "mcphost_runners.echo"]
HOLD_COMMAND = [sys.executable, "-m", "bench._hold_plugin"]
TERMINAL = frozenset({"run.completed", "run.failed"})


def quiet_logs() -> None:
    """The host logs every run at INFO; a benchmark prints its own table and wants warnings only."""
    logging.getLogger("mcphost").setLevel(logging.WARNING)


def settings(
    ws: Workspace,
    *,
    max_concurrent_runs: int = 64,
    hold: bool = False,
    models: Mapping[str, ModelConfig] | None = None,
) -> Settings:
    """The bench host's settings. With `models`, the hold agent may call them all, and a second hold
    agent `hold-budget` (bot `hold-budget`) may too, under a daily budget it never reaches (so each
    of its calls is reserved in the database first)."""
    # Only the plugins benchmarks use: the other bundled runners would only take CPU and memory.
    plugins = [PluginConfig(command=ECHO_COMMAND, name="echo")]
    if hold:
        plugins.append(PluginConfig(command=HOLD_COMMAND, name="hold"))
    agents = [AgentConfig.model_validate({"id": "echo", "runner": ECHO_RUNNER, "match": {"bot_id": "echo"}})]
    granted: JSONObject = {"resources": {"models": sorted(models or {})}}
    if hold:
        agents.append(
            AgentConfig.model_validate(
                {"id": "hold", "runner": HOLD_RUNNER, "match": {"bot_id": "hold"}, **granted}
            )
        )
        if models:
            agents.append(
                AgentConfig.model_validate(
                    {
                        "id": "hold-budget",
                        "runner": HOLD_RUNNER,
                        "match": {"bot_id": "hold-budget"},
                        "budget": {"model_usd_per_day": 1_000_000},
                        **granted,
                    }
                )
            )
    return Settings(
        source="<bench>",
        host=HostSettings(
            database_url=ws.database_url,
            data_dir=ws.data_dir,
            max_concurrent_runs=max_concurrent_runs,
            log_level="warning",
            bundled_plugins=False,
        ),
        plugins=plugins,
        agents=agents,
        models=dict(models or {}),
    )


@asynccontextmanager
async def bench_host(
    ws: Workspace,
    *,
    max_concurrent_runs: int = 64,
    hold: bool = False,
    models: Mapping[str, ModelConfig] | None = None,
) -> AsyncGenerator[Host, None]:
    quiet_logs()
    config = settings(ws, max_concurrent_runs=max_concurrent_runs, hold=hold, models=models)
    async with open_host(config) as host:
        yield host


def message(text: str, conversation: str, *, bot: str = "echo") -> AgentEventEnvelope:
    return AgentEventEnvelope.model_validate(
        {
            "event_type": "message.received",
            "conversation": {"conversation_id": conversation, "bot_id": bot},
            "actor": {"actor_id": "bench-user"},
            "input": {"text": text},
        }
    )


async def host_run(host: Host, event: AgentEventEnvelope) -> str:
    """Ingest `event` and follow its result stream to `run.completed`; the run id.

    Returns when the terminal result is delivered, which is before the host has closed the run (its
    status and grant are written right after); `orchestrator.wait(run_id)` waits for that."""
    admission = await host.orchestrator.submit(event)
    delivered: list[StoredResult] = []
    async for item in host.orchestrator.results(admission.run.run_id):
        delivered.append(item)
        if item.type in TERMINAL:
            break
    if not delivered or delivered[-1].type != "run.completed":
        raise RuntimeError(f"run {admission.run.run_id} did not complete: {delivered[-1:]!r}")
    return admission.run.run_id


def baseline_context(text: str, conversation: str) -> dict[str, Any]:
    """A run context like the host's for a plain text message, as JSON, with a fresh run id."""
    run_id = new_id("run")
    now = time.time()
    token = secrets.token_urlsafe(32)
    ctx = AgentRunContext(
        run_id=run_id,
        trigger=Trigger(type="message.received", source="api", timestamp=now),
        event=EventInfo(event_id=new_id("evt"), event_type="message.received", event_time=now, source="api"),
        conversation=ConversationInfo(conversation_id=conversation, bot_id="echo"),
        actor=ActorInfo(actor_id="bench-user"),
        input=RunInput(text=text),
        context=ContextAccess(
            conversation_id=conversation,
            available_apis=AvailableApis(history_page=True, event_page=True, state=True),
            mcp=MCPAccess(
                url=f"http://127.0.0.1:8787/runs/{run_id}/mcp",
                headers={"Authorization": f"Bearer {token}"},
                protocol_versions=["2025-11-25", "2026-07-28"],
            ),
        ),
        runtime=Runtime(host_version="0.1.0", trace_id=new_id("trc"), deadline_at=now + 300),
    )
    return ctx.model_dump(mode="json")


async def direct_run(driver: StdioDriver, text: str, conversation: str) -> list[dict[str, Any]]:
    """One run through the baseline driver; checks that it completed."""
    results = await driver.run("default", baseline_context(text, conversation))
    if not results or results[-1].get("type") != "run.completed":
        raise RuntimeError(f"direct echo run did not complete: {results[-1:]!r}")
    return results
