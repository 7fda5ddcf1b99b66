"""Translating a model call between wire formats, with LiteLLM's translation functions.

Owns which API a host model is called at for a client's API (`upstream_api`: a model is called in its
own provider's format, and an `openai-compatible` model that does not serve Responses at Chat
Completions), loading the optional `translate` extra (`load`), and one call's translation
(`Translation`): the client's request into the upstream's, the upstream's answer — whole, or streamed
event by event — back into the client's format, and the upstream's own error into the client's error
shape. Does not own calling the upstream (`upstream.py`, our own client: LiteLLM's HTTP client is
never used, so every byte sent and every token counted stays the host's), budgets or usage rows.

Why LiteLLM: it is the most used and most actively kept open-source translator between these formats
(its proxy serves Anthropic Messages to Claude Code on any chat model, and Responses on any Chat
Completions model), and it has every direction the host needs as plain functions over dicts:
`AnthropicAdapter` (Anthropic Messages ⇄ Chat Completions, with its SSE stream wrapper), the Anthropic
provider's `AnthropicConfig` and stream parser (Chat Completions ⇄ Anthropic), and the Responses ⇄
Chat Completions bridge (`LiteLLMCompletionResponsesConfig` and its streaming iterator). Chat
Completions is the hub: a call is translated client → chat → upstream, and its answer back the same way.

Invariants:
- LiteLLM is imported only here, on the first translated call, in a worker thread (its import takes a
  second or more), with `LITELLM_LOCAL_MODEL_COST_MAP=True` set first so it never fetches its price
  table; nothing here opens a connection. Without the extra, `load` raises
  `TranslationUnavailableError` saying `pip install 'mcphost[translate]'`.
- The usage in a translated answer is the upstream's, normalized by `wire.usage_of` / `StreamUsage`
  and written back in the client's usage shape (`usage_body`), so the client's usage reader counts
  exactly what the upstream reported (input without cached, output, cached).
- A translated stream ends the way the upstream's did: an upstream error event becomes the client's
  error event (`wire.stream_error`); a stream the upstream broke off or did not finish ends without
  the client format's end event, and a transport error is raised again, so the relay records the call
  as failed exactly as it does a passed-through stream.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from types import ModuleType
from typing import Any

import anyio
import anyio.to_thread
import httpx2

from mcphost.llm.catalog import ModelConfig
from mcphost.llm.wire import Api, ErrorKind, SseReader, StreamUsage, Usage, error_body, stream_error, usage_of
from mcphost.protocol import JSONObject, JSONValue, is_json_object

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'mcphost[translate]'"
MAX_TRANSLATED_BYTES = 64 * 1024 * 1024
"""The largest whole answer translated; a larger one is passed on untranslated (and refused by the relay)."""
_STATUS_KINDS: dict[int, ErrorKind] = {
    400: "invalid_request",
    401: "authentication",
    403: "permission",
    404: "not_found",
    413: "too_large",
    422: "invalid_request",
    429: "rate_limit",
    504: "timeout",
}


class TranslationUnavailableError(Exception):
    """The `translate` extra (LiteLLM) is not installed or cannot be imported."""


class TranslationError(Exception):
    """A request LiteLLM cannot translate (the client can change it)."""


def upstream_api(client: Api, entry: ModelConfig) -> Api:
    """The API `entry` is called at for a call made at `client`'s endpoint."""
    if client == "embeddings":  # only OpenAI-wire models embed (the config checks): passed through
        return client
    if entry.wire == "anthropic":
        return "anthropic"
    if client == "responses" and entry.serves_responses:
        return "responses"
    return "chat"


class _Lib:
    """The LiteLLM functions the host uses, once imported (typed `Any` at this seam only)."""

    def __init__(self, modules: dict[str, ModuleType]) -> None:
        adapters = modules["adapters"]
        self.anthropic_adapter: Any = adapters.AnthropicAdapter()
        self.anthropic_sse: Any = modules["anthropic_stream"].AnthropicSSEStream
        self.anthropic_stream_wrapper: Any = modules["anthropic_stream"].AnthropicStreamWrapper
        self.anthropic_config: Any = modules["anthropic_chat"].AnthropicConfig()
        self.anthropic_chunks: Any = modules["anthropic_handler"].ModelResponseIterator
        self.responses: Any = modules["responses"].LiteLLMCompletionResponsesConfig
        self.responses_stream: Any = modules["responses_stream"].LiteLLMCompletionStreamingIterator
        self.stream_wrapper: Any = modules["streaming"].CustomStreamWrapper
        self.logging: Any = modules["logging"].Logging
        self.model_response: Any = modules["utils"].ModelResponse
        self.model_response_stream: Any = modules["utils"].ModelResponseStream
        self.httpx: Any = modules["httpx"]
        self.map_developer_role: Any = modules["base_utils"].map_developer_role_to_system_role


