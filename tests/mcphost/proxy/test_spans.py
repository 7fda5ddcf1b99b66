"""The `chat {model}` span of each host model call (the in-memory span exporter), at the wire endpoints
and through the model tools, and the Prometheus counters of the tokens and cost: the real `ModelProxy`
and facts server over real stores, the fake chat API on 127.0.0.1."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import (  # pyright: ignore[reportMissingTypeStubs]  # the package ships no stub for its incubating names
    gen_ai_attributes as gen_ai,
)
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import generate_latest
from starlette.applications import Starlette

from mcphost import tracing
from mcphost.metrics import HostMetrics
from mcphost.proxy import ModelProxy
from mcphost.proxy.calls import ModelCalls
from mcphost.stores import Stores
from tests.fakes._serve import serve_loopback
from tests.fakes.openai_chat import Reply, serve_fake_chat
from tests.mcphost.facts._helpers import FULL_PERMISSIONS, admit_run, connect, ok, serve_facts
from tests.mcphost.proxy.kit import HOST_KEY, HOST_KEY_ENV, chat, client, serve_proxy

RUN_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
RUN_SPAN = "00f067aa0ba902b7"
RUN_PARENT = f"00-{RUN_TRACE}-{RUN_SPAN}-01"
"""The span around the run's runner, as the orchestrator hands it over (`run_trace`)."""
INGEST_SPAN = "b7ad6b7169203331"
INGEST_PARENT = f"00-{RUN_TRACE}-{INGEST_SPAN}-01"
"""The run's ingest span, as its grant keeps it."""
PRICED = {"input_usd_per_mtok": 1_000_000.0, "output_usd_per_mtok": 1_000_000.0}
"""A dollar a token: costs that are easy to read."""


@pytest.fixture(autouse=True)
def host_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOST_KEY_ENV, HOST_KEY)


async def run_span(_run_id: str) -> dict[str, str]:
    return {"traceparent": RUN_PARENT}


def model_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT]


def parent_of(span: ReadableSpan) -> tuple[str, str]:
    assert span.parent is not None
    return format(span.parent.trace_id, "032x"), format(span.parent.span_id, "016x")


def test_the_attribute_names_are_the_semantic_conventions() -> None:
    assert tracing.OPERATION == gen_ai.GEN_AI_OPERATION_NAME
    assert tracing.GEN_AI_PROVIDER == gen_ai.GEN_AI_PROVIDER_NAME
    assert tracing.GEN_AI_SYSTEM == gen_ai.GEN_AI_SYSTEM
    assert tracing.GEN_AI_REQUEST_MODEL == gen_ai.GEN_AI_REQUEST_MODEL
    assert tracing.GEN_AI_RESPONSE_MODEL == gen_ai.GEN_AI_RESPONSE_MODEL
    assert tracing.GEN_AI_INPUT_TOKENS == gen_ai.GEN_AI_USAGE_INPUT_TOKENS
    assert tracing.GEN_AI_OUTPUT_TOKENS == gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS
    assert tracing.GEN_AI_CACHED_TOKENS == gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
    assert tracing.GEN_AI_TIME_TO_FIRST_CHUNK == gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK
    assert tracing.ERROR_TYPE == error_attributes.ERROR_TYPE


async def test_a_whole_call_at_the_wire_endpoint_is_a_chat_span_under_the_run_span(
    stores: Stores, spans: InMemorySpanExporter
) -> None:
    async with serve_fake_chat() as upstream:
        upstream.script("m1", Reply(content="hello", json_body=True, usage=(8, 3)))
        models = {"small": chat(upstream.base_url, "m1", **PRICED)}
        async with serve_proxy(stores, models, run_trace=run_span) as served:
            run = await served.start_run(["small"], limits={"traceparent": INGEST_PARENT})
            async with client(run.token, bearer=True) as http:
                answer = await http.post(
                    f"{served.openai(run)}/chat/completions", json={"model": "small", "messages": []}
                )
    assert answer.status_code == 200
    [span] = model_spans(spans)
    assert span.name == "chat small"
    assert parent_of(span) == (RUN_TRACE, RUN_SPAN)
    assert span.status.status_code == StatusCode.UNSET
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai-compatible",
        "gen_ai.system": "openai-compatible",
        "gen_ai.request.model": "small",
        "gen_ai.response.model": "m1",
        "gen_ai.usage.input_tokens": 8,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.usage.cache_read.input_tokens": 0,
        "http.response.status_code": 200,
        "mcphost.model.id": "small",
        "mcphost.model.upstream": "m1",
        "mcphost.model.cost_usd": 11.0,
        "mcphost.model.attempts": 1,
        "mcphost.model.streamed": False,
        "mcphost.run.id": run.run_id,
        "gen_ai.agent.name": "agent-a",
        "gen_ai.conversation.id": "conv-1",
    }
    [attempt] = span.events
    assert attempt.name == "mcphost.model.attempt"
    assert dict(attempt.attributes or {}) == {
        "mcphost.model.id": "small",
        "mcphost.model.upstream": "m1",
        "mcphost.model.attempt": 1,
        "mcphost.outcome": "ok",
        "http.response.status_code": 200,
    }


