"""The result stream a runner emits (PROTOCOL §4): a discriminated union on `type`.

Every result is `{type, run_id, sequence?, timestamp?, metadata, data}`. All known types are validated
through the one module-level `RESULT_ADAPTER`. `classify_result` separates the three cases the host
must treat differently: a known, valid result; a result of a type this protocol version does not know
(ignored and recorded, never an error); and a known type with invalid data (the run fails with
`invalid_argument` naming the field). A result of any type nested deeper than `MAX_JSON_DEPTH` is
invalid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, get_args

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from mcphost.common.validation import describe
from mcphost.protocol._base import (
    MAX_JSON_DEPTH,
    InboundModel,
    JSONObject,
    JSONValue,
    is_json_object,
    json_depth,
    nesting_message,
)
from mcphost.protocol._jsonsafe import (
    INT64_MAX,
    INT64_MIN,
    plainly_storable_within,
    text_problem,
    unstorable,
)
from mcphost.protocol.codes import is_error_code
from mcphost.protocol.context import ArtifactRef, ContentElement

MAX_RESULT_BYTES = 1024 * 1024
"""A serialized result may not exceed 1 MiB."""
MAX_INLINE_ARTIFACT_BYTES = 1024 * 1024
"""`artifact.created` inline content, decoded, may not exceed 1 MiB."""

StateScope = Literal["conversation", "actor", "subject", "runner", "binding", "workspace"]
STATE_SCOPES: tuple[str, ...] = get_args(StateScope)
STATE_KEY_PATTERN = r"^[A-Za-z0-9._:-]{1,200}$"


class _ResultBase(InboundModel):
    run_id: str = Field(min_length=1, max_length=100)
    sequence: int | None = Field(default=None, ge=1)
    timestamp: float | None = None
    metadata: JSONObject = Field(default_factory=dict)


# -- data payloads -----------------------------------------------------------------------------------


class MessageChunk(InboundModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    contents: list[ContentElement] | None = None


class Message(InboundModel):
    role: Literal["assistant", "system"] = "assistant"
    content: str | None = None
    contents: list[ContentElement] | None = None
    artifacts: list[ArtifactRef] = Field(default_factory=list[ArtifactRef])

    def is_empty(self) -> bool:
        return not (self.content or self.contents or self.artifacts)


class MessageDeltaData(InboundModel):
    chunk: MessageChunk


class MessageCompletedData(InboundModel):
    message: Message


class ToolCallStartedData(InboundModel):
    tool_call_id: str = Field(min_length=1, max_length=200)
    tool_name: str = Field(min_length=1, max_length=200)
    parameters: JSONObject = Field(default_factory=dict)


class ToolCallCompletedData(InboundModel):
    tool_call_id: str = Field(min_length=1, max_length=200)
    tool_name: str = Field(min_length=1, max_length=200)
    result_preview: str | None = None
    error_code: str | None = None
    error_message: str | None = None


class ArtifactCreatedData(InboundModel):
    artifact: ArtifactRef
    content_base64: str | None = None


class StateUpdatedData(InboundModel):
    scope: StateScope
    key: str = Field(pattern=STATE_KEY_PATTERN)
    value: JSONValue


class ActionRequestedData(InboundModel):
    action: str = Field(min_length=1, max_length=200)
    target: JSONValue = None
    payload: JSONObject = Field(default_factory=dict)
    idempotency_key: str | None = None
    approval_hint: str | None = None


class InteractionRequestedData(InboundModel):
    questions: list[JSONObject] = Field(min_length=1, max_length=20)
    """What the harness asks the user, as its tool put it (Claude Code's `AskUserQuestion` input)."""
    tool_use_id: str | None = Field(default=None, max_length=200)


class Usage(InboundModel):
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    total_tokens: int | None = Field(default=None, ge=0)
    cost_usd: float | None = Field(default=None, ge=0)
    extra: JSONObject = Field(default_factory=dict)


FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "cancelled", "other"]


class RunCompletedData(InboundModel):
    finish_reason: FinishReason = "stop"
    message: Message | None = None
    usage: Usage = Field(default_factory=Usage)


class RunFailedData(InboundModel):
    code: str
    message: str = Field(max_length=8000)
    retryable: bool = False
    details: JSONObject = Field(default_factory=dict)

    @field_validator("code")
    @classmethod
    def _known_code(cls, value: str) -> str:
        if not is_error_code(value):
            raise ValueError(f"unknown error code {value!r}; use a PROTOCOL §5 code or a 'runner.*' code")
        return value


# -- results -----------------------------------------------------------------------------------------