_loaded: _Lib | None = None
_load_lock = threading.Lock()
_MODULES = {
    "litellm": "litellm",
    "adapters": "litellm.llms.anthropic.messages.adapters.transformation",
    "anthropic_stream": "litellm.llms.anthropic.messages.adapters.streaming_iterator",
    "anthropic_chat": "litellm.llms.anthropic.chat.transformation",
    "anthropic_handler": "litellm.llms.anthropic.chat.handler",
    "responses": "litellm.responses.litellm_completion_transformation.transformation",
    "responses_stream": "litellm.responses.litellm_completion_transformation.streaming_iterator",
    "streaming": "litellm.litellm_core_utils.streaming_handler",
    "logging": "litellm.litellm_core_utils.litellm_logging",
    "utils": "litellm.types.utils",
    "httpx": "httpx",
    "base_utils": "litellm.llms.base_llm.base_utils",
}
_importer: Callable[[str], ModuleType] | None = None
"""Replaces `importlib.import_module` in tests that make the import fail."""


_FOREIGN_LOGGERS = (
    "uvicorn.access",
    "uvicorn.error",
    "httpx",
    "asyncio",
    "backoff",
    "apscheduler.executors.default",
    "apscheduler.scheduler",
)
"""Loggers not LiteLLM's own that its import adds filters to or re-levels (`litellm/_logging.py`)."""


def load() -> _Lib:
    """LiteLLM's translation functions, imported on first use (blocking: call it from a worker thread).

    Raises:
        TranslationUnavailableError: the `translate` extra is not installed (or fails to import).
    """
    global _loaded
    with _load_lock:
        if _loaded is not None:
            return _loaded
        import importlib

        # Before the first import: LiteLLM otherwise fetches its model price table from the network.
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        importer = _importer or importlib.import_module
        # LiteLLM's import attaches its redaction filters to other libraries' loggers (uvicorn's access
        # and error logs, httpx, asyncio) and changes their levels: the host's logs stay as configured.
        foreign = {name: logging.getLogger(name) for name in _FOREIGN_LOGGERS}
        saved = {name: (list(lg.filters), lg.level, lg.disabled) for name, lg in foreign.items()}
        try:
            modules = {name: importer(path) for name, path in _MODULES.items()}
        except Exception as exc:  # ImportError, or a broken install failing at import time
            raise TranslationUnavailableError(
                f"translating between wire formats needs the optional 'translate' extra (LiteLLM), which "
                f"could not be imported ({type(exc).__name__}: {str(exc)[:200]}); install it on the host "
                f"with: {INSTALL_HINT}"
            ) from None
        finally:
            for name, (filters, level, disabled) in saved.items():
                foreign[name].filters[:] = filters
                foreign[name].setLevel(level)
                foreign[name].disabled = disabled
        litellm: Any = modules["litellm"]
        litellm.suppress_debug_info = True  # it prints hints to stdout otherwise
        litellm.telemetry = False
        _loaded = _Lib(modules)
        return _loaded


def loaded() -> bool:
    return _loaded is not None


async def translating(
    client: Api, entry: ModelConfig, model_id: str, body: JSONObject
) -> tuple[Api, JSONObject, Translation | None]:
    """The API `entry` is called at, the body sent there, and the call's translation (None: passed through).

    Raises:
        TranslationUnavailableError: the call needs translating and the `translate` extra is missing.
        TranslationError: the body cannot be translated.
    """
    upstream = upstream_api(client, entry)
    if upstream == client:
        return client, body, None
    lib = _loaded or await anyio.to_thread.run_sync(load)
    translation = Translation(lib, client, upstream, body, model_id, answer_model=entry.model)
    return upstream, translation.request(), translation


def _dump(value: Any) -> JSONObject:
    """A LiteLLM pydantic object or TypedDict as plain JSON (through `json`, so only JSON survives)."""
    if hasattr(value, "model_dump"):
        value = value.model_dump(exclude_none=True)
    found = json.loads(json.dumps(value, default=str))
    return found if is_json_object(found) else {}


