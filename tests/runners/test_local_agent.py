"""The local agent as the host launches it (`python -m mcphost_runners.local_agent`), end to end: a fake
OpenAI-compatible server on 127.0.0.1 (`tests/fakes/openai_chat.py`) scripted per test, the real facts
server over HTTP on real stores, runs admitted with real grants, and a fake upstream host tool."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

from mcphost.plugins.process import PluginSpec, PluginSupervisor
from mcphost.protocol import JSONObject
from mcphost.stores import Stores, open_stores
from mcphost_runners.local_agent import LocalAgentRunner
from tests.fakes.openai_chat import FakeChatServer, FakeToolCall, Reply, serve_fake_chat
from tests.mcphost.facts._helpers import RunHandle, Served, serve_facts
from tests.plugins.support import FAST, REPO, collect
from tests.runners.test_runapi import SearchTools

LOCAL = "plugin:mcphost/local-agent/default"
PERMISSIONS: JSONObject = LocalAgentRunner.permissions.model_dump(mode="json")
KEY_ENV = "FAKE_OPENAI_KEY"
KEY = "sk-test-1234"


@pytest.fixture(scope="module")
async def plugin() -> AsyncGenerator[PluginSupervisor]:
    """One local agent plugin process for the module (it serves many runs), with the API key in its env."""
    spec = PluginSpec(
        "local-agent", [sys.executable, "-m", "mcphost_runners.local_agent"], {KEY_ENV: KEY}, REPO
    )
    async with PluginSupervisor([spec], timings=FAST) as supervisor:
        yield supervisor


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncGenerator[Stores]:
    async with open_stores(f"sqlite+aiosqlite:///{tmp_path / 'db' / 'mcphost.db'}", tmp_path / "data") as s:
        yield s


@pytest.fixture
async def served(stores: Stores) -> AsyncGenerator[Served]:
    async with serve_facts(stores, host_tools=SearchTools()) as found:
        yield found


@pytest.fixture(scope="module")
async def fake_server() -> AsyncGenerator[FakeChatServer]:
    async with serve_fake_chat() as server:
        yield server


@pytest.fixture
def fake(fake_server: FakeChatServer) -> FakeChatServer:
    """The module's fake model server, with no requests or scripts left from earlier tests."""
    fake_server.reset()
    return fake_server


async def run_agent(
    served: Served,
    plugin: PluginSupervisor,
    fake: FakeChatServer,
    text: str = "hi",
    *,
    config: JSONObject | None = None,
    agent: JSONObject | None = None,
    **options: Any,
) -> tuple[str, list[JSONObject], RunHandle]:
    """One run of the local agent against the fake: (status, results, run)."""
    settings: JSONObject = {
        "base_url": fake.base_url,
        "model": "m1",
        "api_key_env": KEY_ENV,
        **(config or {}),
    }
    run = await served.start_run(
        runner=LOCAL,
        permissions=PERMISSIONS,
        text=text,
        agent={"config": settings, **(agent or {})},
        **options,
    )
    status, results = await collect(plugin.plugins[0], run.context)
    await served.finish(run)
    return status, [r.obj for r in results], run


def types_of(results: list[JSONObject]) -> list[str]:
    return [str(r["type"]) for r in results]


def final(results: list[JSONObject]) -> JSONObject:
    assert results, "no results"
    return results[-1]["data"]


def failure(status: str, results: list[JSONObject]) -> JSONObject:
    assert status == "failed"
    assert results[-1]["type"] == "run.failed", types_of(results)
    return final(results)


async def test_it_streams_the_answer_with_the_prompt_history_and_input(
    served: Served, plugin: PluginSupervisor, fake: FakeChatServer
) -> None:
    await served.stores.transcript.append(conversation_id="conv-1", role="user", content="my name is Ada")
    await served.stores.transcript.append(conversation_id="conv-1", role="assistant", content="Hello Ada")
    fake.script("m1", Reply(content="Nice to see you again, Ada.", usage=(42, 7)))
    status, results, _ = await run_agent(served, plugin, fake, "who am I?")
    assert status == "completed"
    deltas = [r for r in results if r["type"] == "message.delta"]
    assert len(deltas) > 3  # streamed in pieces as the chunks arrived
    assert types_of(results)[len(deltas) :] == ["message.completed", "run.completed"]
    text = "".join(d["data"]["chunk"]["content"] for d in deltas)
    assert text == "Nice to see you again, Ada."
    assert results[-2]["data"]["message"]["content"] == text
    assert final(results)["usage"] == {
        "input_tokens": 42,
        "output_tokens": 7,
        "total_tokens": 49,
        "cost_usd": None,
        "extra": {"model": "m1", "tool_rounds": 0},
    }
    assert final(results)["finish_reason"] == "stop"

    [request] = fake.requests
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.body["stream"] is True
    assert request.messages == [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": "my name is Ada"},
        {"role": "assistant", "content": "Hello Ada"},
        {"role": "user", "content": "who am I?"},
    ]
    assert {"history_page", "history_search", "state_set", "search__find"} <= set(request.tool_names)
    history_page = next(t for t in request.body["tools"] if t["function"]["name"] == "history_page")
    assert "before_cursor" in history_page["function"]["parameters"]["properties"]


