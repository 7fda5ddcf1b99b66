"""Embedding models: `POST /runs/{run_id}/models/openai/v1/embeddings`, the `models_embed` tool and
`RunAPI.models_embed`, their usage rows, budgets, recording and refusals — the real `ModelProxy` and facts
server over real stores, the fake OpenAI-compatible API's `/v1/embeddings` on 127.0.0.1."""

from __future__ import annotations

import json

import pytest

from mcphost.llm import ModelConfig
from mcphost.protocol import STRICT_CONTEXT, JSONObject
from mcphost.protocol.inference import MAX_EMBED_INPUT_CHARS, MAX_EMBED_INPUTS, EmbeddingAnswer, ModelsList
from mcphost.stores import Stores
from mcphost.stores.usage import ModelBudget
from mcphost_runners.sdk import RunAPI, RunAPIError
from tests.fakes.openai_chat import EMBEDDING_DIMENSIONS, Reply, fake_vector, serve_fake_chat
from tests.mcphost.facts._helpers import connect, fails, ok
from tests.mcphost.proxy.kit import (
    HOST_KEY,
    HOST_KEY_ENV,
    begin_recording,
    book_of,
    chat,
    client,
    serve_proxy,
)
from tests.mcphost.proxy.test_model_tools import serve_models

EMBEDDER: dict[str, object] = {"kind": "embedding", "input_usd_per_mtok": 1_000_000.0}
"""An embedding model at a dollar an input token."""


def both_kinds(base_url: str) -> dict[str, ModelConfig]:
    """An embedding model `emb` (upstream `e1`) and a chat model `small` (upstream `m1`)."""
    return {"emb": chat(base_url, "e1", **EMBEDDER), "small": chat(base_url, "m1")}


@pytest.fixture(autouse=True)
def host_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOST_KEY_ENV, HOST_KEY)


async def test_the_embeddings_endpoint_passes_the_request_through_and_counts_its_input_tokens(
    stores: Stores,
) -> None:
    async with serve_fake_chat() as upstream:
        models = {"emb": chat(upstream.base_url, "text-embedding-3-small", **EMBEDDER)}
        async with serve_proxy(stores, models) as served:
            run = await served.start_run(["emb"], calls=["embed"])
            async with client(run.token, bearer=True) as http:
                answer = await http.post(
                    f"{served.openai(run)}/embeddings",
                    json={"model": "emb", "input": ["apple pie", "tart"], "dimensions": 4},
                )
                single = await http.post(
                    f"{served.openai(run)}/embeddings", json={"model": "emb", "input": "pie"}
                )
                listed = await http.get(f"{served.openai(run)}/models")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [d["embedding"] for d in body["data"]] == [fake_vector("apple pie", 4), fake_vector("tart", 4)]
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    assert len(single.json()["data"][0]["embedding"]) == EMBEDDING_DIMENSIONS
    assert [d["id"] for d in listed.json()["data"]] == ["emb"]
    sent = upstream.requests[0]
    assert sent.model == "text-embedding-3-small"
    assert sent.body == {"model": "text-embedding-3-small", "input": ["apple pie", "tart"], "dimensions": 4}
    assert sent.headers["authorization"] == f"Bearer {HOST_KEY}"
    await served.proxy.settle(run.run_id)
    rows = await stores.usage.calls(run.run_id)
    assert [(r.model_id, r.kind, r.api, r.input_tokens, r.output_tokens, r.cost_usd) for r in rows] == [
        ("emb", "embedding", "embeddings", 3, 0, 3.0),
        ("emb", "embedding", "embeddings", 1, 0, 1.0),
    ]