class MessageDelta(_ResultBase):
    type: Literal["message.delta"] = "message.delta"
    data: MessageDeltaData


class MessageCompleted(_ResultBase):
    type: Literal["message.completed"] = "message.completed"
    data: MessageCompletedData


class ToolCallStarted(_ResultBase):
    type: Literal["tool.call.started"] = "tool.call.started"
    data: ToolCallStartedData


class ToolCallCompleted(_ResultBase):
    type: Literal["tool.call.completed"] = "tool.call.completed"
    data: ToolCallCompletedData


class ArtifactCreated(_ResultBase):
    type: Literal["artifact.created"] = "artifact.created"
    data: ArtifactCreatedData


class StateUpdated(_ResultBase):
    type: Literal["state.updated"] = "state.updated"
    data: StateUpdatedData


class ActionRequested(_ResultBase):
    type: Literal["action.requested"] = "action.requested"
    data: ActionRequestedData


class InteractionRequested(_ResultBase):
    type: Literal["interaction.requested"] = "interaction.requested"
    data: InteractionRequestedData


class RunCompleted(_ResultBase):
    type: Literal["run.completed"] = "run.completed"
    data: RunCompletedData = Field(default_factory=RunCompletedData)


class RunFailed(_ResultBase):
    type: Literal["run.failed"] = "run.failed"
    data: RunFailedData


AgentRunResult = Annotated[
    MessageDelta
    | MessageCompleted
    | ToolCallStarted
    | ToolCallCompleted
    | ArtifactCreated
    | StateUpdated
    | ActionRequested
    | InteractionRequested
    | RunCompleted
    | RunFailed,
    Field(discriminator="type"),
]

RESULT_ADAPTER: TypeAdapter[AgentRunResult] = TypeAdapter(
    AgentRunResult,
    config=ConfigDict(defer_build=True),  # built on its first validation, not at import
)
RESULT_TYPES: frozenset[str] = frozenset(
    {
        "message.delta",
        "message.completed",
        "tool.call.started",
        "tool.call.completed",
        "artifact.created",
        "state.updated",
        "action.requested",
        "interaction.requested",
        "run.completed",
        "run.failed",
    }
)
TERMINAL_RESULT_TYPES: frozenset[str] = frozenset({"run.completed", "run.failed"})


@dataclass(frozen=True, slots=True)
class UnknownResult:
    """A result whose `type` this protocol version does not define: ignored and recorded."""

    type: str
    run_id: str | None
    sequence: int | None
    raw: JSONObject


@dataclass(frozen=True, slots=True)
class InvalidResult:
    """A known result type whose fields do not validate. `message` names the offending field."""

    type: str | None
    run_id: str | None
    sequence: int | None
    message: str


def _first_error(exc: ValidationError) -> str:
    return describe(exc, root="(result)", skip=RESULT_TYPES)


def classify_result(raw: object) -> AgentRunResult | UnknownResult | InvalidResult:
    """Validate one raw result object and say which of the three cases it is."""
    if not is_json_object(raw):
        return InvalidResult(None, None, None, f"a result must be a JSON object, got {type(raw).__name__}")
    obj = raw
    rtype = obj.get("type")
    run_id = obj.get("run_id") if isinstance(obj.get("run_id"), str) else None
    seq_raw = obj.get("sequence")
    sequence = seq_raw if isinstance(seq_raw, int) and not isinstance(seq_raw, bool) else None
    safe_type = rtype if isinstance(rtype, str) and text_problem(rtype) is None else None
    safe_run = run_id if run_id is not None and text_problem(run_id) is None else None
    safe_seq = sequence if sequence is not None and INT64_MIN <= sequence <= INT64_MAX else None
    if not plainly_storable_within(obj, MAX_JSON_DEPTH):  # the usual answer, in one walk
        if json_depth(obj) > MAX_JSON_DEPTH:  # before anything else walks the value
            return InvalidResult(safe_type, safe_run, safe_seq, nesting_message("(result)"))
        problem = unstorable(obj)
        if problem is not None:
            # Checked first: even an unknown result type is stored, and NUL or NaN must not reach a store.
            return InvalidResult(safe_type, safe_run, safe_seq, problem.message())
    if not isinstance(rtype, str):
        return InvalidResult(None, run_id, sequence, "type: a result needs a string 'type'")
    if rtype not in RESULT_TYPES:
        return UnknownResult(rtype, run_id, sequence, obj)
    try:
        return RESULT_ADAPTER.validate_python(obj)
    except ValidationError as exc:
        return InvalidResult(rtype, run_id, sequence, _first_error(exc))
