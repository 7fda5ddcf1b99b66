"""The model tools of the per-run MCP server (`models_list`, `models_invoke`, `models_rerank`): the real
facts server and model proxy under uvicorn, the real `mcp` client, real stores, fake upstreams."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import pytest

from mcphost.facts._tools import FACTS_TOOLS
from mcphost.llm import ModelConfig
from mcphost.protocol import STRICT_CONTEXT, JSONObject
from mcphost.protocol.inference import ModelInvocation, ModelsList, RerankAnswer
from mcphost.proxy import ModelProxy
from mcphost.proxy.calls import ModelCalls
from mcphost.recording import ReplayBook
from mcphost.stores import Stores
from mcphost.stores.usage import ModelBudget, ModelCallRecord
from tests.fakes.anthropic import INPUT_TOKENS, OUTPUT_TOKENS, fake_anthropic
from tests.fakes.openai_chat import FakeToolCall, Reply, serve_fake_chat
from tests.fakes.script import Hang, ToolCall, always
from tests.mcphost.facts._helpers import (
    FULL_PERMISSIONS,
    MODERN,
    RunHandle,
    Served,
    connect,
    fails,
    ok,
    raises_mcp_error,
    serve_facts,
)
from tests.mcphost.proxy.kit import HOST_KEY, HOST_KEY_ENV, begin_recording, book_of, chat, claude


@pytest.fixture(autouse=True)
def host_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOST_KEY_ENV, HOST_KEY)


@dataclass
class Host:
    served: Served
    proxy: ModelProxy

    async def calls(self, run_id: str) -> list[ModelCallRecord]:
        """The run's usage rows, once written (the orchestrator settles them as a run closes)."""
        await self.proxy.settle(run_id)
        return await self.served.stores.usage.calls(run_id)

    async def start_run(self, models: list[str], calls: list[str] | None = None, **options: Any) -> RunHandle:
        permissions: JSONObject = {
            **FULL_PERMISSIONS,
            "models": ["invoke", "stream"] if calls is None else calls,
        }
        agent: JSONObject = {"resources": {"knowledge_bases": ["kb-docs"], "models": models}}
        return await self.served.start_run(permissions=permissions, agent=agent, **options)


@asynccontextmanager
async def serve_models(
    stores: Stores,
    models: Mapping[str, ModelConfig],
    *,
    budgets: Mapping[str, ModelBudget] | None = None,
    replay: ReplayBook | None = None,
) -> AsyncGenerator[Host]:
    proxy = ModelProxy(stores, models, budgets=budgets, replay=replay)
    async with (
        proxy.running(),
        serve_facts(stores, models=ModelCalls(proxy, models), replay=replay) as served,
    ):
        yield Host(served, proxy)


HI: JSONObject = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}


async def test_models_invoke_answers_the_assistant_message_with_tool_calls_usage_and_a_row(
    stores: Stores,
) -> None:
    async with (
        serve_fake_chat() as upstream,
        serve_models(stores, {"small": chat(upstream.base_url)}) as host,
    ):
        upstream.script(
            "m1",
            Reply(
                content="let me look",
                tool_calls=(FakeToolCall("lookup", {"q": "pie"}, id="call_7"),),
                json_body=True,
            ),
        )
        run = await host.start_run(["small"])
        async with connect(host.served, run) as client:
            published = {t.name: t.output_schema for t in (await client.list_tools()).tools}
            listed = ModelsList.model_validate(await ok(client, "models_list"), context=STRICT_CONTEXT)
            answer = await ok(
                client,
                "models_invoke",
                {
                    "model": "small",
                    **HI,
                    "system": "be brief",
                    "tools": [{"name": "lookup", "description": "find", "input_schema": {"type": "object"}}],
                    "temperature": 0.2,
                    "stop": ["END"],
                },
            )
        assert [(m.model_id, m.calls) for m in listed.models] == [("small", ["invoke", "stream"])]
        invocation = ModelInvocation.model_validate(answer, context=STRICT_CONTEXT)
        assert invocation.model_dump(mode="json") == answer
        for name in ("models_list", "models_invoke"):
            assert published[name] == FACTS_TOOLS[name].answer.model_json_schema()
        assert invocation.model == "small"
        assert invocation.stop_reason == "tool_use"
        assert [p.model_dump() for p in invocation.message.content] == [
            {"type": "text", "text": "let me look"},
            {"type": "tool_call", "id": "call_7", "name": "lookup", "arguments": {"q": "pie"}},
        ]
        assert (invocation.usage.input_tokens, invocation.usage.output_tokens) == (10, 5)
        [sent] = upstream.requests
        assert sent.body["messages"] == [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
        ]
        assert sent.body["stop"] == ["END"]
        assert sent.body["temperature"] == 0.2
        assert sent.body["max_tokens"] == 64
        assert sent.body["stream"] is False
        assert sent.tool_names == ["lookup"]
        assert sent.headers["authorization"] == f"Bearer {HOST_KEY}"
        [row] = await host.calls(run.run_id)
        assert (row.status, row.model_id, row.api, row.input_tokens, row.output_tokens) == (
            "ok",
            "small",
            "chat",
            10,
            5,
        )