async def test_it_runs_a_multi_round_tool_loop_over_facts_and_host_tools(
    served: Served, plugin: PluginSupervisor, fake: FakeChatServer
) -> None:
    await served.stores.transcript.append(conversation_id="conv-1", role="user", content="I like apple pie")
    fake.script(
        "m1",
        Reply(
            tool_calls=(
                FakeToolCall("history_page", {"limit": 5}, id="call_h"),
                FakeToolCall("search__find", {"q": "pie recipes"}, id="call_s"),
            )
        ),
        Reply(
            content="Let me note that.",
            tool_calls=(
                FakeToolCall("state_set", {"scope": "conversation", "key": "likes", "value": "pie"}),
            ),
        ),
        Reply(content="You like apple pie; noted."),
    )
    status, results, run = await run_agent(
        served, plugin, fake, "what do I like?", config={"history_turns": 0}
    )
    assert status == "completed", results[-1]
    tool_results = [r for r in results if r["type"].startswith("tool.call")]
    assert [(r["type"], r["data"]["tool_name"]) for r in tool_results] == [
        ("tool.call.started", "history_page"),
        ("tool.call.completed", "history_page"),
        ("tool.call.started", "search__find"),
        ("tool.call.completed", "search__find"),
        ("tool.call.started", "state_set"),
        ("tool.call.completed", "state_set"),
    ]
    assert tool_results[0]["data"]["parameters"] == {"limit": 5}
    assert tool_results[1]["data"]["result_preview"].startswith('{"items": [{"cursor": ')
    assert tool_results[3]["data"]["result_preview"] == "found pie recipes"
    assert all(r["data"].get("error_code") is None for r in tool_results)

    # The model read each round's tool results, in order, under its call ids.
    second, third = fake.requests[1].messages, fake.requests[2].messages
    assert second[-3]["tool_calls"][0]["function"]["name"] == "history_page"
    assert second[-2]["tool_call_id"] == "call_h"
    assert "I like apple pie" in second[-2]["content"]
    assert second[-1] == {"role": "tool", "tool_call_id": "call_s", "content": "found pie recipes"}
    assert third[-2]["content"] == "Let me note that."
    assert json.loads(third[-1]["content"])["key"] == "likes"

    # Every call went through the facts server (audited) and the state write happened there.
    assert [(a.tool, a.outcome) for a in await served.audit(run)] == [
        ("history_page", "ok"),
        ("search__find", "ok"),
        ("state_set", "ok"),
    ]
    owner = run.grant.state_scope_id("conversation")
    assert owner is not None
    stored = await served.stores.state.get("conversation", owner, "likes")
    assert stored is not None
    assert stored.value == "pie"

    message = next(r for r in results if r["type"] == "message.completed")["data"]["message"]["content"]
    assert message == "Let me note that.\n\nYou like apple pie; noted."
    deltas = "".join(r["data"]["chunk"]["content"] for r in results if r["type"] == "message.delta")
    assert deltas == message
    assert final(results)["usage"]["input_tokens"] == 30
    assert final(results)["usage"]["extra"] == {"model": "m1", "tool_rounds": 2}


async def test_tool_errors_go_back_to_the_model_and_the_rounds_are_bounded(
    served: Served, plugin: PluginSupervisor, fake: FakeChatServer
) -> None:
    fake.script(
        "m1",
        Reply(
            tool_calls=(
                FakeToolCall("state_set", {"scope": "actor", "key": "k", "value": 1}, id="c1"),
                FakeToolCall("history_page", "{not json", id="c2"),
            )
        ),
        Reply(content="Sorry, I cannot do that."),
    )
    status, results, _ = await run_agent(
        served,
        plugin,
        fake,
        config={"max_tool_rounds": 1},
        agent={"state": {"scopes": ["conversation"], "write": True}},
    )
    assert status == "completed"
    completed = [r["data"] for r in results if r["type"] == "tool.call.completed"]
    assert [(c["tool_name"], c["error_code"]) for c in completed] == [
        ("state_set", "unauthorized"),
        ("history_page", "invalid_argument"),
    ]
    fed_back = fake.requests[1].messages[-2:]
    assert fed_back[0]["content"].startswith("unauthorized: This run may not write 'actor' state")
    assert fed_back[1]["content"].startswith("invalid_argument: the arguments are not a JSON object")
    assert "tools" in fake.requests[0].body
    assert "tools" not in fake.requests[1].body  # the last round is asked without tools: it must answer


