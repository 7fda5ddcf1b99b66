"""The local agent plugin (`python -m mcphost_runners.local_agent`, a real subprocess) on host models: it
calls the run's own Chat Completions endpoint with the run token, the host calls the fake upstream with
its own key, and the plugin process holds no provider key."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mcphost.app import Host, open_host
from mcphost.config import PluginConfig
from mcphost.llm import ModelConfig
from mcphost.models import AgentConfig, RunStatus
from tests.e2e.httpkit import serve_app
from tests.fakes.openai_chat import FakeChatServer, FakeToolCall, Reply, serve_fake_chat
from tests.mcphost.hostkit import agent, host_settings, message, run_event

LOCAL = [sys.executable, "-m", "mcphost_runners.local_agent"]
LOCAL_RUNNER = "plugin:mcphost/local-agent/default"
KEY_ENV = "MCPHOST_E2E_LOCAL_HOST_KEY"
KEY = "sk-host-only-local-agent-key"


def local(agent_id: str, config: dict[str, object], models: list[str]) -> AgentConfig:
    return agent(
        agent_id,
        LOCAL_RUNNER,
        config=config,
        resources={"models": models},
        state={"scopes": ["conversation"], "write": True},
    )


def plugin_environment(host: Host) -> dict[str, str]:
    """The local agent plugin process's environment, read from /proc."""
    pid = host.supervisor.get("local-agent").pid
    assert pid is not None
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = [item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item]
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def models_at(upstream: FakeChatServer) -> dict[str, ModelConfig]:
    entry = {"provider": "openai-compatible", "base_url": upstream.base_url, "api_key_env": KEY_ENV}
    return {
        "small": ModelConfig.model_validate({**entry, "model": "m1"}),
        "broken": ModelConfig.model_validate({**entry, "model": "m-broken"}),
    }


async def test_the_local_agent_runs_a_tool_round_on_a_host_model_without_a_provider_key(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    async with serve_fake_chat() as upstream:
        base = host_settings(database_url, tmp_path / "data")
        settings = base.model_copy(
            update={
                "plugins": [*base.plugins, PluginConfig(command=LOCAL, name="local-agent")],
                "agents": [
                    *base.agents,
                    local("local", {"model": "host:small"}, ["small"]),
                    local(
                        "sourced",
                        {"model_source": "host", "model": "broken", "fallback_models": ["small"]},
                        ["small", "broken"],
                    ),
                    local("ungranted", {"model": "host:small"}, []),
                ],
                "models": models_at(upstream),
            }
        )
        upstream.script(
            "m1",
            Reply(
                tool_calls=(FakeToolCall("state_set", {"scope": "conversation", "key": "k", "value": "v"}),)
            ),
            Reply(content="Saved it.", usage=(30, 4)),
            Reply(content="The spare answered."),
        )
        upstream.script("m-broken", Reply(status=503))
        async with open_host(settings) as host, serve_app(host):
            done = await run_event(host, message("Save something.", bot="local"))
            fell_back = await run_event(host, message("Say something.", bot="sourced", conversation="c2"))
            refused = await run_event(host, message("Say something.", bot="ungranted", conversation="c3"))
            environment = plugin_environment(host)
            rows = await host.stores.usage.calls(done.run_id)
            fallback_rows = await host.stores.usage.calls(fell_back.run_id)
            audit = await host.stores.audit.list(done.run_id, limit=100)
            results = await host.stores.results.list(done.run_id)
    assert done.status is RunStatus.COMPLETED, done.error
    # The tool round went through the run's MCP server; the answer came after it.
    assert [(a.tool, a.outcome) for a in audit if a.tool == "state_set"] == [("state_set", "ok")]
    [said] = [r for r in results if r.type == "message.completed"]
    assert said.payload["data"]["message"]["content"] == "Saved it."
    # Every call reached the upstream through the host, with the host's key and upstream model name.
    assert {r.headers["authorization"] for r in upstream.requests} == {f"Bearer {KEY}"}
    assert [r.model for r in upstream.requests] == ["m1", "m1", "m-broken", "m1"]
    assert upstream.requests[1].messages[-1]["role"] == "tool"
    # One usage row per call, on the run that made it.
    assert [(r.model_id, r.status, r.api, r.streamed) for r in rows] == [
        ("small", "ok", "chat", True),
        ("small", "ok", "chat", True),
    ]
    assert rows[1].input_tokens == 30
    assert rows[1].output_tokens == 4
    # model_source = "host": the failing host model fell back to the next one in the agent's own list.
    assert fell_back.status is RunStatus.COMPLETED, fell_back.error
    assert [(r.model_id, r.status) for r in fallback_rows] == [("broken", "failed"), ("small", "ok")]
    # Not granted: refused before any model call, naming the key to add.
    assert refused.status is RunStatus.FAILED
    assert refused.error is not None
    assert refused.error.code == "unauthorized"
    assert "resources.models" in refused.error.message
    # The plugin process holds no provider key: not the host's, not its variable.
    joined = "\0".join(f"{k}={v}" for k, v in environment.items())
    assert KEY not in joined
    assert KEY_ENV not in environment
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "CODEX_API_KEY"):
        assert name not in environment