async def test_an_anthropic_model_gets_the_request_in_its_own_wire_and_tool_results_go_back(
    stores: Stores,
) -> None:
    async with (
        fake_anthropic(always(ToolCall("lookup", {"q": "x"}))) as upstream,
        serve_models(stores, {"sonnet": claude(upstream.base_url)}) as host,
    ):
        run = await host.start_run(["sonnet"], calls=["invoke"])
        async with connect(host.served, run, mode=MODERN) as client:
            first = ModelInvocation.model_validate(
                await ok(client, "models_invoke", {"model": "sonnet", **HI, "tools": [{"name": "lookup"}]})
            )
            [call] = first.message.content
            assert call.type == "tool_call"
            follow = {
                "model": "sonnet",
                "max_tokens": 64,
                "tools": [{"name": "lookup"}],
                "messages": [
                    HI["messages"][0],
                    first.message.model_dump(mode="json"),
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_call_id": call.id, "content": "42"}],
                    },
                ],
            }
            await ok(client, "models_invoke", follow)
        assert first.stop_reason == "tool_use"
        assert (first.usage.input_tokens, first.usage.output_tokens) == (INPUT_TOKENS, OUTPUT_TOKENS)
        assert first.usage.cost_usd == pytest.approx((INPUT_TOKENS * 3 + OUTPUT_TOKENS * 15) / 1e6)
        sent = upstream.requests[-1]
        assert sent.body["messages"][1]["content"][0]["type"] == "tool_use"
        assert sent.body["messages"][2]["content"][0] == {
            "type": "tool_result",
            "tool_use_id": call.id,
            "content": "42",
            "is_error": False,
        }
        assert sent.tool_results == ("42",)
        assert sent.headers["x-api-key"] == HOST_KEY


async def test_with_a_progress_token_the_text_streams_as_progress_then_the_whole_answer(
    stores: Stores,
) -> None:
    async with (
        serve_fake_chat() as upstream,
        serve_models(stores, {"small": chat(upstream.base_url)}) as host,
    ):
        upstream.script("m1", Reply(content="one two three four"))
        run = await host.start_run(["small"])
        deltas: list[tuple[float, str | None]] = []

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            deltas.append((progress, message))

        async with connect(host.served, run) as client:
            result = await client.call_tool(
                "models_invoke", {"model": "small", **HI}, progress_callback=progress
            )
        answer = ModelInvocation.model_validate(result.structured_content)
        assert answer.message.content[0].model_dump() == {"type": "text", "text": "one two three four"}
        assert [m for _, m in deltas] == ["one ", "two ", "three ", "four"]
        assert [v for v, _ in deltas] == [1, 2, 3, 4]
        assert upstream.requests[0].body["stream"] is True
        [row] = await host.calls(run.run_id)
        assert row.streamed
        assert row.ttft_ms is not None
        assert row.output_tokens == 5


