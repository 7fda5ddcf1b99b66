"""A fake OpenAI-compatible Chat Completions server on 127.0.0.1, scripted per test.

`serve_fake_chat()` runs it under uvicorn on a free port inside the test's event loop. A test scripts
the answers of each model in order (`fake.script("m1", Reply(status=500), ...)`) and afterwards reads
every request it received (`fake.requests`: model, JSON body, headers). A request for a model with no
scripted answer left gets a 500 naming the model, so a test that did not expect it fails visibly.

A `Reply` is streamed the way the real API streams (`text/event-stream`, `chat.completion.chunk`s:
content split into word pieces, each tool call's arguments split across two fragments, a finish chunk,
a usage chunk, `data: [DONE]`), or answered as an error status, a raw (malformed) stream, a plain JSON
completion, or not at all (`hang`, released when the server stops).

`POST /v1/rerank` speaks the Cohere/Jina rerank shape vLLM serves (`{model, query, documents, top_n}` →
`{results: [{index, relevance_score}], usage: {total_tokens}}`): a model with no scripted reply left
scores each document by the share of the query's words it contains; a scripted `Reply` can fail it
(`status`), hang it, or answer garbage (`text_body`). `POST /v1/embeddings` speaks OpenAI Embeddings
(`{model, input, dimensions}` → `{data: [{index, embedding}], usage: {prompt_tokens, total_tokens}}`):
each input's vector is derived from its SHA-256 (`fake_vector`, deterministic), a token per word; a
scripted `Reply` can fail, hang or garble it the same way.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

JSON = dict[str, Any]


@dataclass(frozen=True)
class FakeToolCall:
    name: str
    arguments: JSON | str
    """A JSON object, or raw text sent as the arguments exactly (to script malformed arguments)."""
    id: str = ""


@dataclass(frozen=True)
class Reply:
    """One scripted answer."""

    content: str = ""
    tool_calls: tuple[FakeToolCall, ...] = ()
    status: int = 200
    error: str = "scripted failure"
    """The `error.message` of a non-200 answer."""
    headers: tuple[tuple[str, str], ...] = ()
    raw: tuple[str, ...] | None = None
    """SSE `data:` payloads sent exactly as given (no finish, usage or [DONE] added)."""
    hang: bool = False
    json_body: bool = False
    """Answer with a non-streamed `chat.completion` JSON body."""
    text_body: str | None = None
    """Answer 200 with exactly this body as `text/plain` (garbage where JSON belongs)."""
    usage: tuple[int, int] = (10, 5)
    finish_reason: str | None = None
    """Default: `tool_calls` when there are tool calls, else `stop`."""


@dataclass(frozen=True)
class Received:
    model: str
    body: JSON
    headers: dict[str, str]

    @property
    def messages(self) -> list[JSON]:
        return list(self.body.get("messages", []))

    @property
    def tool_names(self) -> list[str]:
        return [tool["function"]["name"] for tool in self.body.get("tools", [])]


@dataclass
class FakeChatServer:
    base_url: str = ""
    requests: list[Received] = field(default_factory=list[Received])
    _scripts: dict[str, list[Reply]] = field(default_factory=dict[str, list[Reply]])
    _stop: anyio.Event = field(default_factory=anyio.Event)

    def reset(self) -> None:
        """Forget the requests and scripts so far and release hanging answers (a server shared by tests)."""
        self.requests.clear()
        self._scripts.clear()
        self._stop.set()
        self._stop = anyio.Event()

    def script(self, model: str, *replies: Reply) -> None:
        """Append answers for `model`, used one per request in order."""
        self._scripts.setdefault(model, []).extend(replies)

    @property
    def models(self) -> list[str]:
        return [r.model for r in self.requests]

    async def _completions(self, request: Request) -> Response:
        body: JSON = await request.json()
        model = str(body.get("model"))
        self.requests.append(Received(model, body, {k.lower(): v for k, v in request.headers.items()}))
        queue = self._scripts.get(model) or []
        if not queue:
            return _error(500, f"the fake has no scripted reply left for model {model!r}")
        reply = queue.pop(0)
        if reply.hang:
            await self._stop.wait()  # the event of this moment: `reset()` swaps in a new one
            return _error(503, "stopped")
        if reply.status != 200:
            return _error(reply.status, reply.error, dict(reply.headers))
        if reply.text_body is not None:
            return Response(reply.text_body, media_type="text/plain")
        if reply.json_body:
            return JSONResponse(_completion(model, reply))
        payloads = list(reply.raw) if reply.raw is not None else _chunks(model, reply)
        return StreamingResponse(_sse(payloads), media_type="text/event-stream")

    async def _scripted(self, request: Request) -> tuple[JSON, str, Response | None]:
        """A computed endpoint's request: its body, its model, and the scripted failure to answer
        (None: no reply scripted, or one that does not fail, so the fake computes the answer)."""
        body: JSON = await request.json()
        model = str(body.get("model"))
        self.requests.append(Received(model, body, {k.lower(): v for k, v in request.headers.items()}))
        queue = self._scripts.get(model) or []
        reply = queue.pop(0) if queue else Reply()
        if reply.hang:
            await self._stop.wait()
            return body, model, _error(503, "stopped")
        if reply.status != 200:
            return body, model, _error(reply.status, reply.error, dict(reply.headers))
        if reply.text_body is not None:
            return body, model, Response(reply.text_body, media_type="text/plain")
        return body, model, None

    async def _embeddings(self, request: Request) -> Response:
        body, model, failed = await self._scripted(request)
        if failed is not None:
            return failed
        given: Any = body["input"]
        items: list[str | list[int]] = list(given) if isinstance(given, list) else [given]  # pyright: ignore[reportUnknownArgumentType]  # the fake trusts what the host checked
        if items and all(isinstance(t, int) for t in items):
            items = [given]
        size = int(body.get("dimensions") or EMBEDDING_DIMENSIONS)
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vector(item, size)}
            for i, item in enumerate(items)
        ]
        tokens = sum(len(item.split()) if isinstance(item, str) else len(item) for item in items)
        return JSONResponse(
            {
                "object": "list",
                "model": model,
                "data": data,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def _rerank(self, request: Request) -> Response:
        body, model, failed = await self._scripted(request)
        if failed is not None:
            return failed
        words = set(str(body["query"]).lower().split())
        documents = [str(d) for d in body["documents"]]
        scores = [len(words & set(d.lower().split())) / max(1, len(words)) for d in documents]
        results = sorted(
            ({"index": i, "relevance_score": score} for i, score in enumerate(scores)),
            key=lambda r: -float(r["relevance_score"]),
        )
        if isinstance(body.get("top_n"), int):
            results = results[: body["top_n"]]
        tokens = sum(len(d.split()) for d in documents) + len(words)
        return JSONResponse(
            {"id": "rerank-fake", "model": model, "results": results, "usage": {"total_tokens": tokens}}
        )


EMBEDDING_DIMENSIONS = 8
"""The length of the fake's vectors when a request names no `dimensions`."""