async def test_a_streamed_call_s_span_has_its_time_to_first_chunk_and_hangs_under_the_ingest_span_else(
    stores: Stores, spans: InMemorySpanExporter
) -> None:
    async with serve_fake_chat() as upstream:
        upstream.script("m1", Reply(content="streamed words", usage=(6, 2)))
        async with serve_proxy(stores, {"small": chat(upstream.base_url, "m1")}) as served:
            run = await served.start_run(["small"], limits={"traceparent": INGEST_PARENT})
            async with client(run.token, bearer=True) as http:
                answer = await http.post(
                    f"{served.openai(run)}/chat/completions",
                    json={"model": "small", "stream": True, "messages": []},
                )
    assert answer.status_code == 200
    [span] = model_spans(spans)
    assert span.name == "chat small"
    # No runner span known here (another replica's run): the run's ingest span, kept with its grant.
    assert parent_of(span) == (RUN_TRACE, INGEST_SPAN)
    attributes = dict(span.attributes or {})
    assert attributes["mcphost.model.streamed"] is True
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (6, 2)
    ttft = attributes["gen_ai.response.time_to_first_chunk"]
    assert isinstance(ttft, float)
    assert span.start_time is not None
    assert span.end_time is not None
    assert 0 < ttft <= (span.end_time - span.start_time) / 1e9


async def test_a_failed_call_with_fallbacks_is_one_error_span_with_an_event_per_attempt(
    stores: Stores, spans: InMemorySpanExporter
) -> None:
    async with serve_fake_chat() as upstream:
        upstream.script("m1", Reply(status=503, error="overloaded"), Reply(status=503, error="overloaded"))
        upstream.script("m2", Reply(content="from the fallback", json_body=True, usage=(8, 3)))
        upstream.script("m3", Reply(status=500, error="broken"))
        models = {
            "main": chat(upstream.base_url, "m1", fallback=["spare"]),
            "spare": chat(upstream.base_url, "m2"),
            "doomed": chat(upstream.base_url, "m1", fallback=["broken"]),
            "broken": chat(upstream.base_url, "m3"),
        }
        async with serve_proxy(stores, models, run_trace=run_span) as served:
            run = await served.start_run(["main", "doomed"])
            async with client(run.token, bearer=True) as http:
                url = f"{served.openai(run)}/chat/completions"
                rescued = await http.post(url, json={"model": "main", "messages": []})
                failed = await http.post(url, json={"model": "doomed", "messages": []})
    assert (rescued.status_code, failed.status_code) == (200, 502)
    ok_span, error_span = sorted(model_spans(spans), key=lambda s: s.start_time or 0)
    assert (ok_span.name, error_span.name) == ("chat main", "chat doomed")
    assert parent_of(ok_span) == parent_of(error_span) == (RUN_TRACE, RUN_SPAN)

    assert ok_span.status.status_code == StatusCode.UNSET
    ok_attributes = dict(ok_span.attributes or {})
    assert ok_attributes["gen_ai.request.model"] == "main"
    assert ok_attributes["mcphost.model.id"] == "spare"
    assert ok_attributes["gen_ai.response.model"] == "m2"
    assert ok_attributes["mcphost.model.attempts"] == 2
    assert [dict(e.attributes or {}) for e in ok_span.events] == [
        {
            "mcphost.model.id": "main",
            "mcphost.model.upstream": "m1",
            "mcphost.model.attempt": 1,
            "mcphost.outcome": "failed",
            "http.response.status_code": 503,
            "error.type": "upstream",
        },
        {
            "mcphost.model.id": "spare",
            "mcphost.model.upstream": "m2",
            "mcphost.model.attempt": 2,
            "mcphost.outcome": "ok",
            "http.response.status_code": 200,
        },
    ]

    assert error_span.status.status_code == StatusCode.ERROR
    error_attributes_found = dict(error_span.attributes or {})
    assert error_attributes_found["error.type"] == "upstream"
    assert "gen_ai.response.model" not in error_attributes_found
    assert error_attributes_found["gen_ai.usage.output_tokens"] == 0
    assert [(e.attributes or {}).get("http.response.status_code") for e in error_span.events] == [503, 500]
    assert [(e.attributes or {}).get("error.type") for e in error_span.events] == ["upstream", "upstream"]


