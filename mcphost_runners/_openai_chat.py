"""A minimal streaming client of OpenAI-compatible Chat Completions (`POST {base_url}/chat/completions`).

Owns the request body, the SSE stream of `chat.completion.chunk`s (content deltas, tool-call fragments
assembled by index, the final usage chunk), the non-streamed JSON answer some servers send anyway, and
the mapping of every way a model endpoint can fail to one `ChatError` with a PROTOCOL §5 code. Does
not choose models, build messages or run tools (`local_agent.py` does). HTTP through `httpx2`; no model
SDK.

Invariants:
- Responses are validated with pydantic models that ignore unknown fields (providers add fields all the
  time; refusing them would break on every release). A chunk that is not JSON or does not have the shape
  of a chunk is `runner.error` with the offending data (cut) in `details`.
- A stream must end with `data: [DONE]` or a choice carrying `finish_reason`; one that stops short is
  `runner.error` too, never a silently truncated answer.
- `ChatError.fallback` says whether another model could do better (not for auth failures), and
  `ChatError.after_output` whether content was already streamed out (then nothing may be retried).
- The API key goes into the `Authorization` header only; it is never in a message or `details`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
import httpx2
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcphost.protocol import JSONObject, is_json_object

MAX_ERROR_BODY = 2000
"""How much of an error response body is kept for the failure's message and details."""
_SNIPPET = 500

OnDelta = Callable[[str], Awaitable[None]]


