"""`ModelCalls`: the host models as MCP tools of the run (`models_list`, `models_invoke`, `models_rerank`,
`models_embed`).

Owns answering those tools for the facts server (it is the `facts.providers.ModelCaller` the host plugs
in): the grant check of each call (`model:ID:invoke|stream|rerank|embed`), what a model can take (its kind,
tools, images), the neutral request in the model's wire format (`llm.neutral`), reading the answer —
whole, or streamed with its text deltas handed to the caller as they arrive — and turning every failure
into a `HostError` with a precise message. Does not own the budget reservation, the fallback chain or
the usage rows: every call goes through `ModelProxy.opened`, as the wire endpoints' calls do.

Invariants:
- Nothing reaches an upstream before the grant, the model's kind and the budget allow it.
- Every failure is one `HostError`: a model not granted or a way of calling it not granted
  `ForbiddenError` (`unauthorized`, naming the layer that removed it), an unknown model `NotFoundError`,
  a request the model cannot take `InvalidArgumentError`, a spent budget `BudgetExceededError`
  (`budget_exceeded`, `details.budget` naming the key), a chain that failed or an answer that is not one
  `ModelCallError` (`runtime_error`, retryable, `details.attempts`), an upstream that stops answering
  or the run's deadline `DeadlineExceededError`.
- A whole answer is read up to `MAX_RESPONSE_BYTES`; a stream's chunks each within the model's
  `timeout_s` (the upstream client's read timeout), the whole call within the run's deadline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import anyio
import httpx2

from mcphost.errors import (
    DeadlineExceededError,
    ForbiddenError,
    InvalidArgumentError,
    ModelCallError,
    NotFoundError,
)
from mcphost.grants import refusal
from mcphost.llm import ModelConfig, ModelKind, host_model_infos
from mcphost.llm.embedding import embed_body, read_vectors
from mcphost.llm.neutral import (
    Answer,
    AnswerError,
    NeutralStream,
    api_of,
    read_answer,
    read_rerank,
    request_body,
    rerank_body,
)
from mcphost.llm.upstream import Attempt, UpstreamFailedError
from mcphost.llm.wire import Api, SseReader, StreamUsage, Usage, usage_of
from mcphost.models import RunGrant
from mcphost.protocol import HostModelInfo, JSONValue, is_json_object
from mcphost.protocol.inference import (
    AssistantMessage,
    EmbeddingAnswer,
    ImagePart,
    ModelInvocation,
    ModelsEmbedArgs,
    ModelsInvokeArgs,
    ModelsList,
    ModelsRerankArgs,
    ModelUsage,
    RerankAnswer,
)
from mcphost.proxy.server import MAX_RESPONSE_BYTES, ModelProxy, OpenCall

T = TypeVar("T")

_CALLS_OF: Mapping[str, ModelKind] = {
    "invoke": "chat",
    "stream": "chat",
    "rerank": "rerank",
    "embed": "embedding",
}
"""The kind of model each way of calling (`permissions.models`) calls."""
_TOOL_OF: Mapping[ModelKind, str] = {
    "chat": "models_invoke",
    "rerank": "models_rerank",
    "embedding": "models_embed",
}

TextSink = Callable[[str], Awaitable[None]]
"""Called with each text delta of a streamed answer, in order."""


class ModelCalls:
    """Answers the model tools of every run over the host's `ModelProxy`."""

    def __init__(self, proxy: ModelProxy, models: Mapping[str, ModelConfig]) -> None:
        self._proxy = proxy
        self._models = dict(models)
        self._infos = host_model_infos(self._models)

    def listed(self, grant: RunGrant) -> ModelsList:
        """The host models the run may call, and how."""

        def calls(info: HostModelInfo) -> list[str]:
            # a chat model is invoked or streamed, a rerank model reranks, an embedding model embeds
            return [c for c in sorted(grant.model_calls) if _CALLS_OF.get(c, "chat") == info.kind]

        infos = [self._infos[m] for m in sorted(grant.models) if m in self._infos]
        return ModelsList(
            models=[HostModelInfo.model_validate({**i.model_dump(), "calls": calls(i)}) for i in infos]
        )

    def _entry(self, grant: RunGrant, model_id: str, how: str, kind: ModelKind) -> ModelConfig:
        if model_id not in grant.models or how not in grant.model_calls:
            message, details = refusal(grant, f"model:{model_id}:{how}", f"{how} model {model_id!r}")
            raise ForbiddenError(message, details=details)
        entry = self._models.get(model_id)
        if entry is None:
            raise NotFoundError(
                f"Model {model_id!r} is granted but no longer configured on this host; models_list shows "
                "the models there are.",
                details={"model": model_id},
            )
        if entry.kind != kind:
            raise InvalidArgumentError(
                f"Model {model_id!r} is {_a(entry.kind)} model, not {_a(kind)} model; call it with "
                f"{_TOOL_OF[entry.kind]}.",
                details={"model": model_id, "kind": entry.kind},
            )
        return entry

    async def invoke(
        self, run_id: str, grant: RunGrant, args: ModelsInvokeArgs, on_text: TextSink | None
    ) -> ModelInvocation:
        """One chat call; streamed upstream, with its text deltas passed to `on_text`, when the caller
        gives one and the grant allows `stream` (else a whole answer, which needs `invoke`)."""
        wants = on_text is not None and "stream" in grant.model_calls
        how = "stream" if wants or "invoke" not in grant.model_calls else "invoke"
        streamed = how == "stream"
        entry = self._entry(grant, args.model, how, "chat")
        if args.tools and not entry.tools:
            raise InvalidArgumentError(
                f"Model {args.model!r} does not take tools (its [models] entry says tools = false).",
                details={"model": args.model},
            )
        if not entry.images and any(
            isinstance(p, ImagePart)
            for m in args.messages
            if not isinstance(m.content, str)
            for p in m.content
        ):
            raise InvalidArgumentError(
                f"Model {args.model!r} does not take images (its [models] entry says images = false).",
                details={"model": args.model},
            )
        api = api_of(entry)
        body = {"model": args.model, **request_body(entry, args, stream=streamed)}

        async def read(call: OpenCall) -> ModelInvocation:
            if streamed and _is_stream(call.response):
                answer, usage = await _read_stream(call, api, on_text)
            else:
                payload = await _read_whole(call)
                answer, usage = read_answer(api, payload), usage_of(api, payload)
            call.usage = usage
            return ModelInvocation(
                model=call.attempts[-1].model_id,
                response_model=answer.model,
                message=AssistantMessage(content=answer.content),
                stop_reason=answer.stop_reason,
                usage=self._usage(call, usage),
                attempts=len(call.attempts),
            )

        return await self._call(api, run_id, grant, args.model, body, read)

    async def rerank(self, run_id: str, grant: RunGrant, args: ModelsRerankArgs) -> RerankAnswer:
        """Scores of the documents by a rerank model, best first."""
        self._entry(grant, args.model, "rerank", "rerank")
        body = {"model": args.model, **rerank_body(args)}

        async def read(call: OpenCall) -> RerankAnswer:
            payload = await _read_whole(call)
            results = read_rerank(payload, len(args.documents), args.top_k)
            call.usage = usage_of("rerank", payload)
            return RerankAnswer(
                model=call.attempts[-1].model_id,
                results=results,
                usage=self._usage(call, call.usage),
                attempts=len(call.attempts),
            )

        return await self._call("rerank", run_id, grant, args.model, body, read)

    async def embed(self, run_id: str, grant: RunGrant, args: ModelsEmbedArgs) -> EmbeddingAnswer:
        """A vector for each input from an embedding model, in the order of the inputs."""
        entry = self._entry(grant, args.model, "embed", "embedding")
        if entry.wire != "openai":
            raise InvalidArgumentError(
                f"Model {args.model!r} is of provider {entry.provider!r}, which has no embeddings API; "
                "the host embeds with openai and openai-compatible models.",
                details={"model": args.model},
            )
        body = {"model": args.model, **embed_body(args)}

        async def read(call: OpenCall) -> EmbeddingAnswer:
            payload = await _read_whole(call)
            vectors = read_vectors(payload, len(args.inputs))
            call.usage = usage_of("embeddings", payload)
            return EmbeddingAnswer(
                model=call.attempts[-1].model_id,
                response_model=call.usage.model if call.usage is not None else None,
                vectors=vectors,
                usage=self._usage(call, call.usage),
                attempts=len(call.attempts),
            )

        return await self._call("embeddings", run_id, grant, args.model, body, read)

    def _usage(self, call: OpenCall, usage: Usage | None) -> ModelUsage:
        found = usage or Usage()
        facts = self._proxy.facts(call.attempts[-1].model_id)
        cost = facts.cost_usd(
            input_tokens=found.input_tokens,
            output_tokens=found.output_tokens,
            cached_tokens=found.cached_tokens,
        )
        return ModelUsage(
            input_tokens=found.input_tokens,
            output_tokens=found.output_tokens,
            cached_tokens=found.cached_tokens,
            cost_usd=cost,
        )

    async def _call(
        self,
        api: Api,
        run_id: str,
        grant: RunGrant,
        model_id: str,
        body: dict[str, JSONValue],
        read: Callable[[OpenCall], Awaitable[T]],
    ) -> T:
        remaining = grant.deadline_at - time.time()
        try:
            with anyio.fail_after(max(0.0, remaining)):
                async with self._proxy.opened(api, run_id, grant, model_id, body) as call:
                    if call.response.status_code != 200:
                        raise _refused_by_upstream(call, await _read_whole(call, status_ok=False))
                    try:
                        return await read(call)
                    except AnswerError as exc:
                        call.fail(
                            f"model {call.attempts[-1].model_id!r} answered something unreadable: {exc}"
                        )
                        raise _failed(model_id, call.attempts[-1].error or "", call) from None
                    except httpx2.TimeoutException:
                        timeout = self._models[call.attempts[-1].model_id].timeout_s
                        call.fail(
                            f"model {call.attempts[-1].model_id!r} sent nothing for {timeout:g} s", "timeout"
                        )
                        raise DeadlineExceededError(
                            call.attempts[-1].error or "", details=_details(model_id, call.attempts)
                        ) from None
                    except (httpx2.TransportError, httpx2.StreamError) as exc:
                        call.fail(
                            f"model {call.attempts[-1].model_id!r} broke off its answer: {type(exc).__name__}"
                        )
                        raise _failed(model_id, call.attempts[-1].error or "", call) from None
        except UpstreamFailedError as failed:
            last = failed.attempts[-1]
            details = _details(model_id, failed.attempts)
            said = "; ".join(a.error or "" for a in failed.attempts)
            if last.error_kind == "timeout":
                raise DeadlineExceededError(
                    f"Every model of the chain failed: {said}.", details=details
                ) from None
            raise ModelCallError(
                f"Every model of the chain failed: {said}. Retry later.", details=details
            ) from None
        except TimeoutError:
            raise DeadlineExceededError(
                f"The run's deadline passed before model {model_id!r} finished answering; finish with "
                "what you have.",
                details={"model": model_id, "deadline_at": grant.deadline_at},
            ) from None


