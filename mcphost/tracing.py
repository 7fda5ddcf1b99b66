"""OpenTelemetry traces of the host: whether tracing is on, its spans, and W3C trace-context carriers.

Owns the process's tracer (none by default), its configuration from the standard `OTEL_*` variables
(`from_environment`, entered by `app.open_host`), the span helpers every layer uses, and the conversion
between a span and a W3C carrier (`{"traceparent": …, "tracestate": …}`), the token-free form in which a
trace context is stored with a run, put into a runner's context, a harness CLI's environment and the
`_meta` of upstream MCP requests. Does not decide what a span says (the callers do; attribute names are
the constants below) and imports nothing of the host but `errors`.

Invariants:
- Off unless `OTEL_TRACES_EXPORTER` names an exporter (`otlp`, `console`) or a test calls `use`. Off
  means this module imports nothing of OpenTelemetry (the SDK is never imported; the API only by the
  `mcp` SDK, which needs it anyway: importing it costs about 0.3 s, so `mcphost --help` must not), `span`
  hands back one shared no-op context manager, and carriers are empty.
- The tracer is this module's, never the global provider: the `mcp` SDK records its own request spans
  against the global one, and installing it would double every MCP call span. Its client still puts the
  current span's context into the `_meta` of the requests it sends (the upstream calls).
- Spans never carry tokens, message text, arguments or results: identifiers, names, sizes and outcome
  codes only.
- A carrier that does not parse as W3C trace context is ignored (empty), never an error.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Generator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Literal

from mcphost.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider
else:
    Span = object  # the annotation callers write; the real type is imported only when tracing is on

logger = logging.getLogger(__name__)

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
Carrier = Mapping[str, str]
"""A W3C trace context as text: `traceparent` and, optionally, `tracestate`."""
SpanKind = Literal["internal", "server", "client"]

# Attribute names: the GenAI and MCP semantic conventions where they have one, `mcphost.*` otherwise.
RUN_ID = "mcphost.run.id"
RUN_STATUS = "mcphost.run.status"
RUNNER_ID = "mcphost.runner.id"
EVENT_ID = "mcphost.event.id"
EVENT_TYPE = "mcphost.event.type"
EVENT_SOURCE = "mcphost.event.source"
INGEST_VIA = "mcphost.ingest.via"
REPLAYED = "mcphost.event.replayed"
BINDING_ID = "mcphost.binding.id"
HOST_TOOL_SERVER = "mcphost.host_tool.server"
OUTCOME = "mcphost.outcome"
OPERATION = "gen_ai.operation.name"
AGENT_NAME = "gen_ai.agent.name"
AGENT_ID = "gen_ai.agent.id"
CONVERSATION_ID = "gen_ai.conversation.id"
TOOL_NAME = "gen_ai.tool.name"
MCP_METHOD = "mcp.method.name"
MCP_SESSION = "mcp.session.id"
WARM_SESSION = "mcphost.warm_session.id"
ERROR_TYPE = "error.type"
# The GenAI inference span (`chat {model}`): the names of the installed opentelemetry-semantic-conventions
# (`gen_ai_attributes`; a test pins them equal), spelled here so that tracing off imports none of it.
GEN_AI_PROVIDER = "gen_ai.provider.name"
GEN_AI_SYSTEM = "gen_ai.system"
"""The provider under its older (deprecated) name, which many trace back-ends still group by."""
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_CACHED_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
"""Seconds from the request to the first chunk of a streamed answer."""
HTTP_STATUS = "http.response.status_code"
MODEL_ID = "mcphost.model.id"
MODEL_UPSTREAM = "mcphost.model.upstream"
MODEL_ATTEMPT = "mcphost.model.attempt"
MODEL_ATTEMPTS = "mcphost.model.attempts"
MODEL_COST = "mcphost.model.cost_usd"
MODEL_STREAMED = "mcphost.model.streamed"

EXPORTERS = ("otlp", "console", "none")
PROTOCOLS = ("http/protobuf",)
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
_MAX_TRACESTATE = 512

_NOOP: AbstractContextManager[None] = nullcontext()
_tracer: Tracer | None = None
_provider_in_use: TracerProvider | None = None
"""What `use` installed: an SDK provider, or the API's no-op one (benchmarks)."""


def enabled() -> bool:
    """Whether spans are recorded in this process."""
    return _tracer is not None


