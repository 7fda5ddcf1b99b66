"""A real plugin subprocess asks a host model through `RunAPI.models_invoke`: the real host and HTTP app,
the runner SDK's MCP client, the fake Chat Completions API upstream."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mcphost.app import open_host
from mcphost.config import PluginConfig
from mcphost.llm import ModelConfig
from mcphost.models import RunStatus
from tests.e2e.httpkit import serve_app
from tests.fakes.openai_chat import Reply, serve_fake_chat
from tests.mcphost.hostkit import REPO, agent, host_settings, message, run_event

MODEL_PLUGIN = [sys.executable, str(REPO / "tests" / "e2e" / "model_plugin.py")]
KEY_ENV = "MCPHOST_E2E_CHAT_KEY"
KEY = "sk-host-only-chat-key"


async def test_a_plugin_streams_a_host_model_answer_through_its_run_api_with_fallback_and_budget(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    async with serve_fake_chat() as upstream:
        entry = {"provider": "openai-compatible", "base_url": upstream.base_url, "api_key_env": KEY_ENV}
        models = {
            "small": ModelConfig.model_validate({**entry, "model": "m1", "fallback": ["spare"]}),
            "spare": ModelConfig.model_validate({**entry, "model": "m2"}),
        }
        base = host_settings(database_url, tmp_path / "data")
        settings = base.model_copy(
            update={
                "plugins": [*base.plugins, PluginConfig(command=MODEL_PLUGIN, name="models")],
                "agents": [
                    *base.agents,
                    agent("asker", "plugin:test/models/default", resources={"models": ["small"]}),
                    agent(
                        "poor",
                        "plugin:test/models/default",
                        resources={"models": ["small"]},
                        budget={"model_tokens_per_run": 10},
                    ),
                ],
                "models": models,
            }
        )
        upstream.script("m1", Reply(status=503))
        upstream.script("m2", Reply(content="the spare answers"))
        async with open_host(settings) as host, serve_app(host):
            done = await run_event(host, message("small: say something", bot="asker"))
            refused = await run_event(host, message("small: say more", bot="poor"))
            rows = await host.stores.usage.calls(done.run_id)
            results = await host.stores.results.list(done.run_id)
            refused_rows = await host.stores.usage.calls(refused.run_id)
    assert done.status is RunStatus.COMPLETED, done.error
    [said] = [r for r in results if r.type == "message.completed"]
    reply = json.loads(said.payload["data"]["message"]["content"])
    assert reply["text"] == "the spare answers"
    assert "".join(reply["deltas"]) == "the spare answers"
    assert len(reply["deltas"]) == 3
    assert (reply["model"], reply["attempts"]) == ("spare", 2)
    assert reply["usage"]["output_tokens"] == 5
    assert [(r.model_id, r.status, r.streamed) for r in rows] == [
        ("small", "failed", True),
        ("spare", "ok", True),
    ]
    assert {r.headers["authorization"] for r in upstream.requests} == {f"Bearer {KEY}"}
    assert refused.status is RunStatus.FAILED
    assert refused.error is not None
    assert refused.error.code == "budget_exceeded"
    assert "model_tokens_per_run" in refused.error.message
    assert refused_rows == []
    assert len(upstream.requests) == 2