def _a(kind: str) -> str:
    return f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"


def _details(model_id: str, attempts: list[Attempt]) -> dict[str, JSONValue]:
    tried = [{"model": a.model_id, "http_status": a.http_status, "error": a.error} for a in attempts]
    return {"model": model_id, "attempts": tried}


def _failed(model_id: str, message: str, call: OpenCall) -> ModelCallError:
    return ModelCallError(message[:1000], details=_details(model_id, call.attempts))


def _refused_by_upstream(call: OpenCall, payload: JSONValue) -> Exception:
    """The upstream's own refusal (a 4xx other than 429): the request cannot be sent to it as it is."""
    status = call.response.status_code
    error: JSONValue = payload.get("error") if is_json_object(payload) else None
    said: JSONValue = error.get("message") if is_json_object(error) else None
    model_id = call.attempts[-1].model_id
    message = f"model {model_id!r} refused the request with HTTP {status}" + (
        f": {str(said)[:500]}" if said else ""
    )
    call.fail(message, "invalid_request")
    details = {**_details(model_id, call.attempts), "http_status": status}
    if status in (400, 413, 422):  # the request: the caller can change it
        return InvalidArgumentError(message + ".", details=details)
    return ModelCallError(
        message + " (the host's configuration of this model may be wrong).", details=details
    )


