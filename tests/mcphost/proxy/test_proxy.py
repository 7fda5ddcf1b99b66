"""The per-run model endpoints over real stores, against fake Anthropic and OpenAI APIs on 127.0.0.1."""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence

import anyio
import pytest

from mcphost.errors import StorageUnavailableError
from mcphost.llm import ModelConfig
from mcphost.models import RunStatus
from mcphost.stores import Stores
from mcphost.stores.usage import FinishedCall
from tests.fakes.anthropic import INPUT_TOKENS, OUTPUT_TOKENS, fake_anthropic
from tests.fakes.openai import fake_openai
from tests.fakes.openai_chat import Reply, serve_fake_chat
from tests.fakes.script import Fail, Hang, Text, always
from tests.mcphost.proxy.kit import HOST_KEY, HOST_KEY_ENV, chat, claude, client, serve_proxy, sse_events


@pytest.fixture(autouse=True)
def host_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOST_KEY_ENV, HOST_KEY)


MESSAGES = {"max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}


async def test_an_anthropic_call_passes_through_with_the_host_key_and_is_counted(stores: Stores) -> None:
    async with (
        fake_anthropic(always(Text("hello from upstream"))) as upstream,
        serve_proxy(stores, {"sonnet": claude(upstream.base_url)}) as served,
    ):
        run = await served.start_run(["sonnet"])
        async with client(run.token) as http:
            answer = await http.post(
                f"{served.anthropic(run)}/v1/messages",
                json={"model": "sonnet", **MESSAGES, "tools": [{"name": "t"}]},
            )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["content"] == [{"type": "text", "text": "hello from upstream"}]
        [sent] = upstream.requests
        assert sent.body["model"] == "claude-sonnet-4-5"
        assert sent.body["messages"] == MESSAGES["messages"]
        assert sent.headers["x-api-key"] == HOST_KEY
        assert run.token not in json.dumps(sent.headers)
        await served.proxy.settle(run.run_id)  # what the orchestrator does as a run closes
        [call] = await stores.usage.calls(run.run_id)
        assert (call.status, call.model_id, call.upstream_model) == ("ok", "sonnet", "claude-sonnet-4-5")
        assert (call.input_tokens, call.output_tokens, call.cached_tokens) == (INPUT_TOKENS, OUTPUT_TOKENS, 0)
        # priced from the genai-prices table: $3 / $15 per million
        assert call.cost_usd == pytest.approx((INPUT_TOKENS * 3 + OUTPUT_TOKENS * 15) / 1e6)
        assert call.agent_id == "agent-a"
        assert call.actor_id == "user-1"
        assert call.conversation_id == "conv-1"
        assert served.calls == [("sonnet", "agent-a", (INPUT_TOKENS, OUTPUT_TOKENS, 0), call.cost_usd)]


async def test_an_anthropic_stream_is_relayed_event_by_event_with_its_usage(stores: Stores) -> None:
    async with (
        fake_anthropic(always(Text("streamed words"))) as upstream,
        serve_proxy(stores, {"sonnet": claude(upstream.base_url)}) as served,
    ):
        run = await served.start_run(["sonnet"])
        async with client(run.token, bearer=True) as http:
            answer = await http.post(
                f"{served.anthropic(run)}/v1/messages?beta=true",
                json={"model": "sonnet", "stream": True, **MESSAGES, "tools": [{"name": "t"}]},
            )
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        names = [name for name, _ in sse_events(answer.text)]
        assert names[0] == "message_start"
        assert names[-1] == "message_stop"
        text = "".join(
            json.loads(d)["delta"]["text"] for n, d in sse_events(answer.text) if n == "content_block_delta"
        )
        assert text == "streamed words"
        assert upstream.requests[0].path == "/v1/messages"
        await served.proxy.settle(run.run_id)  # what the orchestrator does as a run closes
        [call] = await stores.usage.calls(run.run_id)
        assert call.streamed
        assert call.status == "ok"
        assert (call.input_tokens, call.output_tokens) == (INPUT_TOKENS, OUTPUT_TOKENS)
        assert call.ttft_ms is not None
        assert call.latency_ms is not None
        assert call.ttft_ms <= call.latency_ms


async def test_openai_chat_and_responses_streams_are_relayed_with_usage(stores: Stores) -> None:
    async with (
        serve_fake_chat() as chat_upstream,
        fake_openai(always(Text("a response"))) as responses_upstream,
        serve_proxy(
            stores,
            {
                "small": chat(chat_upstream.base_url),
                "gpt": ModelConfig(
                    provider="openai", base_url=responses_upstream.base_url, model="gpt-4o-mini"
                ),
            },
        ) as served,
    ):
        chat_upstream.script("m1", Reply(content="two words", usage=(11, 2)))
        run = await served.start_run(["small", "gpt"])
        async with client(run.token, bearer=True) as http:
            answer = await http.post(
                f"{served.openai(run)}/chat/completions",
                json={"model": "small", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
            )
            assert answer.status_code == 200
            assert sse_events(answer.text)[-1] == (None, "[DONE]")
            assert chat_upstream.requests[0].body["stream_options"] == {"include_usage": True}
            answer = await http.post(
                f"{served.openai(run)}/responses",
                json={
                    "model": "gpt",
                    "stream": True,
                    "input": "hi",
                    "tools": [{"type": "function", "name": "f"}],
                },
            )
            assert answer.status_code == 200
            assert json.loads(sse_events(answer.text)[-1][1])["type"] == "response.completed"
            listed = (await http.get(f"{served.openai(run)}/models")).json()
        assert [m["id"] for m in listed["data"]] == ["gpt", "small"]
        await served.proxy.settle(run.run_id)  # what the orchestrator does as a run closes
        calls = await stores.usage.calls(run.run_id)
        assert [(c.model_id, c.status, c.input_tokens, c.output_tokens) for c in calls] == [
            ("small", "ok", 11, 2),
            ("gpt", "ok", 23, 7),
        ]


async def test_refusals_come_in_each_wire_format_s_own_error_shape(stores: Stores) -> None:
    async with (
        fake_anthropic(always(Text("never"))) as upstream,
        serve_proxy(
            stores, {"sonnet": claude(upstream.base_url), "other": claude(upstream.base_url, model="x")}
        ) as served,
    ):
        run = await served.start_run(["sonnet"])
        another = await served.start_run(["sonnet"], conversation_id="conv-2")
        url = f"{served.anthropic(run)}/v1/messages"
        openai_url = f"{served.openai(run)}/chat/completions"
        async with client(run.token) as http, client(another.token) as stranger, client(None) as anonymous:
            cases = [
                (
                    await anonymous.post(url, json={"model": "sonnet", **MESSAGES}),
                    401,
                    "authentication_error",
                ),
                (await stranger.post(url, json={"model": "sonnet", **MESSAGES}), 401, "authentication_error"),
                (await http.post(url, json={"model": "other", **MESSAGES}), 403, "permission_error"),
                (await http.post(url, content=b"{not json"), 400, "invalid_request_error"),
                (
                    await http.post(url, content=b'{"model": "sonnet", "x": NaN}'),
                    400,
                    "invalid_request_error",
                ),
                (await http.post(url, content=b"[" * 3000 + b"]" * 3000), 400, "invalid_request_error"),
                (
                    await http.post(
                        url, content=b'{"model": "sonnet", "a":' + b"[" * 200 + b"]" * 200 + b"}"
                    ),
                    400,
                    "invalid_request_error",
                ),
                (await http.post(url, content=b"x" * (33 * 1024 * 1024)), 413, "request_too_large"),
                (await http.post(url, json={"model": 5}), 400, "invalid_request_error"),
            ]
            for answer, status, kind in cases:
                assert answer.status_code == status, answer.text
                body = answer.json()
                assert body.get("type") == "error", (status, body)
                assert body["error"]["type"] == kind, (status, body)
            openai_refused = await stranger.post(openai_url, json={"model": "sonnet", "messages": []})
            other_wire = await http.post(openai_url, json={"model": "sonnet", "messages": []})
        assert openai_refused.status_code == 401
        assert openai_refused.json()["error"]["code"] == "invalid_api_key"
        assert other_wire.status_code == 400
        assert "cannot be translated" in other_wire.json()["error"]["message"]  # no messages to translate
        assert "resources.models" in cases[2][0].json()["error"]["message"]
        assert upstream.requests == []
        await served.proxy.settle(run.run_id)  # what the orchestrator does as a run closes
        assert await stores.usage.calls(run.run_id) == []


async def test_a_run_that_ended_is_refused_at_once(stores: Stores) -> None:
    async with (
        fake_anthropic(always(Text("hi"))) as upstream,
        serve_proxy(stores, {"sonnet": claude(upstream.base_url)}) as served,
    ):
        run = await served.start_run(["sonnet"])
        await stores.runs.transition(run.run_id, RunStatus.COMPLETED)
        async with client(run.token) as http:
            answer = await http.post(
                f"{served.anthropic(run)}/v1/messages", json={"model": "sonnet", **MESSAGES}
            )
        assert answer.status_code == 401
        assert "not active" in answer.json()["error"]["message"]


async def test_a_failing_model_falls_back_and_each_attempt_is_recorded(stores: Stores) -> None:
    async with serve_fake_chat() as upstream:
        upstream.script("m1", Reply(status=503, error="overloaded"))
        upstream.script("m2", Reply(content="from the fallback", json_body=True, usage=(8, 3)))
        models = {
            "main": chat(upstream.base_url, "m1", fallback=["spare"]),
            "spare": chat(upstream.base_url, "m2"),
        }
        async with serve_proxy(stores, models) as served:
            run = await served.start_run(["main"])
            async with client(run.token, bearer=True) as http:
                answer = await http.post(
                    f"{served.openai(run)}/chat/completions", json={"model": "main", "messages": []}
                )
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"] == "from the fallback"
    assert upstream.models == ["m1", "m2"]
    calls = await stores.usage.calls(run.run_id)
    assert [(c.model_id, c.attempt, c.status, c.http_status, c.output_tokens) for c in calls] == [
        ("main", 1, "failed", 503, 0),
        ("spare", 2, "ok", 200, 3),
    ]
    assert "overloaded" in (calls[0].error or "")


async def test_an_upstream_that_hangs_resets_or_answers_garbage_gets_a_precise_error(stores: Stores) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead_url = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    closed.close()
    async with serve_fake_chat() as upstream:
        upstream.script("hang", Reply(hang=True), Reply(hang=True))
        upstream.script("junk", Reply(text_body="<html>oops</html>"), Reply(raw=("not json",)))
        models = {
            "hang": chat(upstream.base_url, "hang", timeout_s=0.5),
            "junk": chat(upstream.base_url, "junk"),
            "dead": chat(dead_url, "dead", connect_timeout_s=1),
        }
        async with serve_proxy(stores, models) as served:
            run = await served.start_run(["hang", "junk", "dead"])
            url = f"{served.openai(run)}/chat/completions"
            async with client(run.token, bearer=True) as http:
                with anyio.fail_after(20):
                    hung = await http.post(url, json={"model": "hang", "messages": []})
                    hung_stream = await http.post(url, json={"model": "hang", "stream": True, "messages": []})
                    junk = await http.post(url, json={"model": "junk", "messages": []})
                    junk_stream = await http.post(url, json={"model": "junk", "stream": True, "messages": []})
                    dead = await http.post(url, json={"model": "dead", "messages": []})
    assert hung.status_code == 504
    assert hung.json()["error"]["code"] == "upstream_timeout"
    assert "did not answer within 0.5 s" in hung.json()["error"]["message"]
    assert hung_stream.status_code == 504
    assert junk.status_code == 502
    assert "not JSON" in junk.json()["error"]["message"]
    assert junk_stream.status_code == 200
    last = sse_events(junk_stream.text)[-1]
    assert "ended its stream before the end" in json.loads(last[1])["error"]["message"]
    assert dead.status_code == 502
    assert "could not be reached" in dead.json()["error"]["message"]
    statuses = [c.status for c in await stores.usage.calls(run.run_id)]
    assert statuses == ["failed"] * 5


async def test_a_stream_that_stops_mid_way_ends_with_an_error_event(stores: Stores) -> None:
    async with (
        fake_anthropic(always(Hang())) as upstream,
        serve_proxy(stores, {"sonnet": claude(upstream.base_url, timeout_s=0.5)}) as served,
    ):
        run = await served.start_run(["sonnet"])
        async with client(run.token) as http:
            with anyio.fail_after(20):
                answer = await http.post(
                    f"{served.anthropic(run)}/v1/messages",
                    json={"model": "sonnet", "stream": True, **MESSAGES, "tools": [{"name": "t"}]},
                )
    events = sse_events(answer.text)
    assert events[0][0] == "message_start"
    assert events[-1][0] == "error"
    assert json.loads(events[-1][1])["error"]["type"] == "api_error"
    [call] = await stores.usage.calls(run.run_id)
    assert call.status == "failed"
    assert "sent nothing for 0.5 s" in (call.error or "")
    assert call.input_tokens == INPUT_TOKENS


async def test_a_model_the_upstream_refuses_is_answered_with_the_upstream_s_own_error(stores: Stores) -> None:
    async with (
        fake_anthropic(always(Fail(status=400, message="bad tool schema"))) as upstream,
        serve_proxy(stores, {"sonnet": claude(upstream.base_url, fallback=[])}) as served,
    ):
        run = await served.start_run(["sonnet"])
        async with client(run.token) as http:
            answer = await http.post(
                f"{served.anthropic(run)}/v1/messages",
                json={"model": "sonnet", **MESSAGES, "tools": [{"name": "t"}]},
            )
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "bad tool schema"
    [call] = await stores.usage.calls(run.run_id)
    assert (call.status, call.http_status) == ("failed", 400)


async def test_usage_rows_are_written_after_the_answer_yet_never_lost(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = stores.usage.record
    refusals = 2

    async def flaky(calls: Sequence[FinishedCall]) -> None:
        nonlocal refusals
        if refusals:
            refusals -= 1
            raise StorageUnavailableError("the database is away for a moment")
        await record(calls)

    monkeypatch.setattr(stores.usage, "record", flaky)
    async with (
        fake_anthropic(always(Text("hi"))) as upstream,
        serve_proxy(stores, {"sonnet": claude(upstream.base_url)}) as served,
    ):
        run = await served.start_run(["sonnet"])
        async with client(run.token) as http:
            first = await http.post(
                f"{served.anthropic(run)}/v1/messages", json={"model": "sonnet", **MESSAGES}
            )
            assert first.status_code == 200
            # The run begins to close: its rows are in before settle returns, the refusals retried.
            await served.proxy.settle(run.run_id)
            assert refusals == 0
            assert [c.status for c in await stores.usage.calls(run.run_id)] == ["ok"]
            second = await http.post(
                f"{served.anthropic(run)}/v1/messages", json={"model": "sonnet", **MESSAGES}
            )
            assert second.status_code == 200
    # The host stopped right after the answer: the writer wrote the row on its way out.
    calls = await stores.usage.calls(run.run_id)
    assert [(c.status, c.input_tokens, c.output_tokens) for c in calls] == [
        ("ok", INPUT_TOKENS, OUTPUT_TOKENS)
    ] * 2
