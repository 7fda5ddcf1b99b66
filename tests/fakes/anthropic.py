"""A fake Anthropic Messages API: `POST /v1/messages` answered as an SSE stream, scripted per test.

Claude Code (with `ANTHROPIC_BASE_URL` pointing here) calls only `POST /v1/messages?beta=true` with
`stream: true`. Each request is recorded, parsed into a `ModelRequest` and answered with the script's
`Reply` as the Messages event stream: `message_start`, `content_block_start/delta/stop`, `message_delta`
(stop reason and usage), `message_stop`. A non-streaming request gets the same message as one JSON body.
Other paths answer 404 and are recorded too, so a test sees any unexpected traffic.
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

INPUT_TOKENS = 17
OUTPUT_TOKENS = 5


@dataclass
class FakeAnthropic:
    """The fake's state: its script, its URL once served, and every request it received."""

    script: Script
    base_url: str = ""
    requests: list[ModelRequest] = field(default_factory=list[ModelRequest])
    other_paths: list[str] = field(default_factory=list[str])

    @property
    def agent_turns(self) -> list[ModelRequest]:
        return [r for r in self.requests if r.is_agent_turn]

    async def messages(self, request: Request) -> Response:
        body: JSON = await request.json()
        parsed = parse_request(request.url.path, body, dict(request.headers))
        self.requests.append(parsed)
        reply = self.script(parsed)
        if isinstance(reply, Fail):
            error = {"type": "error", "error": {"type": "api_error", "message": reply.message}}
            return JSONResponse(error, status_code=reply.status)
        model = str(body.get("model", "claude-fake"))
        if not body.get("stream"):
            if isinstance(reply, Hang):
                await anyio.sleep_forever()
                return JSONResponse({})
            return JSONResponse(_whole_message(reply, model))
        return StreamingResponse(
            _sse(reply, model),
            media_type="text/event-stream",
            headers={"request-id": f"req_fake_{len(self.requests)}"},
        )

    async def other(self, request: Request) -> Response:
        self.other_paths.append(f"{request.method} {request.url.path}")
        return JSONResponse({"type": "error", "error": {"type": "not_found_error"}}, status_code=404)


def parse_request(path: str, body: JSON, headers: dict[str, str]) -> ModelRequest:
    tools = tuple(str(t.get("name")) for t in _objects(body.get("tools")))
    messages = _objects(body.get("messages"))
    # Everything after the last user message that carries text (not only tool results) is this turn.
    results: list[str] = []
    user_text = ""
    for message in messages:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        blocks: list[JSON] = (
            [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        )
        texts = [
            str(b.get("text", ""))
            for b in blocks
            if b.get("type") == "text" and not str(b.get("text", "")).startswith("<system-reminder>")
        ]
        outputs = [text_of(b.get("content")) for b in blocks if b.get("type") == "tool_result"]
        if texts and not outputs:
            user_text, results = "\n".join(texts), []
        results.extend(outputs)
    return ModelRequest(
        path=path,
        body=body,
        headers=headers,
        offered_tools=tools,
        tool_results=tuple(results),
        user_text=user_text,
    )


def _objects(value: object) -> list[JSON]:
    """The objects of a JSON array that may be absent; items that are not objects are skipped."""
    items = cast(list[object], value) if isinstance(value, list) else []
    return [cast(JSON, item) for item in items if isinstance(item, dict)]


def _event(name: str, data: JSON) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _blocks(reply: Text | ToolCall) -> list[JSON]:
    if isinstance(reply, Text):
        return [{"type": "text", "text": reply.text}]
    return [{"type": "tool_use", "id": _new_id("toolu"), "name": reply.name, "input": reply.arguments}]


def _new_id(prefix: str) -> str:
    # Unique across fake instances: Claude Code merges a resumed session's messages by id.
    return f"{prefix}_fake_{uuid.uuid4().hex[:20]}"


def _whole_message(reply: Text | ToolCall, model: str) -> JSON:
    return {
        "id": _new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(reply),
        "stop_reason": "end_turn" if isinstance(reply, Text) else "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS},
    }


async def _sse(reply: Text | ToolCall | Hang, model: str) -> AsyncIterator[bytes]:
    start: JSON = {
        "id": _new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1},
    }
    yield _event("message_start", {"type": "message_start", "message": start})
    if isinstance(reply, Hang):
        yield _event("ping", {"type": "ping"})
        await anyio.sleep_forever()
        return
    if isinstance(reply, Text):
        block: JSON = {"type": "text", "text": ""}
        # Two deltas, so partial-message streaming has something to stream.
        half = max(1, len(reply.text) // 2)
        deltas = [
            {"type": "text_delta", "text": piece} for piece in (reply.text[:half], reply.text[half:]) if piece
        ]
        stop = "end_turn"
    else:
        block = {"type": "tool_use", "id": _new_id("toolu"), "name": reply.name, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": json.dumps(reply.arguments)}]
        stop = "tool_use"
    yield _event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
    for delta in deltas:
        yield _event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
    yield _event("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield _event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": OUTPUT_TOKENS},
        },
    )
    yield _event("message_stop", {"type": "message_stop"})


@asynccontextmanager
async def fake_anthropic(script: Script) -> AsyncGenerator[FakeAnthropic]:
    """Serve a scripted fake Messages API on 127.0.0.1; `.base_url` is what `ANTHROPIC_BASE_URL` takes."""
    fake = FakeAnthropic(script)

    methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"]
    app = Starlette(
        routes=[
            Route("/v1/messages", fake.messages, methods=["POST"]),
            Route("/{path:path}", fake.other, methods=methods),
        ]
    )
    async with serve_loopback(app) as url:
        fake.base_url = url
        yield fake
