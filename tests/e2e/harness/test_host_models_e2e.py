"""The real Claude Code and Codex CLIs on host models: each talks to the run's model endpoint with the
run token (a warm Claude Code to its session's, with the session token, run after run), the host calls
the fake Messages or Responses API upstream with its own key, and no provider key is in the CLI's
environment."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from mcphost.stores.usage import ModelCallRecord
from mcphost.warm import WarmSessions
from tests.e2e.harness.hostkit import (
    Finished,
    claude_agent,
    codex_agent,
    harness_host,
    host_model,
    message,
    run_event,
    unique,
)
from tests.fakes.anthropic import INPUT_TOKENS, OUTPUT_TOKENS, fake_anthropic
from tests.fakes.openai import INPUT_TOKENS as OPENAI_INPUT_TOKENS
from tests.fakes.openai import OUTPUT_TOKENS as OPENAI_OUTPUT_TOKENS
from tests.fakes.openai import fake_openai
from tests.fakes.script import ModelRequest, Reply, Script, Text, ToolCall, always, calls_then_answers

pytestmark = pytest.mark.slow

HOST_KEY_ENV = "MCPHOST_E2E_PROVIDER_KEY"
HOST_KEY = "sk-ant-host-only-e2e"


def cli_environments(marker: str) -> list[dict[str, str]]:
    """The environment of every process whose environment contains `marker` (this run's CLI)."""
    found: list[dict[str, str]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() not in raw:
            continue
        pairs = [item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item]
        found.append({k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs})
    return found


def save_then_answer_watching(marker: str) -> tuple[list[list[dict[str, str]]], Script]:
    """A script that saves state, then answers, reading the CLI's environment (`marker`) at each call."""
    seen: list[list[dict[str, str]]] = []
    answer = calls_then_answers(
        [ToolCall("mcp__mcphost__state_set", {"scope": "conversation", "key": "k", "value": "v"})],
        "Done: {result}",
    )

    def script(request: ModelRequest) -> Reply:
        seen.append(cli_environments(marker))
        return answer(request)

    return seen, script


async def test_claude_code_on_a_host_model_holds_no_provider_key_and_runs_through_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOST_KEY_ENV, HOST_KEY)
    seen, script = save_then_answer_watching("/models/anthropic")

    async with fake_anthropic(script) as fake:
        agent = claude_agent("claude", "http://127.0.0.1:9/unused", tmp_path / "harness", model="host:sonnet")
        agent["config"]["environment"] = {"ANTHROPIC_API_KEY": "sk-ant-from-the-agent-config"}
        agent["resources"] = {"models": ["sonnet"]}
        models = {"sonnet": host_model("anthropic", fake.base_url, HOST_KEY_ENV, "claude-sonnet-4-5")}
        async with harness_host(tmp_path, [agent], models=models) as host:
            done = await run_event(host, message("claude", unique("conv"), "Save something."))
            calls = await host.stores.usage.calls(done.run.run_id)
    assert done.run.status.value == "completed", (done.terminal["data"], fake.other_paths)
    assert done.answer.startswith("Done:")
    assert [(a.tool, a.outcome) for a in done.audit] == [("state_set", "ok")]
    # Every request reached the upstream through the host: its key, the upstream model name.
    assert fake.requests
    assert {r.headers["x-api-key"] for r in fake.requests} == {HOST_KEY}
    assert {r.body["model"] for r in fake.requests} == {"claude-sonnet-4-5"}
    assert fake.other_paths == []
    assert len(calls) == len(fake.requests)
    assert {c.status for c in calls} == {"ok"}
    assert sum(c.input_tokens for c in calls) == INPUT_TOKENS * len(calls)
    assert sum(c.output_tokens for c in calls) == OUTPUT_TOKENS * len(calls)
    # The CLI's environment, read from /proc while it was calling: the run's endpoint and token only.
    environments = [env for found in seen for env in found]
    assert environments
    for env in environments:
        assert env["ANTHROPIC_BASE_URL"].endswith(f"/runs/{done.run.run_id}/models/anthropic")
        assert env["ANTHROPIC_API_KEY"] != HOST_KEY
        assert env["ANTHROPIC_API_KEY"] != "sk-ant-from-the-agent-config"
        assert HOST_KEY not in "\0".join(f"{k}={v}" for k, v in env.items())
        assert HOST_KEY_ENV not in env
        assert "ANTHROPIC_AUTH_TOKEN" not in env
        assert "OPENAI_API_KEY" not in env
    assert os.environ[HOST_KEY_ENV] == HOST_KEY


OPENAI_HOST_KEY = "sk-openai-host-only-e2e"


async def test_codex_on_a_host_model_holds_no_provider_key_and_runs_through_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOST_KEY_ENV, OPENAI_HOST_KEY)
    seen, script = save_then_answer_watching("MCPHOST_MODEL_TOKEN=")

    async with fake_openai(script) as fake:
        agent = codex_agent("codex", "http://127.0.0.1:9/unused", tmp_path / "harness", model="host:gpt")
        agent["config"]["environment"] = {
            "OPENAI_API_KEY": "sk-from-the-agent-config",
            "CODEX_API_KEY": "sk-x",
        }
        agent["resources"] = {"models": ["gpt"]}
        models = {"gpt": host_model("openai", fake.base_url, HOST_KEY_ENV, "gpt-4o-mini")}
        async with harness_host(tmp_path, [agent], models=models) as host:
            done = await run_event(host, message("codex", unique("conv"), "Save something."))
            calls = await host.stores.usage.calls(done.run.run_id)
    assert done.run.status.value == "completed", (done.terminal["data"], fake.other_paths)
    assert done.answer.startswith("Done:")
    assert [(a.tool, a.outcome) for a in done.audit] == [("state_set", "ok")]
    # Every Responses request reached the upstream through the host: its key, the upstream model name.
    assert fake.requests
    assert {r.path for r in fake.requests} == {"/responses"}
    assert {r.headers["authorization"] for r in fake.requests} == {f"Bearer {OPENAI_HOST_KEY}"}
    assert {r.body["model"] for r in fake.requests} == {"gpt-4o-mini"}
    assert fake.other_paths == []
    assert len(calls) == len(fake.requests)
    assert {(c.status, c.api, c.model_id) for c in calls} == {("ok", "responses", "gpt")}
    assert sum(c.input_tokens for c in calls) == OPENAI_INPUT_TOKENS * len(calls)
    assert sum(c.output_tokens for c in calls) == OPENAI_OUTPUT_TOKENS * len(calls)
    # The CLI's environment, read from /proc while it was calling: the run token only, no provider key.
    environments = [env for found in seen for env in found]
    assert environments
    for env in environments:
        assert env["MCPHOST_MODEL_TOKEN"] not in (OPENAI_HOST_KEY, "sk-from-the-agent-config")
        assert OPENAI_HOST_KEY not in "\0".join(f"{k}={v}" for k, v in env.items())
        assert "sk-from-the-agent-config" not in "\0".join(env.values())
        for name in (HOST_KEY_ENV, "OPENAI_API_KEY", "CODEX_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL"):
            assert name not in env
    assert os.environ[HOST_KEY_ENV] == OPENAI_HOST_KEY