async def test_bad_embedding_requests_are_refused_in_the_openai_error_shape_before_any_upstream(
    stores: Stores,
) -> None:
    async with serve_fake_chat() as upstream:
        models = both_kinds(upstream.base_url)
        async with serve_proxy(stores, models) as served:
            run = await served.start_run(["emb", "small"], calls=["embed", "invoke"])
            other = await served.start_run(["emb"], calls=["embed"])
            no_embed = await served.start_run(["emb"], calls=["invoke"])
            url = f"{served.openai(run)}/embeddings"
            asks: list[tuple[JSONObject, int, str]] = [
                ({"model": "emb", "input": ["x"] * (MAX_EMBED_INPUTS * 5)}, 400, "at most 2048"),
                ({"model": "emb", "input": ["x" * (MAX_EMBED_INPUT_CHARS + 1)]}, 400, "input 0 must be"),
                ({"model": "emb", "input": []}, 400, "'input' must be"),
                ({"model": "emb", "input": [""]}, 400, "input 0 must be"),
                ({"model": "emb", "input": [{"text": "x"}]}, 400, "input 0 is neither"),
                ({"model": "emb", "input": "x", "dimensions": 1.5}, 400, "'dimensions' must be"),
                ({"model": "emb", "input": "x", "dimensions": 0}, 400, "'dimensions' must be"),
                ({"model": "emb", "input": "x", "dimensions": 10**30}, 400, "'dimensions' must be"),
                ({"model": "emb", "input": "x", "stream": True}, 400, "cannot be streamed"),
                ({"model": "small", "input": "x"}, 400, "is a chat model, not an embedding model"),
            ]
            async with client(run.token, bearer=True) as http:
                answers = [await http.post(url, json=ask) for ask, _, _ in asks]
                nan = await http.post(
                    url,
                    content=b'{"model": "emb", "input": "x", "dimensions": NaN}',
                    headers={"content-type": "application/json"},
                )
                chat_at_embed = await http.post(
                    f"{served.openai(run)}/chat/completions", json={"model": "emb", "messages": []}
                )
            async with client(other.token, bearer=True) as http:
                stranger = await http.post(url, json={"model": "emb", "input": "x"})
            async with client(no_embed.token, bearer=True) as http:
                ungranted = await http.post(
                    f"{served.openai(no_embed)}/embeddings", json={"model": "emb", "input": "x"}
                )
    for answer, (_, status, said) in zip(answers, asks, strict=True):
        assert answer.status_code == status, answer.text
        assert answer.json()["error"]["type"] == "invalid_request_error"
        assert said in answer.json()["error"]["message"]
    assert nan.status_code == 400
    assert "NaN is not a JSON number" in nan.json()["error"]["message"]
    assert chat_at_embed.status_code == 400
    assert "is an embedding model, not a chat model" in chat_at_embed.json()["error"]["message"]
    assert stranger.status_code == 401
    assert stranger.json()["error"]["message"] == "the credential is not this run's token"
    assert ungranted.status_code == 403
    assert ungranted.json()["error"]["code"] == "model_not_granted"
    assert "embed" in ungranted.json()["error"]["message"]
    assert upstream.requests == []


async def test_a_spent_budget_refuses_an_embedding_call_with_429_naming_its_key(stores: Stores) -> None:
    async with serve_fake_chat() as upstream:
        models = {"emb": chat(upstream.base_url, "e1", **EMBEDDER)}
        budgets = {"agent-a": ModelBudget(model_tokens_per_run=10)}
        async with serve_proxy(stores, models, budgets=budgets) as served:
            run = await served.start_run(["emb"], calls=["embed"])
            async with client(run.token, bearer=True) as http:
                small = await http.post(
                    f"{served.openai(run)}/embeddings", json={"model": "emb", "input": "a"}
                )
                large = await http.post(
                    f"{served.openai(run)}/embeddings", json={"model": "emb", "input": ["word " * 20]}
                )
    assert small.status_code == 200, small.text
    assert large.status_code == 429
    assert "model_tokens_per_run" in large.json()["error"]["message"]
    assert [r.model for r in upstream.requests] == ["e1"]


async def test_an_embedding_call_of_a_recorded_run_is_replayed_with_no_upstream(stores: Stores) -> None:
    ask: JSONObject = {"model": "emb", "input": ["apple"]}
    async with serve_fake_chat() as upstream:
        models = {"emb": chat(upstream.base_url, "e1", **EMBEDDER)}
        async with serve_proxy(stores, models) as served:
            run = await served.start_run(["emb"], calls=["embed"], limits={"record": True})
            await begin_recording(stores, run.run_id)
            async with client(run.token, bearer=True) as http:
                recorded_answer = await http.post(f"{served.openai(run)}/embeddings", json=ask)
    [call] = await stores.recordings.calls(run.run_id)
    assert call.tool == "models/openai/v1/embeddings"
    book = book_of([call])
    gone = {"emb": chat("http://127.0.0.1:9/v1", "e1", **EMBEDDER)}
    async with serve_proxy(stores, gone, replay=book) as replaying:
        again = await replaying.start_run(["emb"], calls=["embed"])
        async with client(again.token, bearer=True) as http:
            replayed = await http.post(f"{replaying.openai(again)}/embeddings", json=ask)
            changed = await http.post(
                f"{replaying.openai(again)}/embeddings", json={**ask, "input": ["pear"]}
            )
    assert (replayed.status_code, replayed.json()) == (200, recorded_answer.json())
    assert changed.status_code == 400
    assert "no recorded answer" in changed.json()["error"]["message"]


