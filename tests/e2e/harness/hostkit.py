"""A real mcphost (stores, plugin processes, orchestrator, the per-run MCP endpoint on a loopback port)
running the harness runners as plugins, for end-to-end tests with the real CLIs and a fake model.

`harness_host` opens the host as `mcphost run` does (`open_host` + `serve_locally`) in the test's event
loop, so the fake model API (also in this loop) and the host's stores are both at hand; its loopback app
also serves `/v1` (`api=True`), which the approval tests call.
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from mcphost.app import Host, open_host
from mcphost.config import settings_from_mapping
from mcphost.models import AgentEventEnvelope, Run
from mcphost.serving import serve_locally
from mcphost.stores import AuditRecord
from mcphost_runners.harness import SESSION_KEY, WORKDIR_KEY
from tests.fakes.harness_support import require_cli

CLAUDE_RUNNER = "plugin:mcphost/claude-code/default"
CODEX_RUNNER = "plugin:mcphost/codex-agent/default"
FAKE_KEY = "sk-fake-not-a-secret"


def claude_agent(agent_id: str, base_url: str, data_dir: Path, **config: Any) -> dict[str, Any]:
    """An agent on Claude Code pointed at a fake Messages API, matched by `bot_id == agent_id`."""
    settings: dict[str, Any] = {
        "cli_path": str(require_cli("claude")),
        "data_dir": str(data_dir),
        "environment": {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": FAKE_KEY},
    }
    settings.update(config)
    return _agent(agent_id, CLAUDE_RUNNER, settings)


def codex_agent(agent_id: str, base_url: str, data_dir: Path, **config: Any) -> dict[str, Any]:
    """An agent on Codex pointed at a fake Responses API, matched by `bot_id == agent_id`."""
    settings: dict[str, Any] = {
        "cli_path": str(require_cli("codex")),
        "data_dir": str(data_dir),
        "model": "mcphost-fake",
        "environment": {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": FAKE_KEY},
    }
    settings.update(config)
    return _agent(agent_id, CODEX_RUNNER, settings)


def host_model(provider: str, base_url: str, api_key_env: str, model: str) -> dict[str, Any]:
    """A `[models.<id>]` entry: `model` at `base_url`, with the host's key in `api_key_env`."""
    return {"provider": provider, "base_url": base_url, "api_key_env": api_key_env, "model": model}


def _agent(agent_id: str, runner: str, config: dict[str, Any]) -> dict[str, Any]:
    timeout = config.pop("timeout_s", 60)
    return {
        "id": agent_id,
        "runner": runner,
        "match": {"bot_id": agent_id},
        "prompt": "You are a test agent.",
        "config": config,
        "state": {"scopes": ["conversation"], "write": True},
        "timeout_s": timeout,
    }


@asynccontextmanager
async def harness_host(
    tmp_path: Path,
    agents: list[dict[str, Any]],
    *,
    bundled: bool = False,
    knowledge: dict[str, Any] | None = None,
    skills: dict[str, Any] | None = None,
    host: dict[str, Any] | None = None,
    models: dict[str, Any] | None = None,
) -> AsyncGenerator[Host]:
    """A host with the two harness plugins (as `[[plugins]]`, or as the bundled ones) and `agents`
    (`host`: more `[host]` keys)."""
    plugins = [
        {"name": "claude-code", "command": [sys.executable, "-m", "mcphost_runners.claude_code"]},
        {"name": "codex-agent", "command": [sys.executable, "-m", "mcphost_runners.codex"]},
    ]
    data: dict[str, Any] = {
        "host": {"data_dir": str(tmp_path / "host"), "bundled_plugins": bundled, **(host or {})},
        "plugins": [] if bundled else plugins,
        "agents": agents,
    }
    if knowledge:
        data["knowledge"] = knowledge
    if skills:
        data["skills"] = skills
    if models:
        data["models"] = models
    settings = settings_from_mapping(data, source="<harness e2e>", environ={})
    async with open_host(settings) as opened, serve_locally(opened, api=True):
        yield opened


@dataclass(frozen=True)
class Finished:
    """A finished run with everything the host recorded about it."""

    run: Run
    results: list[dict[str, Any]]
    audit: list[AuditRecord]
    transcript: list[tuple[str, str]]
    """(role, content) of the run's transcript rows."""
    state: dict[str, Any]
    """The run's conversation state after it ended."""

    @property
    def types(self) -> list[str]:
        return [r["type"] for r in self.results]

    def data(self, kind: str) -> list[dict[str, Any]]:
        return [r["data"] for r in self.results if r["type"] == kind]

    @property
    def terminal(self) -> dict[str, Any]:
        return self.results[-1]

    @property
    def answer(self) -> str:
        [row] = [content for role, content in self.transcript if role == "assistant"]
        return row

    @property
    def session_id(self) -> str | None:
        return self.state.get(SESSION_KEY)

    @property
    def working_directory(self) -> str | None:
        return self.state.get(WORKDIR_KEY)


def message(agent_id: str, conversation_id: str, text: str) -> AgentEventEnvelope:
    return AgentEventEnvelope.model_validate(
        {
            "event_type": "message.received",
            "source": "api",
            "conversation": {"conversation_id": conversation_id, "bot_id": agent_id},
            "actor": {"actor_id": "alice", "actor_name": "Alice"},
            "input": {"text": text},
        }
    )


async def run_event(host: Host, event: AgentEventEnvelope, timeout: float = 60) -> Finished:
    """Submit `event`, wait for its run to end, and gather what the host stored about it."""
    with anyio.fail_after(timeout):
        admission = await host.orchestrator.submit(event)
    return await finished(host, admission.run.run_id, timeout)


async def finished(host: Host, run_id: str, timeout: float = 60) -> Finished:
    """Wait for run `run_id` to end and gather what the host stored about it."""
    with anyio.fail_after(timeout):
        run = await host.orchestrator.wait(run_id)
    stores = host.stores
    results = [{"seq": r.seq, **r.payload} for r in await stores.results.list(run.run_id)]
    audit = await stores.audit.list(run.run_id, limit=1000)
    transcript = [(t.role, t.content) for t in await stores.transcript.for_run(run.run_id)]
    grant = (await stores.runs.grant(run.run_id)).grant
    owner = grant.state_scope_id("conversation")
    state: dict[str, Any] = {}
    if owner is not None:
        for key in (SESSION_KEY, WORKDIR_KEY):
            entry = await stores.state.get("conversation", owner, key)
            if entry is not None:
                state[key] = entry.value
    return Finished(run, results, audit, transcript, state)


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}"