async def test_the_grant_cuts_the_model_tools(stores: Stores) -> None:
    async with (
        serve_fake_chat() as upstream,
        serve_models(
            stores, {"small": chat(upstream.base_url), "big": chat(upstream.base_url, "m2")}
        ) as host,
    ):
        only_rerank = await host.start_run(["small"], calls=["rerank"])
        no_models = await host.start_run([], calls=["invoke"])
        small_only = await host.start_run(["small"], calls=["invoke"])
        async with connect(host.served, only_rerank) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"models_list", "models_rerank"} <= names
            assert "models_invoke" not in names
            refused = await fails(client, "models_invoke", {"model": "small", **HI})
            assert refused["code"] == "unauthorized"
            assert "permissions.models" in refused["message"]
        async with connect(host.served, no_models) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert not {n for n in names if n.startswith("models_")}
        async with connect(host.served, small_only) as client:
            refused = await fails(client, "models_invoke", {"model": "big", **HI})
            assert refused["code"] == "unauthorized"
            assert "resources.models" in refused["message"]
            assert "'big'" in refused["message"]
        with raises_mcp_error("token does not belong to this run"):  # refused before MCP sees a call
            async with connect(host.served, small_only, token=only_rerank.token) as client:
                await client.call_tool("models_invoke", {"model": "small", **HI})
        assert upstream.requests == []
        assert await host.calls(small_only.run_id) == []


async def test_a_failing_model_falls_back_and_each_attempt_is_a_row(stores: Stores) -> None:
    async with (
        serve_fake_chat() as upstream,
        serve_models(
            stores,
            {"small": chat(upstream.base_url, fallback=["spare"]), "spare": chat(upstream.base_url, "m2")},
        ) as host,
    ):
        upstream.script("m1", Reply(status=503))
        upstream.script("m2", Reply(content="from the spare", json_body=True))
        run = await host.start_run(["small"])
        async with connect(host.served, run) as client:
            answer = ModelInvocation.model_validate(
                await ok(client, "models_invoke", {"model": "small", **HI})
            )
        assert (answer.model, answer.attempts) == ("spare", 2)
        rows = await host.calls(run.run_id)
        assert [(r.model_id, r.attempt, r.status, r.http_status) for r in rows] == [
            ("small", 1, "failed", 503),
            ("spare", 2, "ok", 200),
        ]


async def test_a_spent_budget_answers_budget_exceeded_naming_its_key(stores: Stores) -> None:
    budgets = {"agent-a": ModelBudget(model_tokens_per_run=100)}
    async with (
        serve_fake_chat() as upstream,
        serve_models(stores, {"small": chat(upstream.base_url)}, budgets=budgets) as host,
    ):
        run = await host.start_run(["small"])
        async with connect(host.served, run) as client:
            refused = await fails(client, "models_invoke", {"model": "small", **HI, "max_tokens": 500})
        assert refused["code"] == "budget_exceeded"
        assert refused["details"]["budget"] == "model_tokens_per_run"
        assert "model_tokens_per_run" in refused["message"]
        assert upstream.requests == []


async def test_a_recorded_run_s_refused_model_tool_calls_are_recorded_and_replayed_the_same(
    stores: Stores,
) -> None:
    budgets = {"agent-a": ModelBudget(model_tokens_per_run=100)}
    asks: list[JSONObject] = [
        {"model": "small", **HI, "max_tokens": 500},  # past the budget
        {"model": "big", **HI},  # not granted
        {"model": "small", "messages": [], "max_tokens": 0},  # not a request the tool takes
    ]
    async with (
        serve_fake_chat() as upstream,
        serve_models(stores, {"small": chat(upstream.base_url)}, budgets=budgets) as host,
    ):
        run = await host.start_run(["small"], limits={"record": True})
        await begin_recording(stores, run.run_id)
        async with connect(host.served, run) as client:
            refused = [await fails(client, "models_invoke", ask) for ask in asks]
    assert [r["code"] for r in refused] == ["budget_exceeded", "unauthorized", "invalid_argument"]
    assert upstream.requests == []
    recorded = await stores.recordings.calls(run.run_id)
    assert [(c.tool, c.outcome) for c in recorded] == [("models_invoke", "error")] * 3

    book = book_of(recorded)
    # The replay: no budget, an upstream nobody listens on; each refusal comes back as recorded.
    async with serve_models(stores, {"small": chat("http://127.0.0.1:9/v1")}, replay=book) as replaying:
        again = await replaying.start_run(["small"])
        async with connect(replaying.served, again) as client:
            replayed = [await fails(client, "models_invoke", ask) for ask in asks]
    assert replayed == refused
    assert [c.recorded_seq for c in book.calls] == [c.seq for c in recorded]