@pytest.mark.parametrize("status", [500, 404])
async def test_it_falls_back_to_the_next_model_when_one_fails(
    served: Served, plugin: PluginSupervisor, fake: FakeChatServer, status: int
) -> None:
    fake.script("m1", Reply(status=status, error="model is down"))
    fake.script("m2", Reply(content="from the fallback"), Reply(content="again"))
    config = {"fallback_models": ["m2", "m3"]}
    result, results, _ = await run_agent(served, plugin, fake, config=config)
    assert result == "completed"
    assert fake.models == ["m1", "m2"]
    assert results[-2]["data"]["message"]["content"] == "from the fallback"
    assert final(results)["usage"]["extra"]["model"] == "m2"


async def test_when_every_model_fails_the_run_names_each_attempt(
    served: Served, plugin: PluginSupervisor, fake: FakeChatServer
) -> None:
    fake.script("m1", Reply(status=503))
    fake.script("m2", Reply(status=500, error="overloaded"))
    status, results, _ = await run_agent(served, plugin, fake, config={"fallback_models": ["m2"]})
    failed = failure(status, results)
    assert (failed["code"], failed["retryable"]) == ("runtime_error", True)
    assert "HTTP 500: overloaded" in failed["message"]
    assert [(t["model"], t["code"]) for t in failed["details"]["tried"]] == [
        ("m1", "runtime_error"),
        ("m2", "runtime_error"),
    ]


async def test_an_auth_failure_is_unauthorized_and_not_retried_on_other_models(
    served: Served, plugin: PluginSupervisor, fake: FakeChatServer
) -> None:
    fake.script("m1", Reply(status=401, error="Incorrect API key provided"))
    status, results, _ = await run_agent(served, plugin, fake, config={"fallback_models": ["m2"]})
    failed = failure(status, results)
    assert (failed["code"], failed["retryable"]) == ("unauthorized", False)
    assert "Incorrect API key provided" in failed["message"]
    assert fake.models == ["m1"]
    assert KEY not in json.dumps(results)


async def test_a_missing_api_key_variable_is_unauthorized_and_says_how_to_pass_it(
    served: Served, plugin: PluginSupervisor, fake: FakeChatServer
) -> None:
    status, results, _ = await run_agent(served, plugin, fake, config={"api_key_env": "NO_SUCH_KEY_VAR"})
    failed = failure(status, results)
    assert failed["code"] == "unauthorized"
    assert "'NO_SUCH_KEY_VAR'" in failed["message"]
    assert "[[plugins]] env" in failed["message"]
    assert fake.requests == []


async def test_a_rate_limit_is_rate_limited_and_retryable(
    served: Served, plugin: PluginSupervisor, fake: FakeChatServer
) -> None:
    fake.script("m1", Reply(status=429, error="slow down", headers=(("retry-after", "7"),)))
    status, results, _ = await run_agent(served, plugin, fake)
    failed = failure(status, results)
    assert (failed["code"], failed["retryable"]) == ("rate_limited", True)
    assert failed["details"]["retry_after"] == "7"
    assert failed["details"]["status"] == 429


async def test_a_model_that_does_not_answer_in_time_is_a_runner_timeout(
    served: Served, plugin: PluginSupervisor, fake: FakeChatServer
) -> None:
    fake.script("m1", Reply(hang=True))
    status, results, _ = await run_agent(served, plugin, fake, config={"timeout_s": 0.5})
    failed = failure(status, results)
    assert (failed["code"], failed["retryable"]) == ("runner.timeout", True)
    assert failed["details"]["timeout_s"] == 0.5


async def test_a_model_still_silent_at_the_runs_deadline_is_deadline_exceeded(
    served: Served, plugin: PluginSupervisor, fake: FakeChatServer
) -> None:
    fake.script("m1", Reply(hang=True))
    status, results, _ = await run_agent(served, plugin, fake, timeout_s=2.0)
    failed = failure(status, results)
    assert failed["code"] == "deadline_exceeded"


