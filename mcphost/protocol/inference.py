"""Host model calls over the per-run MCP server: the provider-neutral arguments and answers of
`models_list`, `models_invoke`, `models_rerank` and `models_embed` (PROTOCOL §7).

Owns one request shape for every chat model the host serves — messages of text, image, tool-call and
tool-result parts, a system prompt, tools, sampling settings — and the answer shapes (`ModelInvocation`,
`ModelsList`, `RerankAnswer`, `EmbeddingAnswer`). The host translates a request into its model's own wire format
(Anthropic Messages or OpenAI Chat Completions, `mcphost.llm.neutral`) and the answer back; a runner
never sees a provider's format, URL or key. Pure, like the rest of the package.

Invariants:
- Arguments forbid unknown fields at every level, refuse NaN/Infinity and are strict JSON types; their
  size is bounded (`MAX_MESSAGES`, `MAX_REQUEST_CHARS` of text and images together, `MAX_OUTPUT_TOKENS`),
  so an oversized request is refused before a reservation is made or an upstream is called.
- Answer parts are the same classes as argument parts (an assistant answer can be sent back as the
  next request's assistant message unchanged); as answers, their models ignore unknown fields.
- A streamed call (the MCP client sent a progress token) answers the same `ModelInvocation`; its text
  deltas travel before it as progress notifications (`message` = the delta, `progress` = deltas so far).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from mcphost.protocol._base import JSONObject, ProtocolModel
from mcphost.protocol.context import HostModelInfo

MAX_MESSAGES = 1000
MAX_REQUEST_CHARS = 8 * 1024 * 1024
"""The most characters of text (and base64 image data) one `models_invoke` request carries."""
MAX_OUTPUT_TOKENS = 128_000
MAX_TOOLS = 128
MAX_RERANK_DOCUMENTS = 1000
MAX_EMBED_INPUTS = 2048
"""The most texts one `models_embed` call embeds (OpenAI's own bound per request)."""
MAX_EMBED_INPUT_CHARS = 100_000
"""The longest text `models_embed` takes (embedding models take a few thousand tokens at most)."""
MAX_EMBED_DIMENSIONS = 65_536

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal", "other"]
"""Why the model stopped: its turn ended, it hit `max_tokens` or a `stop` string, it called tools, it
refused (a provider's content filter), or another reason a provider gave."""
ImageMediaType = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]


class _Part(ProtocolModel):
    """A part of a request: strict JSON types; the host validates arguments under `STRICT_CONTEXT`, so an
    unknown field is refused at any level there, while a runner parsing an answer ignores it."""

    model_config = ConfigDict(frozen=True, allow_inf_nan=False, strict=True)


class TextPart(_Part):
    type: Literal["text"] = "text"
    text: str = Field(max_length=MAX_REQUEST_CHARS)


class ImagePart(_Part):
    """An image, inline as base64 (for a model whose `images` is true)."""

    type: Literal["image"] = "image"
    media_type: ImageMediaType
    data: str = Field(max_length=MAX_REQUEST_CHARS, pattern=r"^[A-Za-z0-9+/]*={0,2}$")
    """The image's bytes as standard base64."""


class ToolCallPart(_Part):
    """A call the model made to one of the request's tools (in an assistant message)."""

    type: Literal["tool_call"] = "tool_call"
    id: str = Field(min_length=1, max_length=200)
    """The call's id, which its `tool_result` names."""
    name: str = Field(min_length=1, max_length=64)
    arguments: JSONObject
    """The call's arguments (a JSON object)."""


class ToolResultPart(_Part):
    """What a tool call answered (in a user message after the assistant message that called it)."""

    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str = Field(min_length=1, max_length=200)
    content: str = Field(max_length=MAX_REQUEST_CHARS)
    is_error: bool = False


Part = Annotated[TextPart | ImagePart | ToolCallPart | ToolResultPart, Field(discriminator="type")]
AnswerPart = Annotated[TextPart | ToolCallPart, Field(discriminator="type")]


class ModelMessage(_Part):
    """One turn of the conversation sent to the model."""

    role: Literal["user", "assistant"]
    content: (
        Annotated[str, Field(max_length=MAX_REQUEST_CHARS)]
        | Annotated[list[Part], Field(max_length=MAX_MESSAGES)]
    )
    """Text, or parts: text and images (user), tool calls (assistant), tool results (user)."""


class ModelTool(_Part):
    """A tool the model may call."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = Field(default="", max_length=10_000)
    input_schema: JSONObject = Field(default_factory=lambda: {"type": "object"})
    """The JSON Schema of the tool's arguments (an object schema)."""


class _Args(_Part):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class ModelsListArgs(_Args):
    """`models_list` takes no arguments."""


