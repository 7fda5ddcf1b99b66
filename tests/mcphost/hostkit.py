"""Test helpers: a host configured with the echo and misbehave plugins, and event builders.

The host starts only the plugins its agents use: echo (a bundled runner, listed here as a plugin) and
misbehave. The other bundled runners (memo, claude-code, codex-agent) are off (`bundled_plugins =
false`): each would be one more process to start and stop with every host of every test."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio

from mcphost.app import Host
from mcphost.config import HostSettings, PluginConfig, Settings
from mcphost.models import AgentConfig, AgentEventEnvelope, Run, RunStatus

REPO = Path(__file__).resolve().parents[2]
MISBEHAVE = [sys.executable, str(REPO / "tests" / "plugins" / "misbehave.py")]
MISBEHAVE_RUNNER = "plugin:test/misbehave/default"
ECHO = [sys.executable, "-m", "mcphost_runners.echo"]
ECHO_RUNNER = "plugin:mcphost/echo/default"


def agent(agent_id: str, runner: str, **kw: Any) -> AgentConfig:
    return AgentConfig.model_validate({"id": agent_id, "runner": runner, "match": {"bot_id": agent_id}, **kw})


def host_settings(database_url: str, data_dir: Path, **host: Any) -> Settings:
    """Agents are selected by bot_id: echo, bad (misbehave), short (1 s deadline), rej, int."""
    options: dict[str, Any] = {"bundled_plugins": False, **host}
    return Settings(
        source="<test>",
        host=HostSettings(database_url=database_url, data_dir=data_dir, **options),
        plugins=[PluginConfig(command=ECHO, name="echo"), PluginConfig(command=MISBEHAVE, name="misbehave")],
        agents=[
            agent("echo", ECHO_RUNNER),
            agent("bad", MISBEHAVE_RUNNER, timeout_s=30),
            agent("short", MISBEHAVE_RUNNER, timeout_s=1),
            agent("rej", MISBEHAVE_RUNNER, concurrency="reject"),
            agent("int", MISBEHAVE_RUNNER, concurrency="interrupt"),
            agent(
                "wide",
                MISBEHAVE_RUNNER,
                state={"scopes": ["conversation", "actor"], "write": True},
                event_types=["message.received", "group.member_joined"],
            ),
        ],
    )


def message(text: str, *, bot: str = "bad", conversation: str = "c1", **kw: Any) -> AgentEventEnvelope:
    return AgentEventEnvelope.model_validate(
        {
            "event_type": "message.received",
            "conversation": {"conversation_id": conversation, "bot_id": bot},
            "actor": {"actor_id": "u1"},
            "input": {"text": text},
            **kw,
        }
    )


async def run_event(host: Host, event: AgentEventEnvelope) -> Run:
    """Submit `event` to the host's orchestrator and wait (at most 60 s) for its run to end."""
    admission = await host.orchestrator.submit(event)
    with anyio.fail_after(60):
        return await host.orchestrator.wait(admission.run.run_id)


def error_code(run: Run) -> str | None:
    """The code the run failed with, None when it did not fail."""
    return run.error.code if run.error else None


async def wait_running(host: Host, run_id: str) -> None:
    """Wait (at most about 30 s) until the run is `running`."""
    for _ in range(1500):
        if (await host.stores.runs.get(run_id)).status is RunStatus.RUNNING:
            return
        await anyio.sleep(0.02)
    raise AssertionError(f"run {run_id} never started")
