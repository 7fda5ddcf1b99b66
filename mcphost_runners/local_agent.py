"""`plugin:mcphost/local-agent/default`: a model-driven runner for any OpenAI-compatible Chat Completions
endpoint (OpenAI, Ollama, vLLM, llama.cpp, LM Studio, a gateway ...) plus the run's MCP tools.

Owns its working context and its tool loop; the host owns the facts:
- messages: `config.prompt` (the agent's static prompt) as the system message, the last `history_turns`
  transcript items before the current input (`history_page(before_cursor=ctx.context.latest_cursor)`),
  then the current input — its text, and its images read through `artifacts_read` as data URLs when
  `vision` is on;
- tools: everything `list_tools()` shows for the run (facts tools and granted host tools), offered as
  function tools; each call goes through the run's MCP server and is reported as `tool.call.started` /
  `tool.call.completed`. At most `max_tool_rounds` rounds of tool calls; the round after the last is
  asked without tools, so the loop always ends with an answer;
- models: `model`, then each of `fallback_models` in order when one fails before it streamed anything
  (an auth failure is not retried with another model: the key is the endpoint's). A model that answered
  keeps the later rounds of the run.

Failures end the run with a precise `run.failed`: 401/403 → `unauthorized`; 429 → `rate_limited`
(retryable, `retry_after` in details); no answer within `timeout_s` → `runner.timeout`, or
`deadline_exceeded` when the run's own deadline cut the wait; a stream or answer that is not what the
Chat Completions API sends → `runner.error` with the offending data in details; 404 → `not_found`;
400/422 → `invalid_argument`; 5xx and unreachable endpoints → `runtime_error` (retryable); an
unreachable MCP server → `runner.mcp_unavailable`. Details name every model tried.

The API key comes only from the environment variable named by `api_key_env`, in the plugin process's
environment — operators pass it with `[[plugins]] env = { OPENAI_API_KEY = "..." }`. It is sent in the
`Authorization` header and nowhere else.

Host models: a model named `host:<id>` (or any model when `model_source = "host"`) is the host's
`[models.<id>]`, called at the run's own Chat Completions endpoint (`context.models.openai`) with the run
token as its key: no `base_url` or `api_key_env` is needed, and the plugin holds no provider key (the host
keeps it, counts the tokens and applies the agent's budget). `model` and `fallback_models` may mix host
and own models. A host model the run is not granted (`resources.models` of the agent) fails the run
`unauthorized` before any model is called, naming the key to add.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
from dataclasses import dataclass
from typing import Literal, Self

import httpx2
from pydantic import ConfigDict, Field, ValidationError, model_validator

from mcphost.common.fielddocs import DocumentedModel
from mcphost.common.validation import problems
from mcphost.protocol import JSONObject, config_schema_of, is_json_object
from mcphost.protocol.results import FinishReason
from mcphost_runners._harness_config import HOST_MODEL_PREFIX, run_token
from mcphost_runners._openai_chat import ChatAnswer, ChatClient, ChatError, ToolCall
from mcphost_runners.sdk import (
    AgentRunContext,
    AgentRunner,
    Capabilities,
    ContextSupport,
    Permissions,
    RunAPI,
    RunAPIError,
    RunOutput,
    RunTool,
    Usage,
    serve,
)

DEFAULT_PROMPT = "You are a helpful assistant."
MAX_TOOL_RESULT_CHARS = 20_000
"""How much of one tool result the model reads."""
MAX_IMAGE_BYTES = 5 * 1024 * 1024
PREVIEW_CHARS = 200
DEADLINE_MARGIN_S = 1.0
"""Time kept back before the run's deadline to report a failure."""
_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