async def test_an_upstream_that_hangs_or_answers_garbage_gets_a_precise_error(stores: Stores) -> None:
    async with (
        serve_fake_chat() as upstream,
        fake_anthropic(always(Hang())) as hanging,
        serve_models(
            stores,
            {
                "small": chat(upstream.base_url),
                "slow": claude(hanging.base_url, timeout_s=0.5),
                "chain": chat(upstream.base_url, "m3", timeout_s=0.5),
            },
        ) as host,
    ):
        upstream.script("m1", Reply(text_body="<html>not json</html>"))
        upstream.script("m1", Reply(raw=("{not json",)))
        upstream.script("m3", Reply(hang=True))
        run = await host.start_run(["small", "slow", "chain"])
        async with connect(host.served, run) as client:
            garbage = await fails(client, "models_invoke", {"model": "small", **HI})
            broken_stream = await client.call_tool(
                "models_invoke", {"model": "small", **HI}, progress_callback=_ignore
            )
            with anyio.fail_after(20):
                slow = await fails(client, "models_invoke", {"model": "slow", **HI, "tools": [{"name": "t"}]})
                hung = await fails(client, "models_invoke", {"model": "chain", **HI})
        assert garbage["code"] == "runtime_error"
        assert garbage["retryable"] is True
        assert "not JSON" in garbage["message"]
        assert "'small'" in garbage["message"]
        assert broken_stream.is_error
        assert broken_stream.structured_content is not None
        assert broken_stream.structured_content["code"] == "runtime_error"
        assert slow["code"] == "deadline_exceeded"
        assert "'slow'" in slow["message"]
        assert hung["code"] == "deadline_exceeded"
        assert "'chain'" in hung["message"]
        rows = await host.calls(run.run_id)
        assert [r.status for r in rows] == ["failed"] * 4
        assert all(r.error for r in rows)


async def test_nan_sent_as_raw_json_rpc_is_invalid_argument(stores: Stores) -> None:
    """The SDK client writes NaN as null; Python's json writes it raw, as a careless runner would."""
    async with (
        serve_fake_chat() as upstream,
        serve_models(stores, {"small": chat(upstream.base_url)}) as host,
    ):
        run = await host.start_run(["small"])
        headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "authorization": f"Bearer {run.token}",
            "mcp-protocol-version": MODERN,
            "mcp-method": "tools/call",
            "mcp-name": "models_invoke",
        }
        raw = (
            '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "models_invoke", '
            '"arguments": {"model": "small", "max_tokens": 8, "temperature": NaN, '
            '"messages": [{"role": "user", "content": "hi"}]}, '
            f'"_meta": {{"io.modelcontextprotocol/protocolVersion": "{MODERN}", '
            '"io.modelcontextprotocol/clientCapabilities": {}, '
            '"io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"}}}}'
        )
        async with httpx2.AsyncClient(timeout=30) as http:
            response = await http.post(host.served.url(run.run_id), content=raw, headers=headers)
        text = response.text
        answer = json.loads(text.split("data: ", 1)[1].split("\n", 1)[0] if "data: " in text else text)
        assert "result" in answer, answer
        assert answer["result"]["structuredContent"]["code"] == "invalid_argument", answer
        assert "temperature" in answer["result"]["structuredContent"]["message"]
        assert upstream.requests == []


def _deep(levels: int) -> JSONObject:
    value: JSONObject = {}
    for _ in range(levels):
        value = {"a": value}
    return value


async def _ignore(progress: float, total: float | None, message: str | None) -> None:
    return None


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"model": "small", **HI, "max_tokens": 10**9}, "max_tokens"),
        ({"model": "small", **HI, "max_tokens": "64"}, "max_tokens"),
        (
            {"model": "small", "messages": [{"role": "user", "content": "x" * (8 * 1024 * 1024 + 1)}]},
            "content",
        ),
        ({"model": "small", "messages": [{"role": "user", "content": "hi", "name": "bob"}]}, "name"),
        ({"model": "small", "messages": []}, "messages"),
        ({"model": "small", **HI, "tools": [{"name": "t", "input_schema": _deep(80)}]}, "arguments"),
    ],
)
async def test_bad_arguments_are_refused_before_anything_is_reserved_or_sent(
    stores: Stores, arguments: JSONObject, field: str
) -> None:
    async with (
        serve_fake_chat() as upstream,
        serve_models(stores, {"small": chat(upstream.base_url)}) as host,
    ):
        run = await host.start_run(["small"])
        async with connect(host.served, run) as client:
            refused = await fails(client, "models_invoke", arguments)
        assert refused["code"] == "invalid_argument"
        assert field in json.dumps(refused)
        assert upstream.requests == []
        assert await host.calls(run.run_id) == []