def _is_stream(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").startswith("text/event-stream")


async def _read_whole(call: OpenCall, *, status_ok: bool = True) -> JSONValue:
    raw = bytearray()
    async for chunk in call.response.aiter_raw():
        raw.extend(chunk)
        if len(raw) > MAX_RESPONSE_BYTES:
            raise AnswerError(f"the answer is larger than {MAX_RESPONSE_BYTES} bytes")
    try:
        return json.loads(bytes(raw))
    except (ValueError, RecursionError):
        if not status_ok:
            return None
        raise AnswerError(
            f"HTTP {call.response.status_code} with a body that is not JSON ({bytes(raw[:80])!r})"
        ) from None


async def _read_stream(call: OpenCall, api: Api, on_text: TextSink | None) -> tuple[Answer, Usage | None]:
    assert api in ("anthropic", "chat")
    stream = NeutralStream("anthropic" if api == "anthropic" else "chat")
    reader, usage = SseReader(), StreamUsage(api)
    async for chunk in call.response.aiter_raw():
        if call.first is None:
            call.first = time.monotonic()
        for event, data in reader.feed(chunk):
            usage.feed(event, data)
            if usage.error is not None:
                raise AnswerError(f"its stream ended with an error: {usage.error[:500]}")
            for delta in stream.feed(data):
                if on_text is not None:
                    await on_text(delta)
    if not usage.finished:
        raise AnswerError("its stream ended before the answer did")
    return stream.answer(), usage.usage
