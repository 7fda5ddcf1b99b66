"""Model calls in a recorded run's recording, and a replay's model calls answered from it with no
upstream: the real `ModelProxy` over real stores, the fake Anthropic and OpenAI APIs for the recording."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Protocol, TypeVar

import httpx2
import pytest

from mcphost.llm import ModelConfig
from mcphost.protocol import JSONObject
from mcphost.proxy import _body, _tape
from mcphost.recording import ReplayBook
from mcphost.stores import Stores
from mcphost.stores.recordings import RecordedCall
from mcphost.stores.usage import ModelBudget
from tests.fakes.anthropic import INPUT_TOKENS, OUTPUT_TOKENS, fake_anthropic
from tests.fakes.openai import fake_openai
from tests.fakes.script import Fail, Text, always
from tests.mcphost.facts._helpers import RunHandle
from tests.mcphost.proxy.kit import (
    HOST_KEY,
    HOST_KEY_ENV,
    ServedProxy,
    begin_recording,
    book_of,
    client,
    serve_proxy,
    sse_events,
)

T = TypeVar("T", covariant=True)
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
        "embedder": ModelConfig(
            provider="openai",
            base_url=openai_url,
            api_key_env=HOST_KEY_ENV,
            model="text-embedding-3-small",
            kind="embedding",
        ),
    }


async def recorded_run(served: ServedProxy) -> RunHandle:
    run = await served.start_run(["sonnet", "gpt", "embedder"], limits={"record": True})
    await begin_recording(served.stores, run.run_id)
    return run


async def three_calls(served: ServedProxy, run: RunHandle, *, ask: JSONObject = ASK) -> list[tuple[int, str]]:
    """A whole and a streamed Messages call and a streamed Responses call: (status, body text) each."""
    async with client(run.token) as http:
        whole = await http.post(f"{served.anthropic(run)}/v1/messages", json=ask)
        streamed = await http.post(f"{served.anthropic(run)}/v1/messages", json={**ask, "stream": True})
        responses = await http.post(f"{served.openai(run)}/responses", json=RESPOND)
    return [(r.status_code, r.text) for r in (whole, streamed, responses)]


class Calls(Protocol[T]):
    def __call__(self, served: ServedProxy, run: RunHandle, *, ask: JSONObject = ...) -> Awaitable[T]: ...


async def replay_twice(stores: Stores, book: ReplayBook, calls: Calls[T]) -> tuple[T, T, RunHandle]:
    """`calls` in a replay of `book` (another run, base URLs that refuse connections): once as recorded,
    then with the prompt changed; and the replay's run."""
    async with serve_proxy(stores, models(REFUSING, REFUSING), replay=book) as replaying:
        again = await replaying.start_run(["sonnet", "gpt"])
        replayed = await calls(replaying, again)
        changed = await calls(replaying, again, ask={**ASK, "messages": [{"role": "user", "content": "bye"}]})
    return replayed, changed, again


async def replay_one(stores: Stores, call: RecordedCall, ask: JSONObject) -> httpx2.Response:
    """`ask` at the Messages endpoint of a replay (another run, no upstream) whose recording is `call`."""
    async with serve_proxy(stores, models(REFUSING, REFUSING), replay=book_of([call])) as replaying:
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
    book = book_of(recorded)
    replayed, changed, again = await replay_twice(stores, book, three_calls)
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


BAD_BODIES: list[tuple[str, bytes]] = [
    ("not json", b"{not json"),
    ("NaN", b'{"model": "sonnet", "max_tokens": 64, "temperature": NaN, "messages": []}'),
    ("no model", b'{"max_tokens": 64, "messages": []}'),
    ("too large", b'{"model": "sonnet", "pad": "' + b"x" * 3000 + b'"}'),
]


async def refused_calls(
    served: ServedProxy, run: RunHandle, *, ask: JSONObject = ASK
) -> list[httpx2.Response]:
    """What the host refuses, in order: bad bodies, a model not granted, an embedding model at the
    Messages endpoint, and a call past the run's budget."""
    url = f"{served.anthropic(run)}/v1/messages"
    async with client(run.token) as http:
        answers = [
            await http.post(url, content=raw, headers={"content-type": "application/json"})
            for _, raw in BAD_BODIES
        ]
        answers.append(await http.post(url, json={**ask, "model": "opus"}))
        answers.append(await http.post(url, json={**ask, "model": "embedder"}))
        answers.append(await http.post(url, json=ask))
    return answers


async def test_the_host_s_refusals_of_a_recorded_run_are_recorded_and_replayed_the_same_with_no_upstream(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_body, "MAX_BODY_BYTES", 2000)
    spent = {"agent-a": ModelBudget(model_tokens_per_run=1)}
    async with serve_proxy(stores, models(REFUSING, REFUSING), budgets=spent) as served:
        run = await recorded_run(served)
        other = await served.start_run(["sonnet"])
        refused = await refused_calls(served, run)
        async with client(other.token) as http:  # another run's token: not this run's request
            stranger = await http.post(f"{served.anthropic(run)}/v1/messages", json=ASK)
    assert [r.status_code for r in refused] == [400, 400, 400, 413, 403, 400, 429]
    assert stranger.status_code == 401
    assert all(r.json()["type"] == "error" for r in refused)
    assert "model_tokens_per_run" in refused[-1].json()["error"]["message"]
    recorded = await stores.recordings.calls(run.run_id)
    assert [c.tool for c in recorded] == ["models/anthropic/v1/messages"] * len(refused)
    assert [(c.outcome, c.answer["status"], c.answer["body"]) for c in recorded] == [
        ("error", r.status_code, r.json()) for r in refused
    ]
    # A body that parsed is recorded under its canonical form, one that did not under its bytes' digest.
    assert [c.arguments["model"] for c in recorded] == [None, None, None, None, "opus", "embedder", "sonnet"]
    assert recorded[4].arguments["request"] == {**ASK, "model": "opus"}
    assert recorded[0].arguments["request"] == {"unparsed_bytes": len(BAD_BODIES[0][1])}
    assert recorded[3].arguments["request"] == {"unparsed_bytes": None}

    # The replay: no budget, both models granted, upstreams that refuse connections. Every refusal is
    # answered as recorded — the spent budget too, though nothing refuses it now — and nothing is sent.
    book = book_of(recorded)
    replayed, changed, again = await replay_twice(stores, book, refused_calls)
    assert [(r.status_code, r.json()) for r in replayed] == [(r.status_code, r.json()) for r in refused]
    assert [c.recorded_seq for c in book.model_calls[: len(refused)]] == [c.seq for c in recorded]
    # The same bad bodies again have no answer left (one answer per call); the requests made differently
    # never had one. Each is a divergence, refused with the replay's 400 and never sent upstream.
    assert [r.status_code for r in changed] == [400] * len(refused)
    assert all("no recorded answer" in r.json()["error"]["message"] for r in changed)
    assert [c.recorded_seq for c in book.model_calls[len(refused) :]] == [None] * len(refused)
    assert await stores.usage.calls(again.run_id) == []


async def test_an_unrecorded_run_s_refusals_are_not_recorded(stores: Stores) -> None:
    async with serve_proxy(stores, models(REFUSING, REFUSING)) as served:
        run = await served.start_run(["sonnet"])
        async with client(run.token) as http:
            refused = await http.post(f"{served.anthropic(run)}/v1/messages", json={**ASK, "model": "opus"})
    assert refused.status_code == 403
    assert await stores.recordings.calls(run.run_id) == []