def use(provider: TracerProvider | None) -> None:
    """Record spans through `provider` from now on (None: off again). Tests and `from_environment`."""
    global _tracer, _provider_in_use
    _provider_in_use = provider
    _tracer = None if provider is None else provider.get_tracer("mcphost")


def flush(timeout_s: float = 5.0) -> None:
    """Export the spans still queued, waiting up to `timeout_s` (blocking: call it from a thread)."""
    force_flush: object = getattr(_provider_in_use, "force_flush", None)
    if callable(force_flush):
        force_flush(timeout_millis=int(timeout_s * 1000))


@contextmanager
def from_environment(environ: Mapping[str, str] | None = None) -> Generator[bool]:
    """Install the exporter the `OTEL_*` variables ask for, for the block; True when tracing is on.

    `OTEL_TRACES_EXPORTER` (`otlp`, `console` or `none`, the default here: tracing is opt-in),
    `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the only one installed), `OTEL_EXPORTER_OTLP_ENDPOINT`
    / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` and `OTEL_EXPORTER_OTLP_HEADERS` (read by the exporter),
    `OTEL_SERVICE_NAME` (default `mcphost`) and `OTEL_RESOURCE_ATTRIBUTES`; `OTEL_SDK_DISABLED=true` wins.
    Spans still queued are exported when the block ends. A tracer installed already (`use`) is kept.

    Raises:
        ConfigError: an exporter or protocol this host cannot use.
    """
    env = os.environ if environ is None else environ
    names = _exporters(env)
    if not names or _tracer is not None:
        yield _tracer is not None
        return
    provider = _provider(names, env)
    use(provider)
    try:
        yield True
    finally:
        use(None)
        provider.shutdown()


def _exporters(env: Mapping[str, str]) -> list[str]:
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "none").split(",") if n.strip()]
    for name in names:
        if name not in EXPORTERS:
            raise ConfigError(
                f"OTEL_TRACES_EXPORTER names {name!r}, which this host does not have; use one of "
                f"{', '.join(EXPORTERS)}."
            )
    names = [n for n in names if n != "none"]
    if "otlp" in names:
        protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
            "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
        )
        if protocol.strip().lower() not in PROTOCOLS:
            raise ConfigError(
                f"OTEL_EXPORTER_OTLP_PROTOCOL is {protocol!r}; this host exports OTLP over "
                f"{', '.join(PROTOCOLS)} only (point it at the collector's HTTP port, usually 4318)."
            )
    return names


def _provider(names: list[str], env: Mapping[str, str]) -> SdkTracerProvider:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    from mcphost import __version__

    attributes = {"service.version": __version__}
    if not env.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = "mcphost"
    provider = TracerProvider(resource=Resource.create(attributes))
    for name in names:
        exporter: SpanExporter
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        else:
            exporter = ConsoleSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))
    logger.info("tracing on: exporting spans through %s", ", ".join(names))
    return provider


# -- spans -----------------------------------------------------------------------------------------------


def span(
    name: str,
    *,
    parent: Carrier | None = None,
    kind: SpanKind = "internal",
    attributes: Mapping[str, str | int | float | bool] | None = None,
) -> AbstractContextManager[Span | None]:
    """A span around the block, current inside it: a child of `parent` when given (a carrier; one that
    does not parse starts a new trace), else of the current span. Off: a no-op yielding None.
    An exception leaving the block is recorded on the span (type and status, never its message)."""
    if _tracer is None:
        return _NOOP
    return _span(_tracer, name, parent, kind, attributes)


