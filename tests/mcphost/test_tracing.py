"""OpenTelemetry traces: the span tree of one memo run through the real app (in-memory exporter), a caller's
`traceparent`, the real OTLP/HTTP exporter of `mcphost run` sending to a receiver on 127.0.0.1, and
tracing off (no spans, no OpenTelemetry module imported).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncGenerator, Generator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcphost import tracing
from mcphost.app import Host, open_host
from mcphost.config import PluginConfig, ToolServerConfig
from mcphost.errors import ConfigError
from mcphost.facts._dispatch import FactsDispatch
from tests.e2e.httpkit import api_settings, event_body, serve_app
from tests.mcphost.gateway.test_host_tools import HttpUpstream, free_port, gateway, grant, text_of
from tests.mcphost.hostkit import REPO, agent

MEMO_RUNNER = "plugin:mcphost/memo/default"
CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
CALLER = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
SECRET_TEXT = "tea with the secret word xyzzy"


@pytest.fixture
async def host(database_url: str, tmp_path: Path, spans: InMemorySpanExporter) -> AsyncGenerator[Host]:
    del spans  # tracing is on before the host opens
    settings = api_settings(database_url, tmp_path / "data")
    memo = PluginConfig(command=[sys.executable, "-m", "mcphost_runners.memo"], name="memo")
    settings = settings.model_copy(
        update={
            "plugins": [*settings.plugins, memo],
            "agents": [*settings.agents, agent("memo", MEMO_RUNNER)],
        }
    )
    async with open_host(settings) as opened:
        yield opened


async def post_and_wait(url: str, body: dict[str, Any], headers: dict[str, str]) -> str:
    async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
        answer = await client.post("/v1/events", json=body, headers=headers)
        assert answer.status_code == 202, answer.text
        run_id: str = answer.json()["run_id"]
        with anyio.fail_after(60):
            while (await client.get(f"/v1/runs/{run_id}")).json()["run"]["status"] in ("queued", "running"):  # noqa: ASYNC110
                await anyio.sleep(0.05)
    return run_id


async def finished(exporter: InMemorySpanExporter, name_prefix: str) -> list[ReadableSpan]:
    """The finished spans once one named `name_prefix…` is among them (the run span ends after the run's
    end is recorded, so a reader may see the end first)."""
    with anyio.fail_after(30):
        while not any(s.name.startswith(name_prefix) for s in exporter.get_finished_spans()):  # noqa: ASYNC110
            await anyio.sleep(0.02)
    return list(exporter.get_finished_spans())


def one(found: list[ReadableSpan], name: str) -> ReadableSpan:
    matching = [s for s in found if s.name == name]
    assert len(matching) == 1, [s.name for s in found]
    return matching[0]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


async def test_a_memo_run_is_one_tree_from_the_callers_span_to_each_mcp_call(
    host: Host, spans: InMemorySpanExporter
) -> None:
    async with serve_app(host) as served:
        run_id = await post_and_wait(
            served.url,
            event_body(SECRET_TEXT, bot="memo"),
            {"traceparent": CALLER, "tracestate": "vendor=1"},
        )
        found = await finished(spans, "invoke_agent")

    ingest = one(found, "mcphost.ingest")
    binding = one(found, "mcphost.binding")
    run = one(found, "invoke_agent memo")
    runner = one(found, f"mcphost.runner {MEMO_RUNNER}")
    calls = [s for s in found if s.name.startswith("tools/call ")]

    assert ingest.context is not None
    assert ingest.context.trace_id == int(CALLER_TRACE, 16)
    assert parent_of(ingest) == int(CALLER_SPAN, 16)
    assert parent_of(binding) == span_id(ingest)
    assert parent_of(run) == span_id(ingest)
    assert parent_of(runner) == span_id(run)
    called = {str(s.attributes["gen_ai.tool.name"]) for s in calls if s.attributes}
    assert {"state_get", "state_set", "history_page"} <= called, called
    for call in calls:
        assert parent_of(call) == span_id(runner), call.name
        assert call.attributes is not None
        assert call.attributes["mcp.method.name"] == "tools/call"
        assert call.attributes["gen_ai.operation.name"] == "execute_tool"
        assert call.attributes["mcphost.outcome"] in ("ok", "refused", "error")
    for span in found:
        assert span.context is not None
        assert span.context.trace_id == int(CALLER_TRACE, 16), span.name
        assert span.attributes is not None
        assert span.attributes.get("mcphost.run.id") == run_id, span.name
        assert "xyzzy" not in json.dumps(dict(span.attributes)), span.name
        assert "xyzzy" not in json.dumps([dict(e.attributes or {}) for e in span.events]), span.name

    assert run.attributes is not None
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.agent.name"] == "memo"
    assert run.attributes["gen_ai.conversation.id"] == "c1"
    assert run.attributes["mcphost.run.status"] == "completed"
    assert [e.name for e in run.events] == ["started", "ended"]
    assert ingest.attributes is not None
    assert ingest.attributes["mcphost.ingest.via"] == "api"
    # The runner was given the runner span's context; the stored admission record keeps the ingest's.
    stored = await host.stores.runs.grant(run_id)
    assert stored.grant.traceparent is not None
    assert stored.grant.traceparent.split("-")[2] == f"{span_id(ingest):016x}"


async def test_memo_sends_the_runner_spans_context_in_meta_on_its_own_mcp_calls(
    host: Host, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def no_fallback(self: FactsDispatch, access: object) -> None:
        del self, access

    # Without the host's fallback (a call without `_meta.traceparent` hangs under the runner span anyway),
    # a call starts a trace of its own unless the runner sent the context itself.
    monkeypatch.setattr(FactsDispatch, "_trace_parent", no_fallback)
    async with serve_app(host) as served:
        await post_and_wait(served.url, event_body(SECRET_TEXT, bot="memo"), {"traceparent": CALLER})
        found = await finished(spans, "invoke_agent")
    runner = one(found, f"mcphost.runner {MEMO_RUNNER}")
    calls = [s for s in found if s.name.startswith("tools/call ")]
    assert len(calls) >= 3, [s.name for s in found]
    for call in calls:
        assert call.context is not None
        assert call.context.trace_id == int(CALLER_TRACE, 16), call.name
        assert parent_of(call) == span_id(runner), call.name


@pytest.mark.parametrize(
    "header",
    [
        "garbage",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # an all-zero trace id is invalid
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",  # upper case is not W3C
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\x00",
        "x" * 10_000,
    ],
)
async def test_a_bad_traceparent_is_ignored_and_the_run_starts_a_trace_of_its_own(
    host: Host, spans: InMemorySpanExporter, header: str
) -> None:
    from tests.e2e.httpkit import asgi_client

    async with asgi_client(host) as client:
        request = client.build_request(
            "POST", "/v1/events", json=event_body("hello"), headers={"tracestate": "a=\x01"}
        )
        request.headers["traceparent"] = header  # as sent, not re-encoded
        answer = await client.send(request)
        assert answer.status_code == 202, answer.text
        found = await finished(spans, "invoke_agent")
    ingest = one(found, "mcphost.ingest")
    assert ingest.parent is None
    assert ingest.context is not None
    assert ingest.context.trace_id != int(CALLER_TRACE, 16)


@pytest.fixture
async def web_upstream() -> AsyncGenerator[ToolServerConfig]:
    """The fake upstream tool server over HTTP on 127.0.0.1 (a real process)."""
    upstream = HttpUpstream(free_port(), None)
    await upstream.start()
    try:
        yield ToolServerConfig(url=upstream.url, timeout_s=20)
    finally:
        await upstream.stop()


async def test_an_http_upstream_gets_the_calls_trace_context_as_headers_and_in_meta(
    spans: InMemorySpanExporter, web_upstream: ToolServerConfig
) -> None:
    async with gateway({"web": web_upstream}) as gw:
        got = json.loads(text_of(await gw.call_tool(grant("web__*"), "web__trace", {})))
    call = one(list(spans.get_finished_spans()), "tools/call web__trace")
    assert call.context is not None
    sent = f"00-{call.context.trace_id:032x}-{call.context.span_id:016x}-{call.context.trace_flags:02x}"
    assert got["header_traceparent"] == sent  # what HTTP middleware in front of the upstream reads
    assert got["meta_traceparent"] == sent  # the MCP convention


async def test_an_untraced_call_sends_an_http_upstream_no_trace_headers(
    web_upstream: ToolServerConfig,
) -> None:
    assert not tracing.enabled()
    async with gateway({"web": web_upstream}) as gw:
        got = json.loads(text_of(await gw.call_tool(grant("web__*"), "web__trace", {})))
    assert got == {"header_traceparent": None, "header_tracestate": None, "meta_traceparent": None}


def test_accept_keeps_a_valid_context_and_drops_what_does_not_parse(spans: InMemorySpanExporter) -> None:
    del spans
    assert tracing.accept({"traceparent": CALLER, "tracestate": "k=v"}) == {
        "traceparent": CALLER,
        "tracestate": "k=v",
    }
    assert tracing.accept({"traceparent": CALLER, "tracestate": "k=v\n"}) == {"traceparent": CALLER}
    assert tracing.accept({"traceparent": CALLER, "tracestate": "k=" + "v" * 600}) == {"traceparent": CALLER}
    assert tracing.accept({"tracestate": "k=v"}) == {}
    assert tracing.accept({"traceparent": "ff-" + CALLER[3:]}) == {}  # version ff is forbidden


def test_tracing_off_accepts_nothing_and_records_nothing() -> None:
    assert not tracing.enabled()
    assert tracing.accept({"traceparent": CALLER}) == {}
    assert tracing.carrier() == {}
    with tracing.span("x") as current:
        assert current is None


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"OTEL_TRACES_EXPORTER": "jaeger"}, "jaeger"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "http/protobuf"),
    ],
)
def test_an_exporter_this_host_lacks_is_a_config_error(env: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError, match=words), tracing.from_environment(env):
        pass
    assert not tracing.enabled()


def test_tracing_is_off_unless_an_exporter_is_named() -> None:
    for env in (
        {},
        {"OTEL_TRACES_EXPORTER": "none"},
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"},
    ):
        with tracing.from_environment(env) as on:
            assert not on
            assert not tracing.enabled()


# -- the real exporter and the real CLI --------------------------------------------------------------------


class _Receiver(BaseHTTPRequestHandler):
    received: list[ExportTraceServiceRequest]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        if self.path == "/v1/traces" and self.headers.get("Content-Type") == "application/x-protobuf":
            type(self).received.append(request)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


@contextmanager
def otlp_receiver() -> Generator[tuple[str, list[ExportTraceServiceRequest]]]:
    received: list[ExportTraceServiceRequest] = []
    handler = type("Receiver", (_Receiver,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCPHOST_", "OTEL_"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return {**env, **extra}


def test_mcphost_run_exports_its_trace_over_otlp_http_to_the_configured_endpoint(tmp_path: Path) -> None:
    with otlp_receiver() as (endpoint, received):
        done = subprocess.run(
            [sys.executable, "-m", "mcphost.cli", "run", SECRET_TEXT],
            cwd=tmp_path,
            env=cli_env(
                OTEL_TRACES_EXPORTER="otlp",
                OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
                OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
                OTEL_SERVICE_NAME="mcphost-under-test",
            ),
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    # Exported before the command returned: the host flushes its spans as it closes.
    services = {
        attribute.value.string_value
        for request in received
        for resource in request.resource_spans
        for attribute in resource.resource.attributes
        if attribute.key == "service.name"
    }
    assert services == {"mcphost-under-test"}
    got = [
        span
        for request in received
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]
    by_name = {span.name: span for span in got}
    ingest, run, runner = (
        by_name["mcphost.ingest"],
        by_name["invoke_agent default"],
        by_name[f"mcphost.runner {MEMO_RUNNER}"],
    )
    assert run.parent_span_id == ingest.span_id
    assert runner.parent_span_id == run.span_id
    calls = [span for span in got if span.name.startswith("tools/call ")]
    assert calls
    assert all(call.parent_span_id == runner.span_id for call in calls)
    assert len({span.trace_id for span in got}) == 1
    run_ids = {a.value.string_value for span in got for a in span.attributes if a.key == "mcphost.run.id"}
    assert len(run_ids) == 1
    assert all(any(a.key == "mcphost.run.id" for a in s.attributes) for s in got)
    assert "xyzzy" not in str(got)


def test_tracing_off_imports_no_opentelemetry_for_help_and_no_sdk_for_a_run(tmp_path: Path) -> None:
    probe = (
        "import sys, anyio\n"
        "from mcphost.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], 'help imported it'\n"
        "code = main(['run', 'hello'])\n"
        "assert code == 0, code\n"
        # The API is there (the `mcp` SDK imports it for its own instrumentation); the SDK is not.
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