def usage_body(api: Api, usage: Usage) -> JSONObject:
    """`usage` in `api`'s own usage shape (the inverse of `wire.usage_of`)."""
    prompt = usage.input_tokens + usage.cached_tokens
    if api == "anthropic":
        return {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_input_tokens": usage.cached_tokens,
            "cache_creation_input_tokens": 0,
        }
    if api == "responses":
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens},
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + usage.output_tokens,
        }
    return {
        "prompt_tokens": prompt,
        "completion_tokens": usage.output_tokens,
        "total_tokens": prompt + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def _sse(event: str | None, data: JSONValue | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return (f"event: {event}\n" if event else "").encode() + f"data: {text}\n\n".encode()


def error_message(payload: JSONValue) -> str | None:
    """The message of an Anthropic or OpenAI error body (`{"error": {"message": ...}}`)."""
    error = payload.get("error") if is_json_object(payload) else None
    message = error.get("message") if is_json_object(error) else None
    return message if isinstance(message, str) else None


class Translation:
    """One call made at `client`'s endpoint to a model called at `upstream`'s."""

    def __init__(
        self,
        lib: _Lib,
        client: Api,
        upstream: Api,
        body: JSONObject,
        model_id: str,
        *,
        answer_model: str = "",
    ) -> None:
        assert client != upstream
        assert "rerank" not in (client, upstream)
        self.lib = lib
        self.client: Api = client
        self.upstream: Api = upstream
        self.body = body
        self.model_id = model_id
        self.answer_model = answer_model or model_id
        """The model a translated stream names (the upstream's name: its events come before it says one)."""
        self._streamed = body.get("stream") is True
        self.tool_names: dict[str, str] = {}

    # -- the request ----------------------------------------------------------------------------------

    def request(self) -> JSONObject:
        """The body to send upstream (its `model` is replaced by the upstream's name when it is sent).

        Raises:
            TranslationError: LiteLLM refused the body (a required field missing, a shape it cannot map).
        """
        try:
            chat = self._to_chat()
            return self._chat_to_upstream(chat)
        except Exception as exc:  # LiteLLM's ValueError, KeyError, own errors... on bodies it cannot map
            said = str(exc) if isinstance(exc, TranslationError) else f"{type(exc).__name__}: {exc}"
            raise TranslationError(
                f"the {self.client} request cannot be translated for model {self.model_id!r}, which the host "
                f"calls at the {self.upstream} API: {said[:300]}"
            ) from None

    def _to_chat(self) -> JSONObject:
        body = copy.deepcopy(
            self.body
        )  # LiteLLM may edit what it is given; the tape hashes the client's body
        match self.client:
            case "chat":
                return body
            case "anthropic":
                request, names = (
                    self.lib.anthropic_adapter.translate_completion_input_params_with_tool_mapping(body)
                )
                if request is None:
                    raise TranslationError("the Anthropic request has nothing to send")
                self.tool_names = dict(names or {})
                return _dump(request)
            case "responses":
                if "input" not in body:
                    raise TranslationError("the Responses request has no 'input'")
                options = {k: v for k, v in body.items() if k not in ("model", "input")}
                request = self.lib.responses.transform_responses_api_request_to_chat_completion_request(
                    str(body.get("model", "")),
                    body["input"],
                    options,
                    custom_llm_provider="openai",
                    stream=self._streamed,
                )
                found = _dump(request)
                found.pop("custom_llm_provider", None)
                return found
            case "rerank" | "embeddings":
                raise AssertionError("rerank and embedding calls are never translated")

    def _chat_to_upstream(self, chat: JSONObject) -> JSONObject:
        if self.upstream == "chat":
            if self._streamed:
                chat["stream_options"] = {"include_usage": True}
            return chat
        assert self.upstream == "anthropic"
        model = str(chat.get("model", ""))
        messages = chat.get("messages")
        if not isinstance(messages, list) or not messages:
            raise TranslationError("the request has no messages")
        # Anthropic has no `developer` role: it is a system message there (LiteLLM's own mapping).
        messages = self.lib.map_developer_role(messages)
        options = {k: v for k, v in chat.items() if k not in ("model", "messages", "stream_options")}
        config = self.lib.anthropic_config
        mapped = config.map_openai_params(
            non_default_params=options, optional_params={}, model=model, drop_params=True
        )
        found = _dump(config.transform_request(model, messages, mapped, {}, {}))
        found.setdefault("max_tokens", 4096)
        return found

    # -- a whole answer -------------------------------------------------------------------------------

    def whole(self, status: int, payload: JSONValue) -> tuple[int, JSONObject]:
        """The upstream's whole answer (or its own error) as the client's: (status, body)."""
        if status != 200:
            kind = _STATUS_KINDS.get(status, "upstream")
            said = error_message(payload) or f"HTTP {status}"
            return status, error_body(self.client, kind, f"model {self.model_id!r}: {said}")
        usage = usage_of(self.upstream, payload)
        try:
            answer = self._whole_answer(payload)
        except Exception as exc:  # an answer LiteLLM cannot read: the upstream's fault
            message = (
                f"model {self.model_id!r} answered a {self.upstream} body the host could not translate to "
                f"{self.client}: {type(exc).__name__}: {str(exc)[:300]}"
            )
            return 502, error_body(self.client, "upstream", message)
        if usage is not None:
            answer["usage"] = usage_body(self.client, usage)
        return 200, answer

    def _whole_answer(self, payload: JSONValue) -> JSONObject:
        lib = self.lib
        if not is_json_object(payload):
            raise ValueError("the answer is not a JSON object")
        if self.upstream == "anthropic":
            raw = lib.httpx.Response(200)
            chat: Any = lib.anthropic_config.transform_parsed_response(payload, raw, lib.model_response())
        elif self.upstream == "chat":
            chat = lib.model_response(**payload)
        else:
            raise ValueError(f"answers of the {self.upstream} API are not translated")
        match self.client:
            case "chat":
                return _dump(chat)
            case "anthropic":
                return _dump(lib.anthropic_adapter.translate_completion_output_params(chat, self.tool_names))
            case "responses":
                body = copy.deepcopy(self.body)
                options = {k: v for k, v in body.items() if k not in ("model", "input")}
                return _dump(
                    lib.responses.transform_chat_completion_response_to_responses_api_response(
                        body.get("input", ""), options, chat
                    )
                )
            case "rerank" | "embeddings":
                raise AssertionError("rerank and embedding calls are never translated")

    # -- a stream -------------------------------------------------------------------------------------

    def stream(self, upstream: AsyncIterator[bytes]) -> TranslatedStream:
        return TranslatedStream(self, upstream)


class TranslatedStream:
    """The client's server-sent events, made from the upstream's as they arrive."""

    def __init__(self, translation: Translation, raw: AsyncIterator[bytes]) -> None:
        self._t = translation
        self._raw = raw
        self._usage = StreamUsage(translation.upstream)
        self._failure: BaseException | None = None
        self._cut = False
        """The upstream did not finish its stream: the client's end events are withheld."""
        self._error: str | None = None
        self._chunks: Any = None

    async def _source(self) -> AsyncIterator[Any]:
        """The upstream's events as LiteLLM chat chunks (`ModelResponseStream`)."""
        lib, upstream = self._t.lib, self._t.upstream
        reader = SseReader()
        parser: Any = lib.anthropic_chunks(None, sync_stream=False) if upstream == "anthropic" else None
        try:
            async for chunk in self._raw:
                for event, data in reader.feed(chunk):
                    self._usage.feed(event, data)
                    if self._usage.error is not None:
                        self._error = self._usage.error
                        self._cut = True
                        return
                    if upstream == "chat" and data.strip() == "[DONE]":
                        continue
                    try:
                        payload = json.loads(data)
                    except (ValueError, RecursionError):
                        continue
                    if not is_json_object(payload):
                        continue
                    if upstream == "anthropic":
                        if payload.get("type") in ("ping", "message_stop"):
                            continue
                        yield parser.chunk_parser(payload)
                    elif payload.get("choices"):
                        yield lib.model_response_stream(**{k: v for k, v in payload.items() if k != "usage"})
        except BaseException as exc:  # raised again after the translated events so far
            self._failure = exc
            self._cut = True
            return
        if not self._usage.finished:
            self._cut = True

    async def events(self) -> AsyncIterator[bytes]:
        """The client's events; raises what the upstream raised, after the events before it."""
        match self._t.client:
            case "anthropic":
                translated = self._anthropic()
            case "responses":
                translated = self._responses()
            case "chat":
                translated = self._chat()
            case "rerank" | "embeddings":
                raise AssertionError("rerank and embedding calls are never translated")
        async for piece in translated:
            if self._cut:
                break
            yield piece
        if self._error is not None:
            yield stream_error(self._t.client, "upstream", self._error)
        if self._failure is not None:
            raise self._failure

    async def _anthropic(self) -> AsyncIterator[bytes]:
        lib = self._t.lib
        stream: Any = lib.anthropic_adapter.translate_completion_output_params_streaming(
            self._source(), self._t.answer_model, self._t.tool_names
        )
        reader = SseReader()
        async for chunk in stream:
            if self._cut:
                return
            for event, data in reader.feed(chunk if isinstance(chunk, bytes) else str(chunk).encode()):
                if event == "message_delta" and self._usage.usage is not None:
                    payload = json.loads(data)
                    payload["usage"] = usage_body("anthropic", self._usage.usage)
                    yield _sse(event, payload)
                else:
                    yield _sse(event, data)

    async def _responses(self) -> AsyncIterator[bytes]:
        lib, t = self._t.lib, self._t
        body = copy.deepcopy(t.body)
        log = lib.logging(
            model=t.answer_model,
            messages=[],
            stream=True,
            call_type="acompletion",
            start_time=datetime.now(),
            litellm_call_id="mcphost",
            function_id="mcphost",
        )
        wrapper = lib.stream_wrapper(
            completion_stream=self._source(),
            model=t.answer_model,
            logging_obj=log,
            custom_llm_provider="cached_response",
        )
        stream: Any = lib.responses_stream(
            model=t.answer_model,
            litellm_custom_stream_wrapper=wrapper,
            request_input=body.get("input", ""),
            responses_api_request={k: v for k, v in body.items() if k not in ("model", "input")},
            custom_llm_provider="openai",
        )
        async for event in stream:
            if self._cut:
                return
            payload = _dump(event)
            kind = payload.get("type")
            response = payload.get("response")
            if kind == "response.completed" and is_json_object(response) and self._usage.usage is not None:
                response["usage"] = usage_body("responses", self._usage.usage)
            yield _sse(kind if isinstance(kind, str) else None, payload)

    async def _chat(self) -> AsyncIterator[bytes]:
        last: JSONObject = {}
        async for chunk in self._source():
            payload = _dump(chunk)
            payload.pop("usage", None)
            last = payload
            yield _sse(None, payload)
        if self._cut:
            return
        if self._usage.usage is not None:
            tail: JSONObject = {
                "id": last.get("id", "chatcmpl-mcphost"),
                "object": "chat.completion.chunk",
                "created": last.get("created", 0),
                "model": last.get("model", self._t.answer_model),
                "choices": [],
                "usage": usage_body("chat", self._usage.usage),
            }
            yield _sse(None, tail)
        yield _sse(None, "[DONE]")


class TranslatedBody(httpx2.AsyncByteStream):
    """The upstream response's body, translated as it is read; closing it closes the upstream's."""

    def __init__(self, translation: Translation, response: httpx2.Response, streamed: bool) -> None:
        self._t = translation
        self._response = response
        self._streamed = streamed
        self.translated: httpx2.Response | None = None
        """The response this body belongs to: a whole answer sets its status (a 200 that cannot be read
        becomes the host's 502)."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._streamed:
            async for piece in self._t.stream(self._response.aiter_raw()).events():
                yield piece
            return
        raw = bytearray()
        async for chunk in self._response.aiter_raw():
            raw.extend(chunk)
            if len(raw) > MAX_TRANSLATED_BYTES:  # passed on as it is: the relay refuses it
                yield bytes(raw)
                async for rest in self._response.aiter_raw():
                    yield rest
                return
        try:
            payload: JSONValue = json.loads(bytes(raw))
        except (ValueError, RecursionError):
            yield bytes(raw)  # not JSON: the relay says so
            return
        status, answer = self._t.whole(self._response.status_code, payload)
        if self.translated is not None:
            self.translated.status_code = status
        yield json.dumps(answer, separators=(",", ":")).encode()

    async def aclose(self) -> None:
        await self._response.aclose()


def translated_response(translation: Translation, response: httpx2.Response) -> httpx2.Response:
    """`response` as the client's API answers: same status and relayed headers, body translated as read."""
    kind = response.headers.get("content-type", "")
    streamed = response.status_code == 200 and kind.startswith("text/event-stream")
    body = TranslatedBody(translation, response, streamed)
    headers = {h: v for h in ("request-id", "x-request-id") if (v := response.headers.get(h)) is not None}
    headers["content-type"] = "text/event-stream" if streamed else "application/json"
    found = httpx2.Response(response.status_code, headers=headers, stream=body)
    body.translated = found
    return found