class ChatError(Exception):
    """A model request failed; `code` is a PROTOCOL §5 code."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        fallback: bool = True,
        details: JSONObject | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = retryable
        self.fallback = fallback
        """True when another model might succeed where this one failed."""
        self.details: JSONObject = details or {}
        self.after_output = False
        """True when content of this answer had already been streamed out."""


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str
    """The JSON text of the arguments, exactly as the model produced it."""


@dataclass
class ChatAnswer:
    """One completed model answer."""

    model: str
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list[ToolCall])
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


# -- wire models (what the endpoint sends) ----------------------------------------------------------------


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _FunctionPart(_Wire):
    name: str | None = None
    arguments: str | None = None


class _ToolCallPart(_Wire):
    index: int = 0
    id: str | None = None
    function: _FunctionPart | None = None


class _Delta(_Wire):
    content: str | None = None
    tool_calls: list[_ToolCallPart] | None = None


class _StreamChoice(_Wire):
    index: int = 0
    delta: _Delta = Field(default_factory=_Delta)
    finish_reason: str | None = None


class _UsageWire(_Wire):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


class _Chunk(_Wire):
    choices: list[_StreamChoice] = Field(default_factory=list[_StreamChoice])
    usage: _UsageWire | None = None
    error: JSONObject | None = None


class _Message(_Wire):
    content: str | None = None
    tool_calls: list[_ToolCallPart] | None = None


class _Choice(_Wire):
    message: _Message
    finish_reason: str | None = None


class _Completion(_Wire):
    choices: list[_Choice] = Field(min_length=1)
    usage: _UsageWire | None = None


# -- the client -------------------------------------------------------------------------------------------


class ChatClient:
    """Chat Completions on one endpoint, over an `httpx2.AsyncClient` the caller owns."""

    def __init__(self, http: httpx2.AsyncClient, base_url: str, api_key: str | None) -> None:
        self._http = http
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Accept": "text/event-stream"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"

    @property
    def url(self) -> str:
        return self._url

    async def complete(
        self,
        *,
        model: str,
        messages: list[JSONObject],
        tools: list[JSONObject],
        options: JSONObject,
        on_delta: OnDelta,
        timeout_s: float,
        timeout_code: str = "runner.timeout",
    ) -> ChatAnswer:
        """Stream one answer of `model`; content deltas go to `on_delta` as they arrive.

        Raises:
            ChatError: the endpoint refused, failed, timed out or sent something malformed.
        """
        body: JSONObject = {
            **options,
            "model": model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = tools
        stream = _StreamState(model, on_delta)
        try:
            with anyio.fail_after(timeout_s):
                async with self._http.stream("POST", self._url, json=body, headers=self._headers) as response:
                    if response.status_code != 200:
                        raise await _http_failure(model, response)
                    kind = response.headers.get("content-type", "").lower()
                    if kind.startswith("application/json"):
                        return _from_completion(model, await response.aread())
                    await stream.consume(response)
        except TimeoutError:
            failure = ChatError(
                timeout_code,
                f"model {model!r} did not answer within {timeout_s:g} s",
                retryable=True,
                details={"model": model, "timeout_s": timeout_s},
            )
            failure.after_output = stream.emitted
            raise failure from None
        except ChatError as failure:
            failure.after_output = stream.emitted
            raise
        except httpx2.HTTPError as exc:
            failure = ChatError(
                "runtime_error",
                f"cannot reach the model endpoint {self._url} for {model!r}: {exc or type(exc).__name__}",
                retryable=True,
                details={"model": model, "url": self._url},
            )
            failure.after_output = stream.emitted
            raise failure from None
        return stream.answer()


async def _http_failure(model: str, response: httpx2.Response) -> ChatError:
    raw = (await response.aread())[: MAX_ERROR_BODY * 2].decode("utf-8", "replace")
    reason = _error_message(raw) or raw[:_SNIPPET] or response.reason_phrase
    status = response.status_code
    details: JSONObject = {"model": model, "status": status, "body": raw[:MAX_ERROR_BODY]}
    said = f"model {model!r}: HTTP {status}: {reason}"
    if status in (401, 403):
        return ChatError(
            "unauthorized",
            f"{said}. Check the API key in the env var named by api_key_env.",
            fallback=False,
            details=details,
        )
    if status == 429:
        retry_after = response.headers.get("retry-after")
        if retry_after is not None:
            details["retry_after"] = retry_after
        return ChatError("rate_limited", said, retryable=True, details=details)
    if status == 404:
        return ChatError("not_found", said, details=details)
    if status == 408:
        return ChatError("runner.timeout", said, retryable=True, details=details)
    if status in (400, 422):
        return ChatError("invalid_argument", said, details=details)
    return ChatError("runtime_error", said, retryable=status >= 500, details=details)


def _error_message(raw: str) -> str | None:
    """The `error.message` of an OpenAI-style error body, when it is one."""
    try:
        parsed: object = json.loads(raw)
    except ValueError:
        return None
    if is_json_object(parsed):
        error = parsed.get("error")
        if is_json_object(error) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return None


def _malformed(model: str, what: str, data: str) -> ChatError:
    return ChatError(
        "runner.error",
        f"model {model!r} sent a malformed answer: {what}",
        fallback=False,
        details={"model": model, "data": data[:_SNIPPET]},
    )


def _usage_into(answer: ChatAnswer, usage: _UsageWire | None) -> None:
    if usage is None:
        return
    answer.prompt_tokens += usage.prompt_tokens or 0
    answer.completion_tokens += usage.completion_tokens or 0
    answer.total_tokens += usage.total_tokens or (usage.prompt_tokens or 0) + (usage.completion_tokens or 0)


def _from_completion(model: str, raw: bytes) -> ChatAnswer:
    """A non-streamed answer (a server that ignored `stream: true`)."""
    text = raw.decode("utf-8", "replace")
    try:
        completion = _Completion.model_validate_json(raw)
    except ValidationError as exc:
        raise _malformed(model, f"not a chat completion ({exc.error_count()} problems)", text) from None
    choice = completion.choices[0]
    answer = ChatAnswer(model=model, content=choice.message.content or "", finish_reason=choice.finish_reason)
    for part in choice.message.tool_calls or []:
        function = part.function or _FunctionPart()
        if not function.name:
            raise _malformed(model, "a tool call without a function name", text)
        call_id = part.id or f"call_{len(answer.tool_calls)}"
        answer.tool_calls.append(ToolCall(call_id, function.name, function.arguments or ""))
    _usage_into(answer, completion.usage)
    return answer


class _StreamState:
    """Assembles one streamed answer from its SSE events."""

    def __init__(self, model: str, on_delta: OnDelta) -> None:
        self._model = model
        self._on_delta = on_delta
        self._answer = ChatAnswer(model=model)
        self._calls: dict[int, tuple[list[str], list[str], list[str]]] = {}
        self._done = False
        self.emitted = False

    async def consume(self, response: httpx2.Response) -> None:
        data: list[str] = []
        async for line in response.aiter_lines():
            if line == "":
                if data:
                    await self._event("\n".join(data))
                    data = []
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            # `event:`, `id:`, `retry:` and `:` comments carry nothing for chat completions.
            if self._done:
                return
        if data:
            await self._event("\n".join(data))

    async def _event(self, data: str) -> None:
        if data.strip() == "[DONE]":
            self._done = True
            return
        try:
            chunk = _Chunk.model_validate_json(data)
        except ValidationError as exc:
            what = "a chunk that is not JSON" if _is_json_error(exc) else "a chunk without the chunk shape"
            raise _malformed(self._model, what, data) from None
        if chunk.error is not None:
            raise _stream_error(self._model, chunk.error)
        _usage_into(self._answer, chunk.usage)
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta.content:
                self._answer.content += delta.content
                self.emitted = True
                await self._on_delta(delta.content)
            for part in delta.tool_calls or []:
                ids, names, arguments = self._calls.setdefault(part.index, ([], [], []))
                if part.id:
                    ids.append(part.id)
                if part.function is not None:
                    if part.function.name:
                        names.append(part.function.name)
                    if part.function.arguments:
                        arguments.append(part.function.arguments)
            if choice.finish_reason is not None:
                self._answer.finish_reason = choice.finish_reason

    def answer(self) -> ChatAnswer:
        if not self._done and self._answer.finish_reason is None:
            raise _malformed(self._model, "the stream ended before the answer was complete", "")
        for index in sorted(self._calls):
            ids, names, arguments = self._calls[index]
            # Most providers send the name once; some repeat it whole in every fragment.
            name = "".join(names) if len(set(names)) > 1 else (names[0] if names else "")
            if not name:
                raise _malformed(self._model, f"tool call #{index} has no function name", json.dumps(ids))
            call_id = ids[0] if ids else f"call_{index}"  # some local servers leave ids out
            self._answer.tool_calls.append(ToolCall(call_id, name, "".join(arguments)))
        return self._answer


def _is_json_error(exc: ValidationError) -> bool:
    return any(error["type"] == "json_invalid" for error in exc.errors(include_url=False))


def _stream_error(model: str, error: JSONObject) -> ChatError:
    """An `{"error": ...}` event inside a stream."""
    kind = " ".join(str(error.get(key, "")) for key in ("type", "code")).lower()
    message = str(error.get("message") or kind or "error")
    details: JSONObject = {"model": model, "error": error}
    if "rate" in kind or "429" in kind:
        return ChatError("rate_limited", f"model {model!r}: {message}", retryable=True, details=details)
    return ChatError("runtime_error", f"model {model!r}: {message}", retryable=True, details=details)
