"""Model calls in a recorded run's recording, and a replay's model calls answered from it with no
upstream: the real `ModelProxy` over real stores, the fake Anthropic and OpenAI APIs for the recording."""

from __future__ import annotations

import json

import httpx2
import pytest

from mcphost.llm import ModelConfig
from mcphost.protocol import JSONObject
from mcphost.proxy import _tape
from mcphost.recording import DocumentCall, RecordingDocument, ReplayBook
from mcphost.stores import Stores
from mcphost.stores.recordings import RecordedCall, RecordingHeader
from tests.fakes.anthropic import INPUT_TOKENS, OUTPUT_TOKENS, fake_anthropic
from tests.fakes.openai import fake_openai
from tests.fakes.script import Fail, Text, always
from tests.mcphost.facts._helpers import RunHandle
from tests.mcphost.proxy.kit import HOST_KEY, HOST_KEY_ENV, ServedProxy, client, serve_proxy, sse_events

REFUSING = "http://127.0.0.1:9"
"""The discard port: nothing listens there."""
ASK: JSONObject = {"model": "sonnet", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
RESPOND: JSONObject = {
    "model": "gpt",
    "stream": True,
    "input": "hi",
    "stream_options": {"include_obfuscation": False},
}


@pytest.fixture(autouse=True)
def host_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOST_KEY_ENV, HOST_KEY)


def models(anthropic_url: str, openai_url: str) -> dict[str, ModelConfig]:
    return {
        "sonnet": ModelConfig(
            provider="anthropic", base_url=anthropic_url, api_key_env=HOST_KEY_ENV, model="claude-sonnet-4-5"
        ),
        "gpt": ModelConfig(
            provider="openai", base_url=openai_url, api_key_env=HOST_KEY_ENV, model="gpt-4o-mini"
        ),
    }


async def recorded_run(served: ServedProxy) -> RunHandle:
    run = await served.start_run(["sonnet", "gpt"], limits={"record": True})
    await served.stores.recordings.begin(
        RecordingHeader(
            run_id=run.run_id, agent_id="agent-a", runner_id="r", envelope={}, context={}, agent={}
        )
    )
    return run


async def three_calls(served: ServedProxy, run: RunHandle, *, ask: JSONObject = ASK) -> list[tuple[int, str]]:
    """A whole and a streamed Messages call and a streamed Responses call: (status, body text) each."""
    async with client(run.token) as http:
        whole = await http.post(f"{served.anthropic(run)}/v1/messages", json=ask)
        streamed = await http.post(f"{served.anthropic(run)}/v1/messages", json={**ask, "stream": True})
        responses = await http.post(f"{served.openai(run)}/responses", json=RESPOND)
    return [(r.status_code, r.text) for r in (whole, streamed, responses)]


def book_of(calls: list[DocumentCall]) -> ReplayBook:
    return ReplayBook(
        RecordingDocument(
            run_id="run_recorded",
            agent_id="agent-a",
            runner_id="r",
            status="completed",
            envelope={},
            context={},
            agent={},
            calls=calls,
            results=[],
        )
    )


async def replay_one(stores: Stores, call: RecordedCall, ask: JSONObject) -> httpx2.Response:
    """`ask` at the Messages endpoint of a replay (another run, no upstream) whose recording is `call`."""
    recorded = DocumentCall(
        seq=call.seq, tool=call.tool, arguments=call.arguments, outcome=call.outcome, answer=call.answer
    )
    async with serve_proxy(stores, models(REFUSING, REFUSING), replay=book_of([recorded])) as replaying:
        again = await replaying.start_run(["sonnet", "gpt"])
        async with client(again.token) as http:
            return await http.post(f"{replaying.anthropic(again)}/v1/messages", json=ask)