async def test_a_model_tool_call_is_a_chat_span_under_its_tools_call_span_under_the_run(
    stores: Stores, spans: InMemorySpanExporter
) -> None:
    async with serve_fake_chat() as upstream:
        upstream.script("m1", Reply(content="hi back", json_body=True, usage=(9, 4)))
        models = {"small": chat(upstream.base_url, "m1")}
        proxy = ModelProxy(stores, models)
        async with proxy.running(), serve_facts(stores, models=ModelCalls(proxy, models)) as served:
            run = await served.start_run(
                permissions={**FULL_PERMISSIONS, "models": ["invoke"]},
                agent={"resources": {"knowledge_bases": ["kb-docs"], "models": ["small"]}},
                limits={"traceparent": INGEST_PARENT},
            )
            async with connect(served, run) as mcp:
                answer = await ok(
                    mcp, "models_invoke", {"model": "small", "messages": [{"role": "user", "content": "hi"}]}
                )
    assert answer["usage"]["input_tokens"] == 9  # pyright: ignore[reportIndexIssue, reportCallIssue, reportArgumentType]
    [span] = model_spans(spans)
    [tool_span] = [s for s in spans.get_finished_spans() if s.name == "tools/call models_invoke"]
    assert span.name == "chat small"
    assert tool_span.context is not None
    assert parent_of(span) == (RUN_TRACE, format(tool_span.context.span_id, "016x"))
    assert parent_of(tool_span) == (RUN_TRACE, INGEST_SPAN)
    attributes = dict(span.attributes or {})
    assert {k: attributes[k] for k in ("gen_ai.operation.name", "gen_ai.request.model")} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "small",
    }
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (9, 4)
    assert attributes["gen_ai.response.model"] == "m1"


async def test_tokens_and_cost_are_counted_by_model_agent_and_kind(stores: Stores) -> None:
    metrics = HostMetrics()
    async with serve_fake_chat() as upstream:
        upstream.script(
            "m1",
            Reply(content="one", json_body=True, usage=(8, 3)),
            Reply(content="two", json_body=True, usage=(2, 1)),
        )
        models = {"small": chat(upstream.base_url, "m1", **PRICED)}
        proxy = ModelProxy(stores, models, on_call=metrics.model_call)
        async with proxy.running(), serve_loopback(Starlette(routes=proxy.routes)) as url:
            run = await admit_run(
                stores,
                base_url=url,
                permissions={**FULL_PERMISSIONS, "models": ["invoke"]},
                agent={"resources": {"knowledge_bases": ["kb-docs"], "models": ["small"]}},
            )
            async with client(run.token, bearer=True) as http:
                for _ in range(2):
                    answer = await http.post(
                        f"{url}/runs/{run.run_id}/models/openai/v1/chat/completions",
                        json={"model": "small", "messages": []},
                    )
                    assert answer.status_code == 200
    lines = generate_latest(metrics.registry).decode().splitlines()
    assert 'mcphost_model_tokens_total{agent="agent-a",kind="input",model="small"} 10.0' in lines
    assert 'mcphost_model_tokens_total{agent="agent-a",kind="output",model="small"} 4.0' in lines
    assert 'mcphost_model_tokens_total{agent="agent-a",kind="cached",model="small"} 0.0' in lines
    assert 'mcphost_model_cost_usd_total{agent="agent-a",model="small"} 14.0' in lines


async def test_an_embedding_call_is_an_embeddings_span(stores: Stores, spans: InMemorySpanExporter) -> None:
    async with serve_fake_chat() as upstream:
        models = {"emb": chat(upstream.base_url, "e1", kind="embedding")}
        async with serve_proxy(stores, models, run_trace=run_span) as served:
            run = await served.start_run(["emb"], calls=["embed"])
            async with client(run.token, bearer=True) as http:
                answer = await http.post(
                    f"{served.openai(run)}/embeddings", json={"model": "emb", "input": ["a b", "c"]}
                )
    assert answer.status_code == 200
    [span] = model_spans(spans)
    assert span.name == "embeddings emb"
    assert parent_of(span) == (RUN_TRACE, RUN_SPAN)
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.operation.name"] == "embeddings"
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (3, 0)
    assert attributes["gen_ai.response.model"] == "e1"