def fake_vector(item: str | list[int], size: int) -> list[float]:
    """The fake's vector of one input: `size` numbers in [-1, 1] from the SHA-256 of its JSON, the same
    for the same input every time."""
    seed = hashlib.sha256(json.dumps(item).encode()).digest()
    stream = b"".join(hashlib.sha256(seed + n.to_bytes(4, "big")).digest() for n in range(size // 32 + 1))
    return [round(b / 127.5 - 1, 6) for b in stream[:size]]


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "fake_error"}}, status, headers=headers)


async def _sse(payloads: list[str]) -> AsyncIterator[str]:
    for payload in payloads:
        yield f"data: {payload}\n\n"
        await anyio.lowlevel.checkpoint()


def _finish(reply: Reply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def _arguments(call: FakeToolCall) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


def _chunks(model: str, reply: Reply) -> list[str]:
    def chunk(delta: JSON, finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return json.dumps(
            {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model, "choices": [choice]}
        )

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": piece}) for piece in re.findall(r"\S+\s*|\s+", reply.content)]
    for index, call in enumerate(reply.tool_calls):
        arguments = _arguments(call)
        half = len(arguments) // 2
        head = {"index": index, "id": call.id or f"call_{index}", "type": "function"}
        out.append(
            chunk({"tool_calls": [{**head, "function": {"name": call.name, "arguments": arguments[:half]}}]})
        )
        out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]}))
    out.append(chunk({}, _finish(reply)))
    prompt, completion = reply.usage
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    out.append(
        json.dumps({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "choices": [], "usage": usage})
    )
    out.append("[DONE]")
    return out


def _completion(model: str, reply: Reply) -> JSON:
    message: JSON = {"role": "assistant", "content": reply.content or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id or f"call_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": _arguments(c)},
            }
            for i, c in enumerate(reply.tool_calls)
        ]
    prompt, completion = reply.usage
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


@asynccontextmanager
async def serve_fake_chat() -> AsyncGenerator[FakeChatServer]:
    """The fake on a free 127.0.0.1 port, serving `POST /v1/chat/completions` until the block ends."""
    fake = FakeChatServer()
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", fake._completions, methods=["POST"]),  # pyright: ignore[reportPrivateUsage]
            Route("/v1/rerank", fake._rerank, methods=["POST"]),  # pyright: ignore[reportPrivateUsage]
            Route("/v1/embeddings", fake._embeddings, methods=["POST"]),  # pyright: ignore[reportPrivateUsage]
        ]
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    )
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            with anyio.fail_after(10):
                while not server.started:  # noqa: ASYNC110  # uvicorn exposes only a flag
                    await anyio.sleep(0.01)
            fake.base_url = f"http://127.0.0.1:{port}/v1"
            try:
                yield fake
            finally:
                fake._stop.set()  # pyright: ignore[reportPrivateUsage]
                server.should_exit = True
    finally:
        sock.close()
