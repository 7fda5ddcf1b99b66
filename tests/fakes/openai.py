"""A fake OpenAI Responses API: `POST /responses` (and `/v1/responses`) answered as SSE, scripted per test.

Codex (`wire_api = "responses"`) calls only `POST {base_url}/responses` with `stream: true`. Each request
is recorded, parsed into a `ModelRequest` and answered with the script's `Reply` as the Responses event
stream: `response.created`, `response.output_item.added`, `response.output_text.delta`,
`response.output_item.done` (a `message` or a `function_call`), `response.completed` with usage.

MCP tools reach the model as a namespace tool (`{"type": "namespace", "name": "mcp__mcphost", "tools":
[...]}`); the fake offers them to scripts as `mcp__mcphost__<tool>` and splits a `ToolCall` back into
the namespace and the tool's name, as a real model's call must carry both.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import cast

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakes._serve import serve_loopback
from tests.fakes.script import JSON, Fail, Hang, ModelRequest, Script, Text, ToolCall, text_of

INPUT_TOKENS = 23
OUTPUT_TOKENS = 7


@dataclass
class FakeOpenAI:
    """The fake's state: its script, its URL once served, and every request it received."""

    script: Script
    base_url: str = ""
    requests: list[ModelRequest] = field(default_factory=list[ModelRequest])
    other_paths: list[str] = field(default_factory=list[str])

    @property
    def agent_turns(self) -> list[ModelRequest]:
        return [r for r in self.requests if r.is_agent_turn]

    async def responses(self, request: Request) -> Response:
        body: JSON = await request.json()
        parsed = parse_request(request.url.path, body, dict(request.headers))
        self.requests.append(parsed)
        reply = self.script(parsed)
        if isinstance(reply, Fail):
            error = {"error": {"type": "server_error", "code": "fake_failure", "message": reply.message}}
            return JSONResponse(error, status_code=reply.status)
        return StreamingResponse(
            _sse(reply, str(body.get("model", "fake-model")), _namespaces(body)),
            media_type="text/event-stream",
        )

    async def other(self, request: Request) -> Response:
        self.other_paths.append(f"{request.method} {request.url.path}")
        return JSONResponse({"error": {"message": "not found in the fake"}}, status_code=404)


def _tools(holder: JSON) -> list[JSON]:
    """The `tools` array of a request body or of a namespace tool (absent: none)."""
    return cast(list[JSON], holder.get("tools") or [])


def _namespaces(body: JSON) -> list[str]:
    return [str(t["name"]) for t in _tools(body) if t.get("type") == "namespace"]


def _offered(body: JSON) -> tuple[str, ...]:
    names: list[str] = []
    for tool in _tools(body):
        if tool.get("type") == "namespace":
            names += [f"{tool['name']}__{inner.get('name')}" for inner in _tools(tool)]
        elif tool.get("name"):
            names.append(str(tool["name"]))
    return tuple(names)


def parse_request(path: str, body: JSON, headers: dict[str, str]) -> ModelRequest:
    items = [cast(JSON, i) for i in cast(list[object], body.get("input") or []) if isinstance(i, dict)]
    results: list[str] = []
    user_text = ""
    for item in items:
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "user":
            content = item.get("content")
            parts: list[JSON] = [{"text": content}] if isinstance(content, str) else list(content or [])
            texts = [str(p.get("text", "")) for p in parts if p.get("type", "input_text") == "input_text"]
            # Codex sends its environment context and instructions as user messages too.
            texts = [t for t in texts if not t.lstrip().startswith("<")]
            if texts:
                user_text, results = "\n".join(texts), []
        elif kind in ("function_call_output", "custom_tool_call_output", "mcp_tool_call_output"):
            results.append(text_of(item.get("output")))
    return ModelRequest(
        path=path,
        body=body,
        headers=headers,
        offered_tools=_offered(body),
        tool_results=tuple(results),
        user_text=user_text,
    )


def _event(data: JSON) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


def _split(name: str, namespaces: list[str]) -> tuple[str | None, str]:
    for namespace in sorted(namespaces, key=len, reverse=True):
        if name.startswith(namespace + "__"):
            return namespace, name[len(namespace) + 2 :]
    return None, name


async def _sse(reply: Text | ToolCall | Hang, model: str, namespaces: list[str]) -> AsyncIterator[bytes]:
    response_id = f"resp_fake_{uuid.uuid4().hex[:20]}"
    response: JSON = {"id": response_id, "object": "response", "model": model, "status": "in_progress"}
    yield _event({"type": "response.created", "response": response})
    if isinstance(reply, Hang):
        await anyio.sleep_forever()
        return
    item_id = f"item_fake_{uuid.uuid4().hex[:20]}"
    if isinstance(reply, Text):
        added: JSON = {
            "type": "message",
            "id": item_id,
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        yield _event({"type": "response.output_item.added", "output_index": 0, "item": added})
        half = max(1, len(reply.text) // 2)
        for piece in (reply.text[:half], reply.text[half:]):
            if piece:
                yield _event(
                    {
                        "type": "response.output_text.delta",
                        "item_id": item_id,
                        "output_index": 0,
                        "content_index": 0,
                        "delta": piece,
                    }
                )
        done: JSON = {
            "type": "message",
            "id": item_id,
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
        }
    else:
        namespace, tool = _split(reply.name, namespaces)
        done = {
            "type": "function_call",
            "id": item_id,
            "call_id": f"call_fake_{uuid.uuid4().hex[:20]}",
            "name": tool,
            "arguments": json.dumps(reply.arguments),
            "status": "completed",
        }
        if namespace is not None:
            done["namespace"] = namespace
        yield _event({"type": "response.output_item.added", "output_index": 0, "item": done})
    yield _event({"type": "response.output_item.done", "output_index": 0, "item": done})
    usage: JSON = {
        "input_tokens": INPUT_TOKENS,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": OUTPUT_TOKENS,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
    }
    completed = {**response, "status": "completed", "output": [done], "usage": usage}
    yield _event({"type": "response.completed", "response": completed})


@asynccontextmanager
async def fake_openai(script: Script) -> AsyncGenerator[FakeOpenAI]:
    """Serve a scripted fake Responses API on 127.0.0.1; `.base_url` is the provider's `base_url`."""
    fake = FakeOpenAI(script)
    methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"]
    app = Starlette(
        routes=[
            Route("/responses", fake.responses, methods=["POST"]),
            Route("/v1/responses", fake.responses, methods=["POST"]),
            Route("/{path:path}", fake.other, methods=methods),
        ]
    )
    async with serve_loopback(app) as url:
        fake.base_url = url
        yield fake