async def test_model_calls_are_recorded_and_replayed_with_no_upstream(stores: Stores) -> None:
    async with (
        fake_anthropic(always(Text("recorded words"))) as anthropic,
        fake_openai(always(Text("a response"))) as openai,
        serve_proxy(stores, models(anthropic.base_url, openai.base_url)) as served,
    ):
        run = await recorded_run(served)
        answers = await three_calls(served, run)
    assert [status for status, _ in answers] == [200, 200, 200]
    recorded = await stores.recordings.calls(run.run_id)
    assert [c.tool for c in recorded] == [
        "models/anthropic/v1/messages",
        "models/anthropic/v1/messages",
        "models/openai/v1/responses",
    ]
    whole, streamed, responses = recorded
    assert whole.answer["body"] == json.loads(answers[0][1])
    assert whole.answer["usage"] == {
        "input_tokens": INPUT_TOKENS,
        "output_tokens": OUTPUT_TOKENS,
        "cached_tokens": 0,
        "model": "claude-sonnet-4-5",
    }
    assert whole.arguments["stream"] is False
    assert streamed.arguments["stream"] is True
    assert whole.arguments["sha256"] != streamed.arguments["sha256"]
    assert whole.arguments["request"] == {**ASK, "model": "sonnet"}
    # The streams are recorded event by event, as the client received them.
    for call, (_, text) in ((streamed, answers[1]), (responses, answers[2])):
        assert [(e["event"], e["data"]) for e in call.answer["events"]] == sse_events(text)  # pyright: ignore[reportIndexIssue, reportArgumentType, reportCallIssue, reportGeneralTypeIssues]
    assert "stream_options" not in responses.arguments["request"]  # pyright: ignore[reportOperatorIssue]

    # The replay: another run, a base URL that refuses connections; same answers, same event sequences.
    book = book_of(
        [
            DocumentCall(seq=c.seq, tool=c.tool, arguments=c.arguments, outcome=c.outcome, answer=c.answer)
            for c in recorded
        ]
    )
    async with serve_proxy(stores, models(REFUSING, REFUSING), replay=book) as replaying:
        again = await replaying.start_run(["sonnet", "gpt"])
        replayed = await three_calls(replaying, again)
        changed = await three_calls(
            replaying, again, ask={**ASK, "messages": [{"role": "user", "content": "bye"}]}
        )
    assert replayed[0][0] == 200
    assert json.loads(replayed[0][1]) == json.loads(answers[0][1])
    assert sse_events(replayed[1][1]) == sse_events(answers[1][1])
    assert sse_events(replayed[2][1]) == sse_events(answers[2][1])
    assert [c.recorded_seq for c in book.model_calls[:3]] == [1, 2, 3]
    # A changed prompt has no recorded answer: refused in the API's error shape, noted, never sent upstream.
    assert changed[0][0] == 400
    assert json.loads(changed[0][1])["error"]["type"] == "invalid_request_error"
    assert "no recorded answer" in json.loads(changed[0][1])["error"]["message"]
    assert [c.recorded_seq for c in book.model_calls[3:]] == [None, None, None]
    # The Responses call was the same but its recorded answer was already given (one answer per call).
    assert await stores.usage.calls(again.run_id) == []


async def test_a_failed_call_is_recorded_as_the_client_saw_it_and_replayed_the_same(stores: Stores) -> None:
    async with (
        fake_anthropic(lambda _request: Fail(status=503, message="overloaded")) as anthropic,
        serve_proxy(stores, models(anthropic.base_url, REFUSING)) as served,
    ):
        run = await recorded_run(served)
        async with client(run.token) as http:
            failed = await http.post(f"{served.anthropic(run)}/v1/messages", json=ASK)
    assert failed.status_code == 502
    [call] = await stores.recordings.calls(run.run_id)
    assert call.outcome == "error"
    assert call.answer["status"] == 502
    assert call.answer["body"] == failed.json()
    assert call.answer["usage"] is None

    replayed = await replay_one(stores, call, ASK)
    assert (replayed.status_code, replayed.json()) == (502, failed.json())


async def test_a_stream_past_the_recording_bound_is_relayed_whole_and_not_replayed(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_tape, "MAX_RECORDED_STREAM_BYTES", 100)
    async with (
        fake_anthropic(always(Text("a long answer " * 20))) as anthropic,
        serve_proxy(stores, models(anthropic.base_url, REFUSING)) as served,
    ):
        run = await recorded_run(served)
        async with client(run.token) as http:
            streamed = await http.post(f"{served.anthropic(run)}/v1/messages", json={**ASK, "stream": True})
    assert sse_events(streamed.text)[-1][0] == "message_stop"
    [call] = await stores.recordings.calls(run.run_id)
    assert call.answer["truncated"] is True
    assert "events" not in call.answer

    replayed = await replay_one(stores, call, {**ASK, "stream": True})
    assert replayed.status_code == 502
    assert "could not keep the answer" in replayed.json()["error"]["message"]
