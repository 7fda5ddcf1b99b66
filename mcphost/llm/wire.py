"""The providers' wire formats as the host reads them: usage, error bodies and server-sent events.

Owns the three APIs the per-run model endpoints serve — Anthropic Messages, OpenAI Chat Completions
and OpenAI Responses (`Api`) — as far as the host needs them: the usage of a whole answer or of a
stream (`usage_of`, `StreamUsage`), a refusal in the API's own error shape (`error_body`, and
`stream_error` for a stream that breaks after it started), and the incremental SSE reader
(`SseReader`). Does not own requests or their bodies: a body is passed upstream as the client sent it
but for its `model`.

Invariants: usage is normalized one way for every API — `input_tokens` excludes cached input read from a
prompt cache (`cached_tokens`), as Anthropic reports it and OpenAI does not (its `prompt_tokens`
include the cached ones, subtracted here); cache writes count as input. The SSE reader holds at most
`MAX_EVENT_BYTES` of one event; a longer event is skipped, not parsed (its bytes are still relayed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from mcphost.protocol import JSONObject, JSONValue, is_json_object

Api = Literal["anthropic", "chat", "responses", "rerank", "embeddings"]
"""Anthropic Messages, OpenAI Chat Completions, OpenAI Responses, the `/rerank` endpoint of
OpenAI-compatible servers (Cohere/Jina shape, as vLLM serves it; called by the `models_rerank` tool only),
and OpenAI Embeddings (`/embeddings`, never streamed)."""
MAX_EVENT_BYTES = 4 * 1024 * 1024

ErrorKind = Literal[
    "invalid_request",
    "authentication",
    "permission",
    "not_found",
    "too_large",
    "rate_limit",
    "upstream",
    "timeout",
]
_ANTHROPIC_TYPES: dict[ErrorKind, str] = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "too_large": "request_too_large",
    "rate_limit": "rate_limit_error",
    "upstream": "api_error",
    "timeout": "api_error",
}
_OPENAI_TYPES: dict[ErrorKind, tuple[str, str]] = {
    "invalid_request": ("invalid_request_error", "invalid_request"),
    "authentication": ("invalid_request_error", "invalid_api_key"),
    "permission": ("invalid_request_error", "model_not_granted"),
    "not_found": ("invalid_request_error", "model_not_found"),
    "too_large": ("invalid_request_error", "request_too_large"),
    "rate_limit": ("rate_limit_error", "budget_exceeded"),
    "upstream": ("server_error", "upstream_error"),
    "timeout": ("server_error", "upstream_timeout"),
}


@dataclass(frozen=True)
class Usage:
    """Tokens of one model call, normalized (see the module's invariants), and the model that answered."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    model: str | None = None


def error_body(api: Api, kind: ErrorKind, message: str) -> JSONObject:
    """A refusal in the API's own error shape."""
    if api == "anthropic":
        return {"type": "error", "error": {"type": _ANTHROPIC_TYPES[kind], "message": message}}
    kind_type, code = _OPENAI_TYPES[kind]
    return {"error": {"message": message, "type": kind_type, "param": None, "code": code}}


def stream_error(api: Api, kind: ErrorKind, message: str) -> bytes:
    """The event that ends a stream the host cannot finish, in the API's own stream shape."""
    match api:
        case "anthropic":
            return _sse("error", error_body(api, kind, message))
        case "chat" | "rerank" | "embeddings":
            return _sse(None, error_body(api, kind, message))
        case "responses":
            _, code = _OPENAI_TYPES[kind]
            return _sse("error", {"type": "error", "code": code, "message": message, "param": None})


def _sse(event: str | None, data: JSONValue) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _int(value: JSONValue | None) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53 else 0


def _obj(value: JSONValue | None) -> JSONObject:
    return value if is_json_object(value) else {}


def _anthropic_usage(usage: JSONObject) -> tuple[int, int, int]:
    """(input incl. cache writes, output, cache reads) of an Anthropic `usage` object."""
    written = _int(usage.get("cache_creation_input_tokens"))
    return (
        _int(usage.get("input_tokens")) + written,
        _int(usage.get("output_tokens")),
        _int(usage.get("cache_read_input_tokens")),
    )


def usage_of(api: Api, body: JSONValue) -> Usage | None:
    """The usage of a whole (non-streamed) answer, or None when it carries none."""
    answer = _obj(body)
    usage = answer.get("usage")
    if not is_json_object(usage):
        return None
    model = answer.get("model")
    model_name = model if isinstance(model, str) else None
    if api == "anthropic":
        inp, out, cached = _anthropic_usage(usage)
        return Usage(inp, out, cached, model_name)
    if api == "chat":
        cached = _int(_obj(usage.get("prompt_tokens_details")).get("cached_tokens"))
        prompt = _int(usage.get("prompt_tokens"))
        return Usage(max(0, prompt - cached), _int(usage.get("completion_tokens")), cached, model_name)
    if api in ("rerank", "embeddings"):  # `total_tokens` (some servers `prompt_tokens`), all input
        return Usage(_int(usage.get("total_tokens")) or _int(usage.get("prompt_tokens")), 0, 0, model_name)
    cached = _int(_obj(usage.get("input_tokens_details")).get("cached_tokens"))
    prompt = _int(usage.get("input_tokens"))
    return Usage(max(0, prompt - cached), _int(usage.get("output_tokens")), cached, model_name)


_CONTENT_EVENTS: Mapping[Api, frozenset[str]] = {
    "anthropic": frozenset({"ping", "content_block_start", "content_block_delta", "content_block_stop"}),
    "chat": frozenset(),  # its chunks are not named: see `StreamUsage.feed`
    "responses": frozenset(
        {
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.added",
            "response.content_part.done",
            "response.output_item.added",
            "response.output_item.done",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.reasoning_summary_text.delta",
            "response.in_progress",
            "response.created",
        }
    ),
    "rerank": frozenset(),
}
"""Named stream events that carry content only (never usage, an error or the end), per API."""


class StreamUsage:
    """The usage of a streamed answer, read from its events as they are relayed."""

    def __init__(self, api: Api) -> None:
        self._api: Api = api
        self.usage: Usage | None = None
        self.finished = False
        """The stream's own end was seen (`message_stop`, `[DONE]`, `response.completed`)."""
        self.error: str | None = None
        """The message of an error event the upstream sent in the stream."""

    def feed(self, event: str | None, data: str) -> None:
        """Read one event (`event:` name and `data:` text). Events that can carry neither usage, nor an
        error, nor the stream's end are not parsed: they are nearly every event of a stream (one per
        token or so), and the relay reads each on the way to its client."""
        if self._api == "chat" and data.strip() == "[DONE]":
            self.finished = True
            return
        if event is not None and event in _CONTENT_EVENTS[self._api]:
            return
        if self._api == "chat" and '"usage"' not in data and '"error"' not in data:
            return
        try:
            payload = json.loads(data)
        except (ValueError, RecursionError):
            return
        if not is_json_object(payload):
            return
        kind = payload.get("type")
        kind = kind if isinstance(kind, str) else event
        if kind == "error" or (self._api == "chat" and "error" in payload):
            error = _obj(payload.get("error"))
            message = error.get("message", payload.get("message"))
            self.error = message if isinstance(message, str) else "the upstream sent an error event"
            return
        match self._api:
            case "anthropic":
                self._anthropic(kind, payload)
            case "chat":
                found = usage_of("chat", payload)
                if found is not None:
                    self.usage = found
            case "responses":
                if kind in ("response.completed", "response.incomplete", "response.failed"):
                    self.finished = kind != "response.failed"
                    found = usage_of("responses", _obj(payload.get("response")))
                    if found is not None:
                        self.usage = found
            case "rerank" | "embeddings":  # not streamed
                pass

    def _anthropic(self, kind: str | None, payload: JSONObject) -> None:
        if kind == "message_start":
            message = _obj(payload.get("message"))
            inp, out, cached = _anthropic_usage(_obj(message.get("usage")))
            model = message.get("model")
            self.usage = Usage(inp, out, cached, model if isinstance(model, str) else None)
        elif kind == "message_delta":
            usage = _obj(payload.get("usage"))
            base = self.usage or Usage()
            out = _int(usage.get("output_tokens")) or base.output_tokens
            self.usage = Usage(base.input_tokens, out, base.cached_tokens, base.model)
        elif kind == "message_stop":
            self.finished = True


class SseReader:
    """Splits a byte stream into server-sent events (`event` name, joined `data` text)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._skipping = False

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        """The events completed by `chunk`."""
        self._buffer.extend(chunk.replace(b"\r\n", b"\n"))
        events: list[tuple[str | None, str]] = []
        while True:
            end = self._buffer.find(b"\n\n")
            if end < 0:
                if len(self._buffer) > MAX_EVENT_BYTES:
                    self._buffer.clear()
                    self._skipping = True
                return events
            raw = bytes(self._buffer[:end])
            del self._buffer[: end + 2]
            if self._skipping:
                self._skipping = False
                continue
            events.append(_parse_event(raw))


def _parse_event(raw: bytes) -> tuple[str | None, str]:
    name: str | None = None
    data: list[str] = []
    for line in raw.decode("utf-8", "replace").split("\n"):
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return name, "\n".join(data)