async def test_models_rerank_scores_documents_on_the_rerank_wire(stores: Stores) -> None:
    async with (
        serve_fake_chat() as upstream,
        serve_models(
            stores,
            {"ranker": chat(upstream.base_url, "rr-1", kind="rerank"), "small": chat(upstream.base_url)},
        ) as host,
    ):
        run = await host.start_run(["ranker", "small"], calls=["rerank", "invoke"])
        documents = ["apple pie recipe", "car repair", "pie crust tips"]
        async with connect(host.served, run) as client:
            listed = ModelsList.model_validate(await ok(client, "models_list"))
            assert [(m.model_id, m.kind, m.calls) for m in listed.models] == [
                ("ranker", "rerank", ["rerank"]),
                ("small", "chat", ["invoke"]),
            ]
            answer = RerankAnswer.model_validate(
                await ok(
                    client,
                    "models_rerank",
                    {"model": "ranker", "query": "pie recipe", "documents": documents, "top_k": 2},
                ),
                context=STRICT_CONTEXT,
            )
            wrong_kind = await fails(
                client, "models_rerank", {"model": "small", "query": "q", "documents": ["d"]}
            )
        assert [r.index for r in answer.results] == [0, 2]
        assert answer.results[0].score == 1.0
        assert answer.usage.input_tokens == 10
        assert upstream.requests[0].body == {
            "model": "rr-1",
            "query": "pie recipe",
            "documents": documents,
            "top_n": 2,
        }
        assert wrong_kind["code"] == "invalid_argument"
        assert "chat model" in wrong_kind["message"]
        [row] = await host.calls(run.run_id)
        assert (row.api, row.kind, row.status, row.input_tokens) == ("rerank", "rerank", "ok", 10)


async def test_streamed_tool_calls_are_assembled_from_both_wires(stores: Stores) -> None:
    async with (
        serve_fake_chat() as upstream,
        fake_anthropic(always(ToolCall("lookup", {"q": "pie", "n": 2}))) as anthropic_upstream,
        serve_models(
            stores, {"small": chat(upstream.base_url), "sonnet": claude(anthropic_upstream.base_url)}
        ) as host,
    ):
        upstream.script(
            "m1",
            Reply(content="checking", tool_calls=(FakeToolCall("lookup", {"q": "tart", "n": 3}, id="c1"),)),
        )
        run = await host.start_run(["small", "sonnet"], calls=["stream"])
        deltas: list[str | None] = []

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            deltas.append(message)

        request = {**HI, "tools": [{"name": "lookup"}]}
        async with connect(host.served, run, mode=MODERN) as client:
            from_chat = await client.call_tool(
                "models_invoke", {"model": "small", **request}, progress_callback=progress
            )
            from_anthropic = await client.call_tool(
                "models_invoke", {"model": "sonnet", **request}, progress_callback=progress
            )
        chat_answer = ModelInvocation.model_validate(from_chat.structured_content)
        anthropic_answer = ModelInvocation.model_validate(from_anthropic.structured_content)
        assert [p.model_dump() for p in chat_answer.message.content] == [
            {"type": "text", "text": "checking"},
            {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"q": "tart", "n": 3}},
        ]
        assert chat_answer.stop_reason == "tool_use"
        [call] = anthropic_answer.message.content
        assert call.model_dump(exclude={"id"}) == {
            "type": "tool_call",
            "name": "lookup",
            "arguments": {"q": "pie", "n": 2},
        }
        assert anthropic_answer.stop_reason == "tool_use"
        assert (anthropic_answer.usage.input_tokens, anthropic_answer.usage.output_tokens) == (
            INPUT_TOKENS,
            OUTPUT_TOKENS,
        )
        assert deltas == ["checking"]
        assert anthropic_upstream.requests[0].body["stream"] is True
        rows = await host.calls(run.run_id)
        assert [(r.api, r.streamed, r.status) for r in rows] == [
            ("chat", True, "ok"),
            ("anthropic", True, "ok"),
        ]