async def test_models_embed_answers_vectors_and_usage_and_runapi_reads_them(stores: Stores) -> None:
    async with serve_fake_chat() as upstream:
        models = both_kinds(upstream.base_url)
        async with serve_models(stores, models) as host:
            run = await host.start_run(["emb", "small"], calls=["embed", "invoke"])
            async with connect(host.served, run) as mcp:
                published = {t.name: t.output_schema for t in (await mcp.list_tools()).tools}
                listed = await ok(mcp, "models_list")
                answer = await ok(mcp, "models_embed", {"model": "emb", "inputs": ["apple pie", "tart"]})
                short = await ok(mcp, "models_embed", {"model": "emb", "inputs": ["x"], "dimensions": 3})
                refusals = [
                    await fails(
                        mcp, "models_embed", {"model": "emb", "inputs": ["x"] * (MAX_EMBED_INPUTS + 1)}
                    ),
                    await fails(
                        mcp, "models_embed", {"model": "emb", "inputs": ["x" * (MAX_EMBED_INPUT_CHARS + 1)]}
                    ),
                    await fails(mcp, "models_embed", {"model": "emb", "inputs": ["x"], "dimensions": 0}),
                    await fails(mcp, "models_embed", {"model": "emb", "inputs": ["x"], "dimensions": 2.5}),
                    await fails(mcp, "models_embed", {"model": "small", "inputs": ["x"]}),
                    await fails(mcp, "models_embed", {"model": "other", "inputs": ["x"]}),
                    await fails(
                        mcp, "models_invoke", {"model": "emb", "messages": [{"role": "user", "content": "x"}]}
                    ),
                ]
            mcp_access = run.context.context.mcp
            assert mcp_access is not None
            async with RunAPI(mcp_access) as api:
                typed = await api.models_embed("emb", ["apple pie"], dimensions=5)
                with pytest.raises(RunAPIError) as refused:
                    await api.models_embed("small", ["x"])
            rows = await host.calls(run.run_id)
    embedded = EmbeddingAnswer.model_validate(answer, context=STRICT_CONTEXT)
    assert published["models_embed"] is not None
    models_listed = ModelsList.model_validate(listed, context=STRICT_CONTEXT).models
    assert [(m.model_id, m.calls) for m in models_listed] == [("emb", ["embed"]), ("small", ["invoke"])]
    assert embedded.vectors == [
        fake_vector("apple pie", EMBEDDING_DIMENSIONS),
        fake_vector("tart", EMBEDDING_DIMENSIONS),
    ]
    assert (embedded.model, embedded.response_model, embedded.attempts) == ("emb", "e1", 1)
    assert (embedded.usage.input_tokens, embedded.usage.output_tokens, embedded.usage.cost_usd) == (3, 0, 3.0)
    assert short["vectors"] == [fake_vector("x", 3)]
    assert [r["code"] for r in refusals] == ["invalid_argument"] * 5 + ["unauthorized", "invalid_argument"]
    assert "call it with models_invoke" in str(refusals[4]["message"])
    assert "call it with models_embed" in str(refusals[6]["message"])
    assert typed.vectors == [fake_vector("apple pie", 5)]
    assert refused.value.code == "invalid_argument"
    assert [r.body for r in upstream.requests] == [
        {"model": "e1", "input": ["apple pie", "tart"], "encoding_format": "float"},
        {"model": "e1", "input": ["x"], "encoding_format": "float", "dimensions": 3},
        {"model": "e1", "input": ["apple pie"], "encoding_format": "float", "dimensions": 5},
    ]
    assert [(r.kind, r.input_tokens) for r in rows] == [("embedding", 3), ("embedding", 1), ("embedding", 2)]


async def test_models_embed_of_an_upstream_that_answers_garbage_is_a_precise_error(stores: Stores) -> None:
    async with serve_fake_chat() as upstream:
        upstream.script("e1", Reply(text_body="<html>oops</html>"), Reply(status=503, error="overloaded"))
        models = {"emb": chat(upstream.base_url, "e1", **EMBEDDER)}
        async with serve_models(stores, models) as host:
            run = await host.start_run(["emb"], calls=["embed"])
            async with connect(host.served, run) as mcp:
                garbage = await fails(mcp, "models_embed", {"model": "emb", "inputs": ["x"]})
                down = await fails(mcp, "models_embed", {"model": "emb", "inputs": ["x"]})
    assert garbage["code"] == "runtime_error"
    assert "not JSON" in str(garbage["message"])
    assert down["code"] == "runtime_error"
    assert "overloaded" in str(down["message"])
    assert json.dumps(garbage).count(HOST_KEY) == 0
