"""Calls translated between wire formats, through the real proxy app against fakes on 127.0.0.1.

Each client format on a model of another: Anthropic Messages (Claude Code) on an OpenAI-compatible chat
model, Chat Completions on an Anthropic model, Responses (Codex) on an Anthropic model and on an
OpenAI-compatible model that serves Chat Completions only. Whole and streamed, tool calls, the
upstream's usage counted, its errors and the host's refusals in the client's error shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import ModuleType

import pytest

from mcphost.llm import translate
from mcphost.recording import DocumentCall, RecordingDocument, ReplayBook
from mcphost.stores import Stores
from mcphost.stores.recordings import RecordingHeader
from tests.fakes.anthropic import INPUT_TOKENS, OUTPUT_TOKENS, fake_anthropic
from tests.fakes.openai_chat import FakeToolCall, Reply, serve_fake_chat
from tests.fakes.script import Fail, Text, ToolCall, always
from tests.mcphost.proxy.kit import HOST_KEY, HOST_KEY_ENV, chat, claude, client, serve_proxy, sse_events


@pytest.fixture(autouse=True)
def host_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOST_KEY_ENV, HOST_KEY)


TOOL = {
    "name": "lookup",
    "description": "Look a word up.",
    "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}},
}
ANTHROPIC_TURN = {
    "model": "local",
    "max_tokens": 64,
    "system": "You are terse.",
    "tools": [TOOL],
    "messages": [
        {"role": "user", "content": "define mcp"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {"word": "mcp"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "a protocol"}],
        },
    ],
}


def _missing(name: str) -> ModuleType:
    """An importer for a host without the `translate` extra."""
    raise ImportError(f"No module named {name.split('.')[0]!r}")


def _data(text: str) -> Iterator[dict[str, object]]:
    for _, data in sse_events(text):
        if data != "[DONE]":
            yield json.loads(data)


async def test_an_anthropic_client_calls_a_chat_model_whole_with_tools_and_its_usage_counted(
    stores: Stores,
) -> None:
    async with (
        serve_fake_chat() as upstream,
        serve_proxy(stores, {"local": chat(upstream.base_url)}) as served,
    ):
        upstream.script(
            "m1",
            Reply(
                tool_calls=(FakeToolCall("lookup", {"word": "host"}, id="call_9"),),
                json_body=True,
                usage=(40, 6),
            ),
        )
        run = await served.start_run(["local"])
        async with client(run.token) as http:
            answer = await http.post(f"{served.anthropic(run)}/v1/messages", json=ANTHROPIC_TURN)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["type"] == "message"
        assert body["stop_reason"] == "tool_use"
        assert body["content"] == [
            {"type": "tool_use", "id": "call_9", "name": "lookup", "input": {"word": "host"}}
        ]
        assert body["usage"]["input_tokens"] == 40
        assert body["usage"]["output_tokens"] == 6
        [sent] = upstream.requests
        assert sent.body["model"] == "m1"
        assert sent.headers["authorization"] == f"Bearer {HOST_KEY}"
        assert run.token not in json.dumps(sent.headers)
        assert sent.messages[0] == {"role": "system", "content": "You are terse."}
        assert sent.messages[-1] == {"role": "tool", "tool_call_id": "tu_1", "content": "a protocol"}
        assert sent.tool_names == ["lookup"]
        await served.proxy.settle(run.run_id)
        [call] = await stores.usage.calls(run.run_id)
        assert (call.status, call.api, call.input_tokens, call.output_tokens) == ("ok", "anthropic", 40, 6)


async def test_an_anthropic_client_streams_from_a_chat_model(stores: Stores) -> None:
    async with (
        serve_fake_chat() as upstream,
        serve_proxy(stores, {"local": chat(upstream.base_url)}) as served,
    ):
        upstream.script("m1", Reply(content="three small words", usage=(12, 3)))
        run = await served.start_run(["local"])
        async with client(run.token) as http:
            answer = await http.post(
                f"{served.anthropic(run)}/v1/messages?beta=true", json={**ANTHROPIC_TURN, "stream": True}
            )
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].startswith("text/event-stream")
        events = sse_events(answer.text)
        names = [name for name, _ in events]
        assert names[0] == "message_start"
        assert names[-2:] == ["message_delta", "message_stop"]
        text = "".join(
            str(d["delta"]["text"])  # type: ignore[index]
            for d in _data(answer.text)
            if d.get("type") == "content_block_delta"
        )
        assert text == "three small words"
        assert upstream.requests[0].body["stream"] is True
        assert upstream.requests[0].body["stream_options"] == {"include_usage": True}
        await served.proxy.settle(run.run_id)
        [call] = await stores.usage.calls(run.run_id)
        assert (call.status, call.streamed, call.input_tokens, call.output_tokens) == ("ok", True, 12, 3)


async def test_a_chat_client_calls_an_anthropic_model_whole_and_streamed(stores: Stores) -> None:
    async with (
        fake_anthropic(always(ToolCall("lookup", {"word": "x"}))) as upstream,
        serve_proxy(stores, {"sonnet": claude(upstream.base_url)}) as served,
    ):
        run = await served.start_run(["sonnet"])
        turn = {
            "model": "sonnet",
            "max_tokens": 32,
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
            "tools": [
                {"type": "function", "function": {"name": "lookup", "parameters": TOOL["input_schema"]}}
            ],
        }
        async with client(run.token, bearer=True) as http:
            whole = await http.post(f"{served.openai(run)}/chat/completions", json=turn)
            streamed = await http.post(
                f"{served.openai(run)}/chat/completions", json={**turn, "stream": True}
            )
        assert whole.status_code == 200, whole.text
        choice = whole.json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        [tool_call] = choice["message"]["tool_calls"]
        assert tool_call["function"]["name"] == "lookup"
        assert json.loads(tool_call["function"]["arguments"]) == {"word": "x"}
        assert whole.json()["usage"]["prompt_tokens"] == INPUT_TOKENS
        sent = upstream.requests[0]
        assert sent.body["system"] == [{"type": "text", "text": "Be brief."}]
        assert sent.body["model"] == "claude-sonnet-4-5"
        assert sent.headers["x-api-key"] == HOST_KEY
        assert streamed.status_code == 200, streamed.text
        assert sse_events(streamed.text)[-1] == (None, "[DONE]")
        chunks = list(_data(streamed.text))
        arguments = "".join(
            str(c["function"]["arguments"])  # type: ignore[index]
            for chunk in chunks
            for choice in chunk.get("choices", [])  # type: ignore[union-attr]
            for c in choice["delta"].get("tool_calls", [])  # type: ignore[index]
        )
        assert json.loads(arguments) == {"word": "x"}
        assert chunks[-1]["usage"] == {
            "prompt_tokens": INPUT_TOKENS,
            "completion_tokens": OUTPUT_TOKENS,
            "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
            "prompt_tokens_details": {"cached_tokens": 0},
        }
        await served.proxy.settle(run.run_id)
        calls = await stores.usage.calls(run.run_id)
        assert [(c.status, c.api, c.input_tokens, c.output_tokens) for c in calls] == [
            ("ok", "chat", INPUT_TOKENS, OUTPUT_TOKENS),
            ("ok", "chat", INPUT_TOKENS, OUTPUT_TOKENS),
        ]


async def test_a_responses_client_calls_an_anthropic_model_whole_and_streamed(stores: Stores) -> None:
    async with (
        fake_anthropic(always(Text("hello codex"))) as upstream,
        serve_proxy(stores, {"sonnet": claude(upstream.base_url)}) as served,
    ):
        run = await served.start_run(["sonnet"])
        turn = {
            "model": "sonnet",
            "instructions": "Be brief.",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
            "tools": [{"type": "function", "name": "lookup", "parameters": TOOL["input_schema"]}],
        }
        async with client(run.token, bearer=True) as http:
            whole = await http.post(f"{served.openai(run)}/responses", json=turn)
            streamed = await http.post(f"{served.openai(run)}/responses", json={**turn, "stream": True})
        assert whole.status_code == 200, whole.text
        [message] = whole.json()["output"]
        assert message["content"][0]["text"] == "hello codex"
        assert whole.json()["usage"]["input_tokens"] == INPUT_TOKENS
        assert upstream.requests[0].body["system"] == [{"type": "text", "text": "Be brief."}]
        assert upstream.requests[0].offered_tools == ("lookup",)
        assert streamed.status_code == 200, streamed.text
        events = list(_data(streamed.text))
        deltas = "".join(str(e["delta"]) for e in events if e["type"] == "response.output_text.delta")
        assert deltas == "hello codex"
        completed = events[-1]
        assert completed["type"] == "response.completed"
        assert completed["response"]["usage"]["output_tokens"] == OUTPUT_TOKENS  # type: ignore[index]
        await served.proxy.settle(run.run_id)
        calls = await stores.usage.calls(run.run_id)
        assert [(c.status, c.input_tokens, c.output_tokens) for c in calls] == [
            ("ok", INPUT_TOKENS, OUTPUT_TOKENS),
            ("ok", INPUT_TOKENS, OUTPUT_TOKENS),
        ]


async def test_a_responses_client_calls_a_chat_only_model_with_a_tool_call(stores: Stores) -> None:
    async with (
        serve_fake_chat() as upstream,
        serve_proxy(stores, {"local": chat(upstream.base_url)}) as served,
    ):
        upstream.script(
            "m1",
            Reply(tool_calls=(FakeToolCall("lookup", {"word": "w"}, id="call_1"),), usage=(30, 4)),
            Reply(content="done", json_body=True, usage=(31, 1)),
        )
        run = await served.start_run(["local"])
        turn = {
            "model": "local",
            "input": "look up w",
            "tools": [{"type": "function", "name": "lookup", "parameters": TOOL["input_schema"]}],
        }
        async with client(run.token, bearer=True) as http:
            streamed = await http.post(f"{served.openai(run)}/responses", json={**turn, "stream": True})
            follow = {
                **turn,
                "input": [
                    {"role": "user", "content": "look up w"},
                    {
                        "type": "function_call",
                        "call_id": "call_1",
                        "name": "lookup",
                        "arguments": '{"word":"w"}',
                    },
                    {"type": "function_call_output", "call_id": "call_1", "output": "a letter"},
                ],
            }
            whole = await http.post(f"{served.openai(run)}/responses", json=follow)
        assert streamed.status_code == 200, streamed.text
        events = list(_data(streamed.text))
        done = [e for e in events if e["type"] == "response.output_item.done"]
        calls_made = [e["item"] for e in done if e["item"]["type"] == "function_call"]  # type: ignore[index]
        assert [(c["name"], json.loads(c["arguments"])) for c in calls_made] == [("lookup", {"word": "w"})]  # type: ignore[index]
        assert events[-1]["type"] == "response.completed"
        assert [r.model for r in upstream.requests] == ["m1", "m1"]
        assert upstream.requests[1].messages[-1] == {
            "role": "tool",
            "content": "a letter",
            "tool_call_id": "call_1",
        }
        assert whole.status_code == 200, whole.text
        assert whole.json()["output"][0]["content"][0]["text"] == "done"
        await served.proxy.settle(run.run_id)
        calls = await stores.usage.calls(run.run_id)
        assert [(c.status, c.api, c.input_tokens, c.output_tokens) for c in calls] == [
            ("ok", "responses", 30, 4),
            ("ok", "responses", 31, 1),
        ]


async def test_upstream_errors_and_refusals_come_in_the_client_s_error_shape(stores: Stores) -> None:
    async with (
        serve_fake_chat() as upstream,
        fake_anthropic(always(Fail(400, "prompt is too long"))) as anthropic_upstream,
        serve_proxy(
            stores, {"local": chat(upstream.base_url), "sonnet": claude(anthropic_upstream.base_url)}
        ) as served,
    ):
        upstream.script("m1", Reply(status=400, error="context length exceeded"), Reply(status=503))
        run = await served.start_run(["local", "sonnet"])
        other = await served.start_run(["local"])
        async with client(run.token) as http:
            refused_by_upstream = await http.post(f"{served.anthropic(run)}/v1/messages", json=ANTHROPIC_TURN)
            failed_upstream = await http.post(f"{served.anthropic(run)}/v1/messages", json=ANTHROPIC_TURN)
            not_granted = await http.post(
                f"{served.anthropic(run)}/v1/messages", json={**ANTHROPIC_TURN, "model": "gpt-9"}
            )
            chat_refused = await http.post(
                f"{served.openai(run)}/chat/completions",
                json={
                    "model": "sonnet",
                    "messages": [{"role": "user", "content": "hi"}],
                    "tools": [
                        {
                            "type": "function",
                            "function": {"name": "lookup", "parameters": TOOL["input_schema"]},
                        }
                    ],
                },
            )
            untranslatable = await http.post(
                f"{served.anthropic(run)}/v1/messages",
                json={"model": "local", "max_tokens": 5, "messages": []},
            )
        async with client(other.token) as http:
            stranger = await http.post(f"{served.anthropic(run)}/v1/messages", json=ANTHROPIC_TURN)
        assert refused_by_upstream.status_code == 400
        assert refused_by_upstream.json()["type"] == "error"
        assert refused_by_upstream.json()["error"]["type"] == "invalid_request_error"
        assert "context length exceeded" in refused_by_upstream.json()["error"]["message"]
        assert failed_upstream.status_code == 502
        assert failed_upstream.json()["error"]["type"] == "api_error"
        assert not_granted.status_code == 403
        assert not_granted.json()["error"]["type"] == "permission_error"
        assert chat_refused.status_code == 400
        assert chat_refused.json()["error"]["code"] == "invalid_request"
        assert "prompt is too long" in chat_refused.json()["error"]["message"]
        assert untranslatable.status_code == 400
        assert untranslatable.json()["error"]["type"] == "invalid_request_error"
        assert "cannot be translated" in untranslatable.json()["error"]["message"]
        assert stranger.status_code == 401
        assert stranger.json()["error"]["type"] == "authentication_error"
        await served.proxy.settle(run.run_id)
        calls = await stores.usage.calls(run.run_id)
        assert [c.status for c in calls] == ["failed", "failed", "failed"]


async def test_a_translated_stream_the_upstream_breaks_off_ends_with_the_client_s_error_event(
    stores: Stores,
) -> None:
    async with (
        serve_fake_chat() as upstream,
        serve_proxy(stores, {"local": chat(upstream.base_url)}) as served,
    ):
        chunk = {"id": "c", "object": "chat.completion.chunk", "model": "m1"}
        upstream.script(
            "m1",
            Reply(raw=(json.dumps({**chunk, "choices": [{"index": 0, "delta": {"content": "par"}}]}),)),
            Reply(raw=(json.dumps({"error": {"message": "the server fell over"}}),)),
        )
        run = await served.start_run(["local"])
        async with client(run.token) as http:
            cut = await http.post(
                f"{served.anthropic(run)}/v1/messages", json={**ANTHROPIC_TURN, "stream": True}
            )
            erred = await http.post(
                f"{served.anthropic(run)}/v1/messages", json={**ANTHROPIC_TURN, "stream": True}
            )
        for answer in (cut, erred):
            names = [name for name, _ in sse_events(answer.text)]
            assert "message_stop" not in names
            assert names[-1] == "error"
        assert "the server fell over" in erred.text
        await served.proxy.settle(run.run_id)
        calls = await stores.usage.calls(run.run_id)
        assert [c.status for c in calls] == ["failed", "failed"]


async def test_an_upstream_that_answers_garbage_or_hangs_gets_a_precise_error_in_the_client_s_shape(
    stores: Stores,
) -> None:
    async with (
        serve_fake_chat() as upstream,
        serve_proxy(stores, {"local": chat(upstream.base_url, timeout_s=0.5)}) as served,
    ):
        upstream.script(
            "m1",
            Reply(text_body="<html>gateway</html>"),
            Reply(json_body=True, content="x", usage=(2**60, -1)),
            Reply(hang=True),
        )
        run = await served.start_run(["local"])
        async with client(run.token) as http:
            url = f"{served.anthropic(run)}/v1/messages"
            garbage = await http.post(url, json=ANTHROPIC_TURN)
            huge_usage = await http.post(url, json=ANTHROPIC_TURN)
            hung = await http.post(url, json=ANTHROPIC_TURN)
        assert garbage.status_code == 502
        assert garbage.json()["error"]["type"] == "api_error"
        assert "not JSON" in garbage.json()["error"]["message"]
        assert huge_usage.status_code == 200  # out-of-range counts are read as 0, never trusted
        assert (huge_usage.json()["usage"]["input_tokens"], huge_usage.json()["usage"]["output_tokens"]) == (
            0,
            0,
        )
        assert hung.status_code == 504
        assert hung.json()["error"]["type"] == "api_error"
        await served.proxy.settle(run.run_id)
        calls = await stores.usage.calls(run.run_id)
        assert [c.status for c in calls] == ["failed", "ok", "failed"]


async def test_without_the_translate_extra_a_translated_call_is_refused_with_the_install_line(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(translate, "_loaded", None)
    monkeypatch.setattr(translate, "_importer", _missing)
    async with (
        serve_fake_chat() as upstream,
        fake_anthropic(always(Text("passed through"))) as anthropic_upstream,
        serve_proxy(
            stores, {"local": chat(upstream.base_url), "sonnet": claude(anthropic_upstream.base_url)}
        ) as served,
    ):
        run = await served.start_run(["local", "sonnet"])
        async with client(run.token) as http:
            refused = await http.post(f"{served.anthropic(run)}/v1/messages", json=ANTHROPIC_TURN)
            passed = await http.post(
                f"{served.anthropic(run)}/v1/messages", json={**ANTHROPIC_TURN, "model": "sonnet"}
            )
        assert refused.status_code == 501
        assert refused.json()["error"]["type"] == "api_error"
        assert "pip install 'mcphost[translate]'" in refused.json()["error"]["message"]
        assert passed.status_code == 200  # a call in the model's own format needs no translation
        assert upstream.requests == []
        await served.proxy.settle(run.run_id)
        assert [c.model_id for c in await stores.usage.calls(run.run_id)] == ["sonnet"]


async def test_a_translated_call_is_recorded_as_the_client_saw_it_and_replayed_with_no_upstream(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        serve_fake_chat() as upstream,
        serve_proxy(stores, {"local": chat(upstream.base_url)}) as served,
    ):
        upstream.script("m1", Reply(content="recorded words", usage=(9, 2)))
        run = await served.start_run(["local"], limits={"record": True})
        await stores.recordings.begin(
            RecordingHeader(
                run_id=run.run_id, agent_id="agent-a", runner_id="r", envelope={}, context={}, agent={}
            )
        )
        ask = {**ANTHROPIC_TURN, "stream": True}
        async with client(run.token) as http:
            streamed = await http.post(f"{served.anthropic(run)}/v1/messages", json=ask)
    assert streamed.status_code == 200
    [call] = await stores.recordings.calls(run.run_id)
    assert call.tool == "models/anthropic/v1/messages"
    assert call.answer["usage"] == {"input_tokens": 9, "output_tokens": 2, "cached_tokens": 0, "model": "m1"}
    assert [(e["event"], e["data"]) for e in call.answer["events"]] == sse_events(streamed.text)  # pyright: ignore[reportIndexIssue, reportArgumentType, reportCallIssue, reportGeneralTypeIssues]

    # The replay: no upstream (nothing listens) and no translation library either.
    monkeypatch.setattr(translate, "_loaded", None)
    monkeypatch.setattr(translate, "_importer", _missing)
    recorded = DocumentCall(
        seq=call.seq, tool=call.tool, arguments=call.arguments, outcome=call.outcome, answer=call.answer
    )
    book = ReplayBook(
        RecordingDocument(
            run_id="run_recorded", agent_id="agent-a", runner_id="r", status="completed",
            envelope={}, context={}, agent={}, calls=[recorded], results=[],
        )
    )  # fmt: skip
    async with serve_proxy(stores, {"local": chat("http://127.0.0.1:9/v1")}, replay=book) as replaying:
        again = await replaying.start_run(["local"])
        async with client(again.token) as http:
            replayed = await http.post(f"{replaying.anthropic(again)}/v1/messages", json=ask)
    assert replayed.status_code == 200
    assert sse_events(replayed.text) == sse_events(streamed.text)
