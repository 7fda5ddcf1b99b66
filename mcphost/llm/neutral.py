"""The host's provider-neutral model calls (`mcphost.protocol.inference`) in the providers' wire formats.

Owns the one translation the host does: a `models_invoke` request into an Anthropic Messages or OpenAI
Chat Completions body (`request_body`), a whole answer back (`read_answer`), a streamed answer back
event by event (`NeutralStream`, which also yields the text deltas), and a `models_rerank` request and
answer on the `/rerank` wire (`rerank_body`, `read_rerank`). The wire endpoints do not translate: they
pass bodies through. Does not call anything or count usage (`wire.py` reads usage for both).

Invariants: a reader never raises on what an upstream sent but `AnswerError` (with a message naming
what is wrong), so a garbled answer becomes one precise tool error. Tool-call arguments an OpenAI model
wrote that are not a JSON object are kept as `{"_raw": "<the text>"}` rather than dropped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from mcphost.llm.catalog import ModelConfig
from mcphost.protocol import JSONObject, JSONValue, is_json_array, is_json_object
from mcphost.protocol.inference import (
    AnswerPart,
    ImagePart,
    ModelMessage,
    ModelsInvokeArgs,
    ModelsRerankArgs,
    RerankScore,
    StopReason,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

ChatApi = Literal["anthropic", "chat"]

_ANTHROPIC_STOPS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "tool_use": "tool_use",
    "refusal": "refusal",
}
_OPENAI_STOPS: dict[str, StopReason] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


class AnswerError(Exception):
    """An upstream answer the host cannot read as the wire format says it should be."""


def api_of(entry: ModelConfig) -> ChatApi:
    """The API a chat model is called at: Anthropic Messages, or Chat Completions for the OpenAI family."""
    return "anthropic" if entry.wire == "anthropic" else "chat"


# -- requests ---------------------------------------------------------------------------------------------


def request_body(entry: ModelConfig, args: ModelsInvokeArgs, *, stream: bool) -> JSONObject:
    """The upstream body of a `models_invoke` request for `entry` (its `model` set by the upstream client)."""
    if api_of(entry) == "anthropic":
        return _anthropic_body(args, stream=stream)
    return _chat_body(entry, args, stream=stream)


def _parts(message: ModelMessage) -> Sequence[TextPart | ImagePart | ToolCallPart | ToolResultPart]:
    return [TextPart(text=message.content)] if isinstance(message.content, str) else message.content


def _anthropic_body(args: ModelsInvokeArgs, *, stream: bool) -> JSONObject:
    messages: list[JSONValue] = []
    for message in args.messages:
        blocks: list[JSONValue] = []
        for part in _parts(message):
            match part:
                case TextPart():
                    blocks.append({"type": "text", "text": part.text})
                case ImagePart():
                    source = {"type": "base64", "media_type": part.media_type, "data": part.data}
                    blocks.append({"type": "image", "source": source})
                case ToolCallPart():
                    blocks.append(
                        {"type": "tool_use", "id": part.id, "name": part.name, "input": part.arguments}
                    )
                case ToolResultPart():
                    blocks.append(
                        {
                            "type": "tool_result",
                            "tool_use_id": part.tool_call_id,
                            "content": part.content,
                            "is_error": part.is_error,
                        }
                    )
        messages.append({"role": message.role, "content": blocks})
    body: JSONObject = {"max_tokens": args.max_tokens, "messages": messages, "stream": stream}
    if args.system is not None:
        body["system"] = args.system
    if args.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in args.tools
        ]
    if args.tool_choice is not None:
        body["tool_choice"] = {"type": args.tool_choice}
    if args.temperature is not None:
        body["temperature"] = args.temperature
    if args.top_p is not None:
        body["top_p"] = args.top_p
    if args.stop:
        body["stop_sequences"] = list(args.stop)
    return body


def _chat_body(entry: ModelConfig, args: ModelsInvokeArgs, *, stream: bool) -> JSONObject:
    messages: list[JSONValue] = []
    if args.system is not None:
        messages.append({"role": "system", "content": args.system})
    for message in args.messages:
        content: list[JSONValue] = []
        calls: list[JSONValue] = []
        for part in _parts(message):
            match part:
                case TextPart():
                    content.append({"type": "text", "text": part.text})
                case ImagePart():
                    url = f"data:{part.media_type};base64,{part.data}"
                    content.append({"type": "image_url", "image_url": {"url": url}})
                case ToolCallPart():
                    function = {"name": part.name, "arguments": json.dumps(part.arguments)}
                    calls.append({"id": part.id, "type": "function", "function": function})
                case ToolResultPart():
                    # Chat Completions carries each tool result as a message of its own, right after
                    # the assistant message that called it (before any text of the same user turn).
                    text = f"Error: {part.content}" if part.is_error else part.content
                    messages.append({"role": "tool", "tool_call_id": part.tool_call_id, "content": text})
        if message.role == "assistant":
            text = "".join(c["text"] for c in content if is_json_object(c) and c.get("type") == "text")
            said: JSONObject = {"role": "assistant", "content": text or None}
            if calls:
                said["tool_calls"] = calls
            messages.append(said)
        elif content:
            plain = all(is_json_object(c) and c.get("type") == "text" for c in content)
            joined = "".join(c["text"] for c in content if is_json_object(c)) if plain else content
            messages.append({"role": "user", "content": joined})
    limit = "max_completion_tokens" if entry.provider == "openai" else "max_tokens"
    body: JSONObject = {"messages": messages, limit: args.max_tokens, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if args.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
            }
            for t in args.tools
        ]
    if args.tool_choice is not None:
        body["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[args.tool_choice]
    if args.temperature is not None:
        body["temperature"] = args.temperature
    if args.top_p is not None:
        body["top_p"] = args.top_p
    if args.stop:
        body["stop"] = list(args.stop)
    return body


def rerank_body(args: ModelsRerankArgs) -> JSONObject:
    """The `/rerank` body (Cohere/Jina shape, as vLLM and other OpenAI-compatible servers take it)."""
    body: JSONObject = {"query": args.query, "documents": list(args.documents)}
    if args.top_k is not None:
        body["top_n"] = args.top_k
    return body


# -- answers ----------------------------------------------------------------------------------------------


@dataclass
class Answer:
    """An assistant answer read from either wire."""

    content: list[AnswerPart]
    stop_reason: StopReason
    model: str | None


def _text(value: JSONValue, what: str) -> str:
    if not isinstance(value, str):
        raise AnswerError(f"{what} is not a string")
    return value


def _arguments(raw: str) -> JSONObject:
    if not raw.strip():
        return {}
    try:
        value: JSONValue = json.loads(raw)
    except (ValueError, RecursionError):
        return {"_raw": raw}
    return value if is_json_object(value) else {"_raw": raw}


def read_answer(api: ChatApi, payload: JSONValue) -> Answer:
    """The assistant answer of a whole (non-streamed) body.

    Raises:
        AnswerError: the body is not an answer of that API.
    """
    if not is_json_object(payload):
        raise AnswerError("the answer is not a JSON object")
    model = payload.get("model")
    model = model if isinstance(model, str) else None
    if api == "anthropic":
        blocks = payload.get("content")
        if not is_json_array(blocks):
            raise AnswerError("the answer has no 'content' list")
        parts: list[AnswerPart] = []
        for block in blocks:
            if not is_json_object(block):
                raise AnswerError("a content block is not an object")
            if block.get("type") == "text":
                parts.append(TextPart(text=_text(block.get("text"), "a text block's 'text'")))
            elif block.get("type") == "tool_use":
                arguments = block.get("input")
                parts.append(
                    ToolCallPart(
                        id=_text(block.get("id"), "a tool_use block's 'id'"),
                        name=_text(block.get("name"), "a tool_use block's 'name'"),
                        arguments=arguments if is_json_object(arguments) else {},
                    )
                )
        stop = payload.get("stop_reason")
        return Answer(parts, _ANTHROPIC_STOPS.get(stop, "other") if isinstance(stop, str) else "other", model)
    choices = payload.get("choices")
    if not is_json_array(choices) or not choices or not is_json_object(choices[0]):
        raise AnswerError("the answer has no 'choices'")
    choice: JSONObject = choices[0]
    message = choice.get("message")
    if not is_json_object(message):
        raise AnswerError("the answer's first choice has no 'message'")
    parts = []
    content = message.get("content")
    if isinstance(content, str) and content:
        parts.append(TextPart(text=content))
    calls = message.get("tool_calls")
    for call in calls if is_json_array(calls) else []:
        function = call.get("function") if is_json_object(call) else None
        if not is_json_object(call) or not is_json_object(function):
            raise AnswerError("a tool call is not an object with a 'function'")
        raw = function.get("arguments", "")
        parts.append(
            ToolCallPart(
                id=_text(call.get("id"), "a tool call's 'id'"),
                name=_text(function.get("name"), "a tool call's 'name'"),
                arguments=_arguments(raw) if isinstance(raw, str) else {},
            )
        )
    finish = choice.get("finish_reason")
    return Answer(parts, _OPENAI_STOPS.get(finish, "other") if isinstance(finish, str) else "other", model)


def read_rerank(payload: JSONValue, count: int, top_k: int | None) -> list[RerankScore]:
    """The scores of a `/rerank` answer, best first, cut to `top_k`.

    Raises:
        AnswerError: the body is not a rerank answer, or names a document the request did not send.
    """
    results = payload.get("results") if is_json_object(payload) else None
    if not is_json_array(results):
        raise AnswerError("the answer has no 'results' list")
    scores: list[RerankScore] = []
    for item in results:
        index = item.get("index") if is_json_object(item) else None
        score = item.get("relevance_score", item.get("score")) if is_json_object(item) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise AnswerError(f"a result's 'index' {str(index)[:20]} is not one of the {count} documents")
        if not isinstance(score, int | float) or isinstance(score, bool) or score != score:
            raise AnswerError("a result's 'relevance_score' is not a number")
        scores.append(RerankScore(index=index, score=float(score)))
    scores.sort(key=lambda s: s.score, reverse=True)
    return scores[:top_k] if top_k is not None else scores


@dataclass
class _Block:
    kind: Literal["text", "tool_call"]
    text: str = ""
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class NeutralStream:
    """A streamed answer, assembled from its server-sent events; `feed` gives the text deltas."""

    api: ChatApi
    model: str | None = None
    stop_reason: StopReason = "other"
    _blocks: dict[int, _Block] = field(default_factory=dict[int, _Block])
    _order: list[int] = field(default_factory=list[int])

    def feed(self, data: str) -> list[str]:
        """Read one event's data; the text it adds (none, or one delta)."""
        if data.strip() == "[DONE]":
            return []
        try:
            payload = json.loads(data)
        except (ValueError, RecursionError):
            raise AnswerError("a streamed event is not JSON") from None
        if not is_json_object(payload):
            return []
        if self.api == "anthropic":
            return self._anthropic(payload)
        return self._chat(payload)

    def _block(self, index: int, kind: Literal["text", "tool_call"]) -> _Block:
        if index not in self._blocks:
            self._blocks[index] = _Block(kind)
            self._order.append(index)
        return self._blocks[index]

    def _anthropic(self, payload: JSONObject) -> list[str]:
        kind = payload.get("type")
        index = payload.get("index")
        index = index if isinstance(index, int) else 0
        if kind == "message_start":
            message = payload.get("message")
            model = message.get("model") if is_json_object(message) else None
            self.model = model if isinstance(model, str) else self.model
        elif kind == "content_block_start":
            block = payload.get("content_block")
            if is_json_object(block) and block.get("type") == "tool_use":
                found = self._block(index, "tool_call")
                found.id, found.name = str(block.get("id", "")), str(block.get("name", ""))
            elif is_json_object(block) and block.get("type") == "text":
                self._block(index, "text")
        elif kind == "content_block_delta":
            delta = payload.get("delta")
            if is_json_object(delta) and delta.get("type") == "text_delta":
                text = delta.get("text")
                if isinstance(text, str) and text:
                    self._block(index, "text").text += text
                    return [text]
            elif is_json_object(delta) and delta.get("type") == "input_json_delta":
                partial = delta.get("partial_json")
                self._block(index, "tool_call").arguments += partial if isinstance(partial, str) else ""
        elif kind == "message_delta":
            delta = payload.get("delta")
            stop = delta.get("stop_reason") if is_json_object(delta) else None
            if isinstance(stop, str):
                self.stop_reason = _ANTHROPIC_STOPS.get(stop, "other")
        return []

    def _chat(self, payload: JSONObject) -> list[str]:
        model = payload.get("model")
        self.model = model if isinstance(model, str) else self.model
        choices = payload.get("choices")
        if not is_json_array(choices) or not choices or not is_json_object(choices[0]):
            return []
        choice: JSONObject = choices[0]
        finish = choice.get("finish_reason")
        if isinstance(finish, str):
            self.stop_reason = _OPENAI_STOPS.get(finish, "other")
        delta = choice.get("delta")
        if not is_json_object(delta):
            return []
        out: list[str] = []
        text = delta.get("content")
        if isinstance(text, str) and text:
            self._block(-1, "text").text += text
            out.append(text)
        calls = delta.get("tool_calls")
        for call in calls if is_json_array(calls) else []:
            if not is_json_object(call):
                continue
            index = call.get("index")
            found = self._block(index if isinstance(index, int) else 0, "tool_call")
            if isinstance(call_id := call.get("id"), str):
                found.id = call_id
            function = call.get("function")
            if is_json_object(function):
                if isinstance(name := function.get("name"), str):
                    found.name += name
                if isinstance(piece := function.get("arguments"), str):
                    found.arguments += piece
        return out

    def answer(self) -> Answer:
        """The answer assembled so far (call once the stream ended)."""
        parts: list[AnswerPart] = []
        for index in self._order:
            block = self._blocks[index]
            if block.kind == "text":
                if block.text:
                    parts.append(TextPart(text=block.text))
            elif not block.id or not block.name:
                raise AnswerError("a streamed tool call has no id or name")
            else:
                parts.append(
                    ToolCallPart(id=block.id, name=block.name, arguments=_arguments(block.arguments))
                )
        return Answer(parts, self.stop_reason, self.model)