class LocalAgentConfig(DocumentedModel):
    """The agent's runner config (`[agents.config]`), read at run start."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    base_url: str | None = Field(default=None, min_length=1, pattern=r"^https?://", title="API base URL")
    """The API root, e.g. "https://api.openai.com/v1" or "http://127.0.0.1:11434/v1" (not needed when
    every model is a host model)."""
    model: str = Field(min_length=1, title="Model")
    """The model; `host:<id>` names the host's `[models.<id>]`, called through the run's own endpoint."""
    model_source: Literal["own", "host"] = Field(default="own", title="Where the models are")
    """`host`: `model` and `fallback_models` name host models (`[models.<id>]`), the `host:` prefix
    optional; `own`: they are the endpoint's at `base_url`, but for those named `host:<id>`."""
    api_key_env: str | None = Field(default=None, title="Env var holding the API key")
    """Name of the environment variable holding the API key (none: no Authorization header). Not used
    for host models: the run token is their key."""
    fallback_models: list[str] = Field(default_factory=list[str], title="Fallback models, in order")
    """Tried in order when the model before fails (`host:<id>` for host models)."""
    max_tool_rounds: int = Field(default=8, ge=0, le=100, title="Most tool-call rounds per run")
    history_turns: int = Field(default=10, ge=0, le=100, title="Earlier transcript items in context")
    """How many earlier transcript items to include."""
    timeout_s: float = Field(default=120.0, gt=0, title="Timeout of one model request (s)")
    """The longest one model request may take."""
    vision: bool = Field(default=False, title="Send images to the model")
    """Send image inputs to the model (as data URLs)."""
    temperature: float | None = Field(default=None, title="Temperature")
    max_tokens: int | None = Field(default=None, ge=1, title="Most output tokens per answer")
    prompt: str | None = None

    def host_model(self, name: str) -> str | None:
        """The host model id `name` stands for, or None when it is the endpoint's own model."""
        if self.model_source == "host" or name.startswith(HOST_MODEL_PREFIX):
            return name.removeprefix(HOST_MODEL_PREFIX)
        return None

    @model_validator(mode="after")
    def _own_models_need_a_base_url(self) -> Self:
        names = (self.model, *self.fallback_models)
        if any(self.host_model(m) == "" for m in names):
            raise ValueError("'host:' names no model; write 'host:<id>' with an id of [models.<id>]")
        own = [m for m in names if self.host_model(m) is None]
        if own and self.base_url is None:
            raise ValueError(
                f"base_url is required for model {own[0]!r}, which is not a host model; "
                "or name a host model as 'host:<id>' (declared in [models.<id>])"
            )
        return self


@dataclass(frozen=True)
class _Endpoint:
    """Where one model is called: its API root, its key, and the name its requests carry."""

    base_url: str
    api_key: str | None
    model: str


class _RunFailedError(Exception):
    """End the run with `run.failed`."""

    def __init__(
        self, code: str, message: str, *, retryable: bool = False, details: JSONObject | None = None
    ):
        super().__init__(message)
        self.code, self.message, self.retryable, self.details = code, message, retryable, details or {}


class LocalAgentRunner(AgentRunner):
    """Any OpenAI-compatible chat model, with the run's MCP tools."""

    name = "default"
    label = {"en": "Local agent"}
    description = {
        "en": "A model behind any OpenAI-compatible Chat Completions endpoint, with the run's MCP tools."
    }
    capabilities = Capabilities(
        streaming=True, tool_calling=True, knowledge_retrieval=True, multimodal_input=True
    )
    permissions = Permissions(
        models=["invoke", "stream"],
        history=["page", "search"],
        events=["get", "page"],
        artifacts=["metadata", "read", "create"],
        state=["read", "write"],
        storage=["plugin", "workspace", "binding"],
        knowledge=["list", "retrieve"],
        tools=["call"],
    )
    context_support = ContextSupport(supports_history_search=True)
    config_schema = config_schema_of(LocalAgentConfig, exclude=("prompt",))
    calls_run_api = True

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        try:
            config = LocalAgentConfig.model_validate(ctx.config)
        except ValidationError as exc:
            first = problems(exc, root="(config)")[0]
            await out.failed(
                "invalid_argument", f"local agent config.{first}", details={"field": first.where}
            )
            return
        try:
            await _Turn(ctx, out, config).run()
        except _RunFailedError as failed:
            await out.failed(failed.code, failed.message, failed.retryable, failed.details)