WARM_ANSWER = "Warm answer."


def answer_watching(marker: str) -> tuple[list[list[dict[str, str]]], Script]:
    """A script that answers every turn, reading the CLI's environment (`marker`) at each call."""
    seen: list[list[dict[str, str]]] = []
    answer = always(Text(WARM_ANSWER))

    def script(request: ModelRequest) -> Reply:
        seen.append(cli_environments(marker))
        return answer(request)

    return seen, script


def warm_on(agent: dict[str, Any], model_id: str, environment: dict[str, str]) -> dict[str, Any]:
    """`agent` warm on host model `model_id`, its `environment` (a provider key the runner drops) instead."""
    agent["config"].update(warm=True, environment=environment)
    agent["resources"] = {"models": [model_id]}
    return agent


@dataclass(frozen=True)
class WarmRuns:
    """Two runs of one conversation answered by a warm CLI on a host model, and what the host counted."""

    first: Finished
    second: Finished
    requests_in_first: int
    """How many model requests had reached the upstream when the first run ended."""
    rows: tuple[list[ModelCallRecord], list[ModelCallRecord]]
    session_id: str
    token: str
    """The session token."""
    ended: httpx2.Response
    """A call with the session token at the session's model route after the second run ended."""


async def two_warm_runs(
    tmp_path: Path,
    agent: dict[str, Any],
    models: dict[str, Any],
    requests: Sequence[object],
    probe: tuple[str, dict[str, Any]],
) -> WarmRuns:
    """Two runs of a new conversation of `agent` on a host with `models`, then `probe` (a path under the
    session's model route and a body) called with the session token. `requests`: the fake upstream's."""
    agent_id, conversation = agent["id"], unique("conv")
    async with harness_host(tmp_path, [agent], models=models) as host:
        first = await run_event(host, message(agent_id, conversation, "First question."))
        requests_in_first = len(requests)
        second = await run_event(host, message(agent_id, conversation, "Second question."))
        rows = (
            await host.stores.usage.calls(first.run.run_id),
            await host.stores.usage.calls(second.run.run_id),
        )
        warm = host.facts.warm
        assert warm is not None
        session_id = WarmSessions.session_id(agent_id, conversation, None)
        token = warm.token(session_id)
        url = f"{host.orchestrator.public_url.rstrip('/')}/sessions/{session_id}/models/{probe[0]}"
        async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=10) as http:
            ended = await http.post(url, json=probe[1])
    return WarmRuns(first, second, requests_in_first, rows, session_id, token, ended)