class ModelsInvokeArgs(_Args):
    """`models_invoke`: one chat completion by a host model, in the host's neutral shape."""

    model: str = Field(min_length=1, max_length=64)
    """The id of a host model this run is granted (`models_list` shows them)."""
    messages: list[ModelMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    """The conversation so far, oldest first, ending with the user's turn (or tool results)."""
    system: str | None = Field(default=None, max_length=MAX_REQUEST_CHARS)
    """The system prompt."""
    tools: list[ModelTool] = Field(default_factory=list[ModelTool], max_length=MAX_TOOLS)
    """Tools the model may call (name, description, input_schema); its calls come back as `tool_call` parts."""
    tool_choice: Literal["auto", "any", "none"] | None = None
    """`auto` (the model decides), `any` (it must call a tool) or `none`; default: the provider's."""
    max_tokens: int = Field(default=1024, ge=1, le=MAX_OUTPUT_TOKENS)
    """The most tokens the answer may have (the call's budget reservation counts them)."""
    temperature: float | None = Field(default=None, ge=0, le=2)
    """Sampling temperature (0-2); default: the provider's."""
    top_p: float | None = Field(default=None, gt=0, le=1)
    """Nucleus sampling mass (0-1]; default: the provider's."""
    stop: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list[str], max_length=4
    )
    """Strings that end the answer when the model writes them."""

    @model_validator(mode="after")
    def _bounded(self) -> ModelsInvokeArgs:
        size = len(self.system or "")
        for message in self.messages:
            if isinstance(message.content, str):
                size += len(message.content)
                continue
            for part in message.content:
                match part:
                    case TextPart():
                        size += len(part.text)
                    case ImagePart():
                        size += len(part.data)
                    case ToolResultPart():
                        size += len(part.content)
                    case ToolCallPart():
                        size += len(str(part.arguments))
        if size > MAX_REQUEST_CHARS:
            raise ValueError(
                f"the messages carry {size} characters, over the {MAX_REQUEST_CHARS} a call may send; "
                "send fewer or shorter messages"
            )
        return self


class ModelsRerankArgs(_Args):
    """`models_rerank`: score documents by relevance to a query with a host rerank model."""

    model: str = Field(min_length=1, max_length=64)
    """The id of a host model of kind `rerank` this run is granted."""
    query: str = Field(min_length=1, max_length=100_000)
    """What the documents are scored against."""
    documents: list[Annotated[str, Field(max_length=100_000)]] = Field(
        min_length=1, max_length=MAX_RERANK_DOCUMENTS
    )
    """The texts to score; results name them by their position here."""
    top_k: int | None = Field(default=None, ge=1, le=MAX_RERANK_DOCUMENTS)
    """Return only the best `top_k` documents (default: all)."""


class ModelsEmbedArgs(_Args):
    """`models_embed`: a vector for each text from a host embedding model."""

    model: str = Field(min_length=1, max_length=64)
    """The id of a host model of kind `embedding` this run is granted."""
    inputs: list[Annotated[str, Field(min_length=1, max_length=MAX_EMBED_INPUT_CHARS)]] = Field(
        min_length=1, max_length=MAX_EMBED_INPUTS
    )
    """The texts to embed; the answer's vectors are in the same order."""
    dimensions: int | None = Field(default=None, ge=1, le=MAX_EMBED_DIMENSIONS)
    """The length of each vector, for models that can shorten theirs (default: the model's own)."""


# -- answers ------------------------------------------------------------------------------------------


class ModelAnswer(ProtocolModel):
    """Base of the model tools' answers: unknown fields ignored (refused under `STRICT_CONTEXT`), frozen."""

    model_config = ConfigDict(frozen=True)


class ModelsList(ModelAnswer):
    """`models_list`: the host models this run may call, and how."""

    models: list[HostModelInfo]


class ModelUsage(ModelAnswer):
    """What a call used: input tokens exclude cached input read (`cached_tokens`), as both providers count."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost_usd: float
    """The call's cost at the host's prices (0 for a model the host has no price for)."""


class AssistantMessage(ModelAnswer):
    role: Literal["assistant"] = "assistant"
    content: list[AnswerPart]
    """Text and tool calls, in the order the model wrote them."""


class ModelInvocation(ModelAnswer):
    """`models_invoke`: the assistant's message and what the call took."""

    model: str
    """The host model that answered: the one named, or a fallback of it."""
    response_model: str | None
    """The model name the upstream reported."""
    message: AssistantMessage
    stop_reason: StopReason
    usage: ModelUsage
    attempts: int
    """How many models of the fallback chain were tried (1: the one named answered)."""


class RerankScore(ModelAnswer):
    index: int
    """The document's position in the request's `documents`."""
    score: float
    """Its relevance to the query (higher is more relevant; the scale is the model's)."""


class RerankAnswer(ModelAnswer):
    """`models_rerank`: documents by relevance, best first."""

    model: str
    results: list[RerankScore]
    usage: ModelUsage
    attempts: int


class EmbeddingAnswer(ModelAnswer):
    """`models_embed`: one vector per input, in the order of `inputs`."""

    model: str
    """The host model that answered: the one named, or a fallback of it."""
    response_model: str | None
    """The model name the upstream reported."""
    vectors: list[list[float]]
    usage: ModelUsage
    """Embedding counts input tokens only (`output_tokens` is 0)."""
    attempts: int