class _Turn:
    """One run: assemble the context, loop model ⇄ tools, report."""

    def __init__(self, ctx: AgentRunContext, out: RunOutput, config: LocalAgentConfig) -> None:
        self.ctx, self.out, self.config = ctx, out, config
        self.api: RunAPI = out.api
        self.models = [config.model, *[m for m in config.fallback_models if m != config.model]]
        self.tried: list[JSONObject] = []
        self.pieces: list[str] = []
        self.streaming = ctx.delivery.supports_streaming
        self.usage = ChatAnswer(model=config.model)
        self.rounds = 0
        self.endpoints: dict[str, _Endpoint] = {}
        """Where each of `models` is called (`_endpoints`, at the run's start)."""

    async def run(self) -> None:
        self.endpoints = self._endpoints()
        messages = [{"role": "system", "content": self.config.prompt or DEFAULT_PROMPT}]
        messages += await self._history()
        messages.append(await self._current_input())
        tools = await self._tools()
        options: JSONObject = {}
        if self.config.temperature is not None:
            options["temperature"] = self.config.temperature
        if self.config.max_tokens is not None:
            options["max_tokens"] = self.config.max_tokens
        timeout = httpx2.Timeout(10.0, read=self.config.timeout_s)
        async with httpx2.AsyncClient(timeout=timeout) as http:
            while True:
                offer = tools if self.rounds < self.config.max_tool_rounds else []
                answer = await self._ask(http, messages, offer, options)
                if not answer.tool_calls or not offer:
                    break
                self.rounds += 1
                messages.append(_assistant_turn(answer))
                for call in answer.tool_calls:
                    messages.append(await self._run_tool(call))
        text = "\n\n".join(piece for piece in self.pieces if piece)
        if not text:
            raise _RunFailedError(
                "runner.empty_output",
                f"model {answer.model!r} finished ({answer.finish_reason or 'no reason'}) without any text",
                details={"model": answer.model, "finish_reason": answer.finish_reason, "rounds": self.rounds},
            )
        await self.out.message(text)
        usage = Usage(
            input_tokens=self.usage.prompt_tokens,
            output_tokens=self.usage.completion_tokens,
            total_tokens=self.usage.total_tokens,
            extra={"model": answer.model, "tool_rounds": self.rounds},
        )
        await self.out.completed(
            usage=usage, finish_reason=_FINISH.get(answer.finish_reason or "stop", "other")
        )

    # -- context -------------------------------------------------------------------------------------

    def _endpoints(self) -> dict[str, _Endpoint]:
        """Where each model of the run is called: its own endpoint, or the run's for a host model."""
        config = self.config
        found: dict[str, _Endpoint] = {}
        own_key: tuple[str | None] | None = None
        for name in self.models:
            model_id = config.host_model(name)
            if model_id is not None:
                found[name] = self._host_endpoint(name, model_id)
                continue
            assert config.base_url is not None  # LocalAgentConfig's validator
            if own_key is None:
                own_key = (self._api_key(),)
            found[name] = _Endpoint(config.base_url, own_key[0], name)
        return found

    def _host_endpoint(self, name: str, model_id: str) -> _Endpoint:
        """The run's Chat Completions endpoint and token for host model `model_id`, when it is granted."""
        ctx = self.ctx
        granted = {m.model_id: m for m in ctx.resources.models}
        info = granted.get(model_id)
        endpoints, mcp = ctx.context.models, ctx.context.mcp
        token = run_token(mcp) if mcp is not None else None
        details: JSONObject = {"model": name, "granted": sorted(granted)}
        if info is None or endpoints is None or token is None:
            raise _RunFailedError(
                "unauthorized",
                f"Host model {model_id!r} ({name!r} in the local agent's config) is not granted to this run: "
                f"add {model_id!r} to resources.models of the agent (and declare it in a [models.{model_id}] "
                "table of mcphost.toml).",
                details=details,
            )
        if info.kind != "chat":
            raise _RunFailedError(
                "invalid_argument",
                f"Host model {model_id!r} is a {info.kind} model; the local agent needs a chat model.",
                details=details,
            )
        if "stream" not in info.calls:
            raise _RunFailedError(
                "unauthorized",
                f"Host model {model_id!r} is granted without 'stream' calls, which the local agent makes: "
                "the runner's manifest must declare permissions.models = ['invoke', 'stream'].",
                details={**details, "calls": list(info.calls)},
            )
        return _Endpoint(endpoints.openai, token, model_id)

    def _api_key(self) -> str | None:
        name = self.config.api_key_env
        if not name:
            return None
        key = os.environ.get(name)
        if not key:
            raise _RunFailedError(
                "unauthorized",
                f"The environment variable {name!r} named by api_key_env is not set for the local agent "
                "plugin; pass it with [[plugins]] env = { " + name + ' = "..." } in mcphost.toml.',
                details={"api_key_env": name},
            )
        return key

    async def _history(self) -> list[JSONObject]:
        cursor = self.ctx.context.latest_cursor
        if self.config.history_turns == 0 or cursor is None:
            return []
        try:
            page = await self.api.history_page(before_cursor=cursor, limit=self.config.history_turns)
        except RunAPIError as exc:
            if exc.code != "unauthorized":  # no history permission: work with the input alone
                raise
            return []
        return [
            {"role": item.role, "content": item.content}
            for item in reversed(page.items)
            if item.role in ("user", "assistant") and item.content
        ]

    async def _current_input(self) -> JSONObject:
        ctx = self.ctx
        texts = [ctx.input.text] if ctx.input.text else []
        texts += [c.text for c in ctx.input.contents if c.type == "text" and c.text != ctx.input.text]
        images: dict[str, tuple[str, str | None]] = {}
        for element in ctx.input.contents:
            if element.type == "image":
                images[element.artifact_id] = (element.mime_type, element.name)
        for ref in ctx.input.attachments:
            if ref.mime_type.startswith("image/"):
                images.setdefault(ref.artifact_id, (ref.mime_type, ref.name))
        if not texts and not images:
            data = json.dumps(ctx.event.data, ensure_ascii=False)[:4000]
            texts.append(f"Event {ctx.event.event_type}: {data}")
        parts: list[JSONObject] = [{"type": "text", "text": "\n\n".join(texts)}] if texts else []
        for artifact_id, (mime_type, name) in images.items():
            if not self.config.vision:
                parts.append(
                    {"type": "text", "text": f"[image {name or artifact_id} not shown: vision is off]"}
                )
                continue
            data = await self.api.artifacts_read_all(artifact_id, max_bytes=MAX_IMAGE_BYTES)
            url = f"data:{mime_type};base64,{base64.b64encode(data).decode('ascii')}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        if all(part["type"] == "text" for part in parts):
            return {"role": "user", "content": "\n\n".join(str(part["text"]) for part in parts)}
        return {"role": "user", "content": parts}

    async def _tools(self) -> list[JSONObject]:
        if self.config.max_tool_rounds == 0:
            return []
        offered: list[JSONObject] = []
        for tool in await self.api.list_tools():
            if _FUNCTION_NAME.match(tool.name):
                offered.append(_function_tool(tool))
        return offered

    # -- the loop ------------------------------------------------------------------------------------

    async def _ask(
        self,
        http: httpx2.AsyncClient,
        messages: list[JSONObject],
        tools: list[JSONObject],
        options: JSONObject,
    ) -> ChatAnswer:
        """One answer, from the first model that gives one."""
        last: ChatError | None = None
        for index, model in enumerate(list(self.models)):
            endpoint = self.endpoints[model]
            chat = ChatClient(http, endpoint.base_url, endpoint.api_key)
            timeout_s, timeout_code = self._timeout()
            separated = False

            async def on_delta(text: str) -> None:
                nonlocal separated
                if not self.streaming:
                    return
                if not separated and any(self.pieces):
                    await self.out.delta("\n\n")  # the deltas add up to the final message
                separated = True
                await self.out.delta(text)

            try:
                answer = await chat.complete(
                    model=endpoint.model,
                    messages=messages,
                    tools=tools,
                    options=options,
                    on_delta=on_delta,
                    timeout_s=timeout_s,
                    timeout_code=timeout_code,
                )
            except ChatError as failure:
                last = failure
                self.tried.append({"model": model, "code": failure.code, "message": failure.message[:300]})
                if failure.after_output or not failure.fallback or failure.code == "deadline_exceeded":
                    break
                continue
            self.tried.append({"model": model, "code": "ok"})
            self.models = self.models[index:]  # the model that answered keeps the later rounds
            self.pieces.append(answer.content)
            self.usage.prompt_tokens += answer.prompt_tokens
            self.usage.completion_tokens += answer.completion_tokens
            self.usage.total_tokens += answer.total_tokens
            return answer
        assert last is not None
        raise _RunFailedError(
            last.code, last.message, retryable=last.retryable, details={**last.details, "tried": self.tried}
        )

    def _timeout(self) -> tuple[float, str]:
        """The wait for the next answer: `timeout_s`, or less when the run's deadline is nearer."""
        left = self.ctx.runtime.deadline_at - time.time() - DEADLINE_MARGIN_S
        if left <= 0:
            raise _RunFailedError(
                "deadline_exceeded",
                "the run's deadline passed before the model answered",
                retryable=True,
                details={"tried": self.tried},
            )
        if left < self.config.timeout_s:
            return left, "deadline_exceeded"
        return self.config.timeout_s, "runner.timeout"

    async def _run_tool(self, call: ToolCall) -> JSONObject:
        """Run one tool call through the run's MCP server; the tool message the model reads next."""
        try:
            parsed: object = json.loads(call.arguments) if call.arguments.strip() else {}
        except ValueError:
            parsed = None
        if not is_json_object(parsed):
            await self.out.tool_started(call.id, call.name, {"_raw": call.arguments[:1000]})
            message = "the arguments are not a JSON object; call the tool again with valid JSON arguments"
            await self.out.tool_completed(
                call.id, call.name, error_code="invalid_argument", error_message=message
            )
            return _tool_message(call, f"invalid_argument: {message}")
        arguments = parsed
        await self.out.tool_started(call.id, call.name, arguments)
        try:
            result = await self.api.call_tool(call.name, arguments)
        except RunAPIError as exc:
            if exc.code == "runner.mcp_unavailable":
                raise
            await self.out.tool_completed(
                call.id, call.name, error_code=exc.code, error_message=exc.message[:1000]
            )
            return _tool_message(call, f"{exc.code}: {exc.message}")
        text = result.text if result.text else json.dumps(result.structured_content, ensure_ascii=False)
        await self.out.tool_completed(call.id, call.name, result_preview=text[:PREVIEW_CHARS])
        if len(text) > MAX_TOOL_RESULT_CHARS:
            text = text[:MAX_TOOL_RESULT_CHARS] + "…(cut)"
        return _tool_message(call, text)


def _function_tool(tool: RunTool) -> JSONObject:
    parameters = tool.input_schema or {"type": "object", "properties": {}}
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description[:1024], "parameters": parameters},
    }


def _assistant_turn(answer: ChatAnswer) -> JSONObject:
    return {
        "role": "assistant",
        "content": answer.content or None,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments or "{}"}}
            for c in answer.tool_calls
        ],
    }


def _tool_message(call: ToolCall, content: str) -> JSONObject:
    return {"role": "tool", "tool_call_id": call.id, "content": content}


def main() -> None:
    serve(
        LocalAgentRunner(),
        author="mcphost",
        plugin="local-agent",
    )


if __name__ == "__main__":
    main()