@contextmanager
def _span(
    tracer: Tracer,
    name: str,
    parent: Carrier | None,
    kind: SpanKind,
    attributes: Mapping[str, str | int | float | bool] | None,
) -> Generator[Span]:
    from opentelemetry.trace import SpanKind as OtelKind
    from opentelemetry.trace import StatusCode

    otel_kind = {"internal": OtelKind.INTERNAL, "server": OtelKind.SERVER, "client": OtelKind.CLIENT}[kind]
    context = None if parent is None else _context(parent)
    with tracer.start_as_current_span(
        name,
        context=context,
        kind=otel_kind,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            # The type only: an exception's message may quote input (event text, arguments).
            if not current.is_recording():
                raise
            current.set_attribute(ERROR_TYPE, _error_type(exc))
            current.set_status(StatusCode.ERROR)
            raise


def _error_type(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) else type(exc).__qualname__


Attributes = Mapping[str, str | int | float | bool]
SpanEvent = tuple[str, Attributes, int]
"""A named point of a span: (name, attributes, time in ns since the epoch)."""


def record(
    name: str,
    *,
    start_ns: int,
    attributes: Attributes,
    error_type: str | None = None,
    parent: Carrier | None = None,
    kind: SpanKind = "internal",
    end_ns: int | None = None,
    events: Sequence[SpanEvent] = (),
) -> None:
    """A finished span from `start_ns` to `end_ns` (default now), with `events`: a child of `parent`
    when given, else of the current span (a step timed before its attributes were known, e.g. the
    binding before the run id, or a model call recorded once its usage is read). Off: nothing."""
    if _tracer is None:
        return
    from opentelemetry.trace import SpanKind as OtelKind
    from opentelemetry.trace import StatusCode

    otel_kind = {"internal": OtelKind.INTERNAL, "server": OtelKind.SERVER, "client": OtelKind.CLIENT}[kind]
    context = None if parent is None else _context(parent)
    done = _tracer.start_span(
        name, context=context, kind=otel_kind, start_time=start_ns, attributes=attributes
    )
    for event_name, event_attributes, at_ns in events:
        done.add_event(event_name, attributes=event_attributes, timestamp=at_ns)
    if error_type is not None:
        done.set_attribute(ERROR_TYPE, error_type)
        done.set_status(StatusCode.ERROR)
    done.end(end_time=time.time_ns() if end_ns is None else end_ns)


def annotate(current: Span | None, attributes: Mapping[str, str | int | float | bool | None]) -> None:
    """Set attributes on `current` (None: tracing is off), leaving out the None values."""
    if current is not None:
        current.set_attributes({k: v for k, v in attributes.items() if v is not None})


def fail(current: Span | None, error_type: str) -> None:
    """Mark `current` failed with `error_type` (an error code, never a message)."""
    if current is not None:
        from opentelemetry.trace import StatusCode

        current.set_attribute(ERROR_TYPE, error_type)
        current.set_status(StatusCode.ERROR)


def event(current: Span | None, name: str, attributes: Mapping[str, str] | None = None) -> None:
    """A named point in time on `current` (e.g. a run `started`)."""
    if current is not None:
        current.add_event(name, attributes=attributes)


def current_ids() -> tuple[str, str] | None:
    """The current span's `(trace_id, span_id)` in W3C hex (32 and 16 digits); None when off or outside
    any span. Log records carry them (`cli._common`), so a log line can be found from its trace."""
    if _tracer is None:
        return None
    from opentelemetry.trace import get_current_span

    found = get_current_span().get_span_context()
    if not found.is_valid:
        return None
    return format(found.trace_id, "032x"), format(found.span_id, "016x")


# -- carriers --------------------------------------------------------------------------------------------


def carrier() -> dict[str, str]:
    """The current span's context as a W3C carrier; empty when off or outside any span."""
    if _tracer is None:
        return {}
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    out: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(out)
    return out


def accept(headers: Mapping[str, str]) -> dict[str, str]:
    """A W3C carrier from inbound `traceparent`/`tracestate` headers (or `_meta`): empty when off, when
    there is none, or when it does not parse (a bad header is ignored, never refused)."""
    if _tracer is None:
        return {}
    parent = headers.get(TRACEPARENT)
    if not isinstance(parent, str) or not _TRACEPARENT.match(parent.strip()):
        return {}
    from opentelemetry.trace import get_current_span

    found = get_current_span(_context({TRACEPARENT: parent.strip()})).get_span_context()
    if not found.is_valid:
        return {}
    out = {TRACEPARENT: parent.strip()}
    state = headers.get(TRACESTATE)
    if isinstance(state, str) and state.strip() and len(state) <= _MAX_TRACESTATE and state.isprintable():
        out[TRACESTATE] = state.strip()
    return out


def carrier_of(traceparent: str | None, tracestate: str | None) -> dict[str, str] | None:
    """A carrier from a kept `traceparent` and `tracestate` (a grant's, a runner context's); None
    without a `traceparent`."""
    if traceparent is None:
        return None
    found = {TRACEPARENT: traceparent}
    if tracestate is not None:
        found[TRACESTATE] = tracestate
    return found


def _context(parent: Carrier) -> Context:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract(dict(parent))


__all__ = [
    "TRACEPARENT",
    "TRACESTATE",
    "Carrier",
    "Span",
    "accept",
    "annotate",
    "carrier",
    "carrier_of",
    "enabled",
    "event",
    "fail",
    "flush",
    "from_environment",
    "record",
    "span",
    "use",
]