@dataclass(frozen=True)
class WarmCase:
    """A harness warm on a host model: its agent, its fake upstream, and how its CLI holds the session."""

    agent: Callable[..., dict[str, Any]]
    fake: Callable[[Script], AbstractAsyncContextManager[Any]]
    model: dict[str, Any]
    """The host model entry (`[models.m]`) upstream at the fake's base URL, which `model` adds."""
    api: str
    probe: tuple[str, dict[str, Any]]
    token_env: str
    """The CLI's variable holding the session token (its model credential)."""
    base_url_env: str | None
    upstream_key: Callable[[str], tuple[str, str]]
    """The header the host sends its key upstream in, and its value."""
    marker: str
    """What the CLI's environment holds (to find it in /proc)."""
    own_key: dict[str, str]


WARM_CASES = [
    pytest.param(
        WarmCase(
            claude_agent,
            fake_anthropic,
            {"provider": "anthropic", "model": "claude-sonnet-4-5"},
            "anthropic",
            (
                "anthropic/v1/messages",
                {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
            ),
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            lambda key: ("x-api-key", key),
            "/models/anthropic",
            {"ANTHROPIC_API_KEY": "sk-from-the-agent-config"},
        ),
        id="claude-code",
    ),
    pytest.param(
        WarmCase(
            codex_agent,
            fake_openai,
            {"provider": "openai", "model": "gpt-4o-mini"},
            "responses",
            ("openai/v1/responses", {"model": "m", "input": "hi"}),
            "MCPHOST_MODEL_TOKEN",
            None,
            lambda key: ("authorization", f"Bearer {key}"),
            "MCPHOST_MODEL_TOKEN=",
            {"OPENAI_API_KEY": "sk-from-the-agent-config"},
        ),
        id="codex",
    ),
]


@pytest.mark.parametrize("case", WARM_CASES)
async def test_a_warm_harness_on_a_host_model_answers_run_after_run_through_its_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: WarmCase
) -> None:
    monkeypatch.setenv(HOST_KEY_ENV, HOST_KEY)
    seen, script = answer_watching(case.marker)
    async with case.fake(script) as fake:
        agent = warm_on(case.agent("warm", "", tmp_path / "harness", model="host:m"), "m", case.own_key)
        models = {"m": {**case.model, "base_url": fake.base_url, "api_key_env": HOST_KEY_ENV}}
        runs = await two_warm_runs(tmp_path, agent, models, fake.requests, case.probe)
    for done in (runs.first, runs.second):
        assert done.run.status.value == "completed", (done.terminal["data"], fake.other_paths)
        assert done.answer == WARM_ANSWER
    # One process answered both runs (the second reused the first's), each through the host.
    first_warm = runs.first.terminal["metadata"]["external"]["warm"]
    assert runs.second.terminal["metadata"]["external"]["warm"] == {
        "pid": first_warm["pid"],
        "reused": True,
        "turns": 2,
    }
    assert 0 < runs.requests_in_first < len(fake.requests)
    assert fake.other_paths == []
    header, value = case.upstream_key(HOST_KEY)
    assert {r.headers[header] for r in fake.requests} == {value}
    # Each run's calls are its own usage rows, as many as reached the upstream while it ran.
    assert [len(found) for found in runs.rows] == [
        runs.requests_in_first,
        len(fake.requests) - runs.requests_in_first,
    ]
    for found in runs.rows:
        assert {(c.status, c.api, c.model_id) for c in found} == {("ok", case.api, "m")}
    # The warm CLI's environment, read from /proc at every call: the session's token, no provider key.
    environments = [env for found in seen for env in found]
    assert environments
    for env in environments:
        assert env[case.token_env] == runs.token
        if case.base_url_env is not None:
            assert env[case.base_url_env].endswith(f"/sessions/{runs.session_id}/models/anthropic")
        assert HOST_KEY not in "\0".join(f"{k}={v}" for k, v in env.items())
        assert "sk-from-the-agent-config" not in "\0".join(env.values())
        for name in (
            HOST_KEY_ENV,
            "ANTHROPIC_AUTH_TOKEN",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "OPENAI_API_KEY",
            "CODEX_API_KEY",
        ):
            assert name not in env
    # With its last run ended, the session's credential calls nothing: 403 in the API's own shape.
    assert runs.ended.status_code == 403
    assert "has no run in progress" in runs.ended.json()["error"]["message"]