@pytest.mark.parametrize(
    ("raw", "what"),
    [
        (("{not json",), "a chunk that is not JSON"),
        (('{"choices": "nope"}',), "a chunk without the chunk shape"),
        (('{"choices": [{"index": 0, "delta": {"content": "half an ans"}}]}',), "the stream ended before"),
        (
            ('{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c"}]}}]}', "[DONE]"),
            "tool call #0 has no function name",
        ),
    ],
)
async def test_malformed_model_output_is_a_runner_error_with_details(
    served: Served, plugin: PluginSupervisor, fake: FakeChatServer, raw: tuple[str, ...], what: str
) -> None:
    fake.script("m1", Reply(raw=raw))
    fake.script("m2", Reply(content="never asked"))
    status, results, _ = await run_agent(served, plugin, fake, config={"fallback_models": ["m2"]})
    failed = failure(status, results)
    assert failed["code"] == "runner.error"
    assert what in failed["message"]
    assert failed["details"]["model"] == "m1"
    assert "data" in failed["details"]
    assert fake.models == ["m1"]


async def test_a_non_streamed_json_answer_is_accepted(
    served: Served, plugin: PluginSupervisor, fake: FakeChatServer
) -> None:
    fake.script(
        "m1",
        Reply(json_body=True, tool_calls=(FakeToolCall("state_get", {"scope": "conversation", "key": "x"}),)),
        Reply(json_body=True, content="plain JSON answer"),
    )
    status, results, _ = await run_agent(served, plugin, fake)
    assert status == "completed"
    assert results[-2]["data"]["message"]["content"] == "plain JSON answer"
    assert [r["data"]["tool_name"] for r in results if r["type"] == "tool.call.completed"] == ["state_get"]


async def test_images_reach_a_vision_model_as_data_urls_read_over_mcp(
    served: Served, plugin: PluginSupervisor, fake: FakeChatServer
) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
    image = await served.stores.artifacts.put_bytes(
        png, name="dot.png", mime_type="image/png", max_bytes=1024, conversation_id="conv-1"
    )
    attachment: JSONObject = {"artifact_id": image.artifact_id, "name": "dot.png", "mime_type": "image/png"}
    fake.script("m1", Reply(content="A dot."), Reply(content="I cannot see it."))
    status, _, run = await run_agent(
        served, plugin, fake, "what is this?", config={"vision": True}, attachments=[attachment]
    )
    assert status == "completed"
    assert fake.requests[0].messages[-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {
                "type": "image_url",
                "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()},
            },
        ],
    }
    assert "artifacts_read" in [a.tool for a in await served.audit(run)]

    status, _, _ = await run_agent(served, plugin, fake, "and now?", attachments=[attachment])
    assert status == "completed"
    assert fake.requests[1].messages[-1] == {
        "role": "user",
        "content": "and now?\n\n[image dot.png not shown: vision is off]",
    }


async def test_a_bad_config_is_invalid_argument_naming_the_field(
    served: Served, plugin: PluginSupervisor, fake: FakeChatServer
) -> None:
    status, results, _ = await run_agent(served, plugin, fake, config={"fallback_models": "m2"})
    failed = failure(status, results)
    assert failed["code"] == "invalid_argument"
    assert "config.fallback_models" in failed["message"]


async def test_an_own_model_without_a_base_url_or_an_empty_host_model_is_invalid_argument(
    served: Served, plugin: PluginSupervisor, fake: FakeChatServer
) -> None:
    status, results, _ = await run_agent(
        served, plugin, fake, config={"base_url": None, "model": "host:small", "fallback_models": ["m2"]}
    )
    failed = failure(status, results)
    assert failed["code"] == "invalid_argument"
    assert "base_url is required for model 'm2', which is not a host model" in failed["message"]
    status, results, _ = await run_agent(served, plugin, fake, config={"model": "host:"})
    assert "'host:' names no model" in failure(status, results)["message"]
    assert fake.requests == []


async def test_a_host_model_the_run_is_not_granted_fails_before_any_call_naming_the_key(
    served: Served, plugin: PluginSupervisor, fake: FakeChatServer
) -> None:
    status, results, _ = await run_agent(
        served, plugin, fake, config={"base_url": None, "model_source": "host", "model": "small"}
    )
    failed = failure(status, results)
    assert failed["code"] == "unauthorized"
    assert failed["message"].startswith(
        "Host model 'small' ('small' in the local agent's config) is not granted"
    )
    assert "add 'small' to resources.models of the agent" in failed["message"]
    assert failed["details"] == {"model": "small", "granted": []}
    assert fake.requests == []


def test_the_manifest_declares_the_config_form() -> None:
    manifest = LocalAgentRunner().manifest(author="mcphost", plugin="local-agent")
    assert manifest.id == LOCAL
    fields = {f.name: f for f in manifest.config_schema}
    assert [name for name, f in fields.items() if f.required] == ["model"]
    assert fields["model_source"].default == "own"
    assert fields["fallback_models"].default == []
    assert fields["max_tool_rounds"].default == 8
    assert fields["history_turns"].default == 10
    assert manifest.capabilities.tool_calling
    assert manifest.permissions.tools == ["call"]
    assert manifest.permissions.models == ["invoke", "stream"]
