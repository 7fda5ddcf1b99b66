"""The OpenTelemetry span of one host model call: `chat {model}` (`rerank {model}`, `embeddings {model}`).

Owns what the span of a finished call says, after the GenAI semantic conventions
(https://opentelemetry.io/docs/specs/semconv/gen-ai/, as far as the installed
opentelemetry-semantic-conventions names them; `tracing` spells the names): a client span named
`{gen_ai.operation.name} {gen_ai.request.model}` with the provider, the requested and the answering
model, the tokens, the time to first chunk of a stream, and `error.type` with an error status when the
call failed. Does not own where it hangs (the caller passes the run's span context for the wire
endpoints; a model tool's call hangs under the current span, its `tools/call` span) nor the usage rows.

Choices:
- One span per call, not per attempt: each attempt of the fallback chain is an event
  `mcphost.model.attempt` on it (model, attempt number, outcome, HTTP status, `error.type`), at the time
  it started. The span's `mcphost.model.id` is the model that answered, `gen_ai.request.model` the one
  the client named.
- Rerank has no operation name in the conventions; it is `rerank` (a custom value, as they allow).
- The span is recorded when the call ends (its usage is known only then), from the call's start.
- Like every span of the host, it carries no message text, no arguments and no token: ids, counts, codes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from mcphost import tracing
from mcphost.llm.upstream import Attempt
from mcphost.stores.usage import AttemptEnd, CallStart

OPERATIONS: Mapping[str, str] = {"chat": "chat", "rerank": "rerank", "embedding": "embeddings"}
"""`gen_ai.operation.name` of a call, by the kind of the model called."""
ATTEMPT_EVENT = "mcphost.model.attempt"


def error_type(attempt: Attempt) -> str:
    """A failed attempt's `error.type`: its error kind, else the upstream's HTTP status."""
    if attempt.error_kind is not None:
        return attempt.error_kind
    return str(attempt.http_status) if attempt.http_status is not None else "upstream"


def _tried(attempt: Attempt) -> dict[str, str | int | float | bool]:
    """Which model an attempt tried and, when it answered, its HTTP status."""
    found: dict[str, str | int | float | bool] = {
        tracing.MODEL_ID: attempt.model_id,
        tracing.MODEL_UPSTREAM: attempt.upstream_model,
    }
    if attempt.http_status is not None:
        found[tracing.HTTP_STATUS] = attempt.http_status
    return found


def record_call(
    start: CallStart,
    created_at: float,
    attempts: Sequence[Attempt],
    ends: Sequence[AttemptEnd],
    providers: Mapping[str, str],
    parent: tracing.Carrier | None,
) -> None:
    """Record the span of a call that began at `created_at` (epoch seconds) and ends now; `attempts` and
    `ends` are its attempts as tried and as ended, in order. Tracing off: nothing."""
    if not tracing.enabled() or not attempts:
        return
    operation = OPERATIONS.get(start.kind, start.kind)
    last, end = attempts[-1], ends[-1]
    provider = providers.get(last.model_id, "")
    attributes: dict[str, str | int | float | bool] = {
        tracing.OPERATION: operation,
        tracing.GEN_AI_PROVIDER: provider,
        tracing.GEN_AI_SYSTEM: provider,
        tracing.GEN_AI_REQUEST_MODEL: start.model_id,
        **_tried(last),
        tracing.GEN_AI_INPUT_TOKENS: end.input_tokens,
        tracing.GEN_AI_OUTPUT_TOKENS: end.output_tokens,
        tracing.GEN_AI_CACHED_TOKENS: end.cached_tokens,
        tracing.MODEL_COST: end.cost_usd,
        tracing.MODEL_ATTEMPTS: len(attempts),
        tracing.MODEL_STREAMED: start.streamed,
        tracing.RUN_ID: start.run_id,
        tracing.AGENT_NAME: start.agent_id,
    }
    if start.conversation_id is not None:
        attributes[tracing.CONVERSATION_ID] = start.conversation_id
    if last.status == "ok":
        attributes[tracing.GEN_AI_RESPONSE_MODEL] = end.response_model or last.upstream_model
    if start.streamed and last.status == "ok" and end.ttft_ms is not None:
        attributes[tracing.GEN_AI_TIME_TO_FIRST_CHUNK] = end.ttft_ms / 1000
    # Attempts carry monotonic start times: placed on the wall clock from the first one.
    origin = attempts[0].started
    events: list[tracing.SpanEvent] = []
    for attempt in attempts:
        said = {**_tried(attempt), tracing.MODEL_ATTEMPT: attempt.attempt, tracing.OUTCOME: attempt.status}
        if attempt.status == "failed":
            said[tracing.ERROR_TYPE] = error_type(attempt)
        at_ns = int((created_at + max(0.0, attempt.started - origin)) * 1e9)
        events.append((ATTEMPT_EVENT, said, at_ns))
    tracing.record(
        f"{operation} {start.model_id}",
        start_ns=int(created_at * 1e9),
        end_ns=time.time_ns(),
        attributes=attributes,
        error_type=error_type(last) if last.status == "failed" else None,
        parent=parent,
        kind="client",
        events=events,
    )
