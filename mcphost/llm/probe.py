"""Probing the host's models: one smallest call to each `[models.<id>]` (`mcphost config check`).

Owns the probe request of each kind — a chat model asked for one token of an answer to `ping` in its own
wire (`neutral.request_body`), a rerank model one query over one document, an embedding model one
short input (`embedding.embed_body`) — sent to the model itself,
never its fallbacks, with the host's key, and what came back: ok, or the HTTP status and the upstream's
message, or the transport failure, with the latency. Does not own reporting (`cli/_setup.py`).

Invariants: a probe never raises for what the upstream did (refused, unreachable, hung, garbage): every
outcome is a `ModelProbe`. Each probe costs at most one input word and one output token.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Literal

import anyio
import httpx2

from mcphost.llm.catalog import ModelConfig
from mcphost.llm.embedding import embed_body
from mcphost.llm.neutral import api_of, request_body, rerank_body
from mcphost.llm.upstream import UpstreamFailedError, open_first
from mcphost.llm.wire import Api
from mcphost.protocol import JSONObject, is_json_object
from mcphost.protocol.inference import ModelMessage, ModelsEmbedArgs, ModelsInvokeArgs, ModelsRerankArgs

MAX_PROBE_BODY_BYTES = 256 * 1024


@dataclass(frozen=True)
class ModelProbe:
    """How one model answered its probe."""

    model_id: str
    status: Literal["ok", "fail", "skipped"]
    detail: str
    http_status: int | None = None
    latency_ms: float | None = None


async def probe_model(
    client: httpx2.AsyncClient, model_id: str, entry: ModelConfig, *, timeout_s: float
) -> ModelProbe:
    """Call `entry` once with the smallest request of its kind (bounded by `timeout_s` in all)."""
    api: Api
    body: JSONObject
    if entry.kind == "embedding":
        if entry.wire != "openai":
            return ModelProbe(model_id, "fail", f"provider {entry.provider!r} has no embeddings API")
        api, body = "embeddings", embed_body(ModelsEmbedArgs(model=model_id, inputs=["ping"]))
    elif entry.kind == "rerank":
        api, body = "rerank", rerank_body(ModelsRerankArgs(model=model_id, query="ping", documents=["pong"]))
    else:
        api = api_of(entry)
        ping = ModelMessage(role="user", content="ping")
        args = ModelsInvokeArgs(model=model_id, messages=[ping], max_tokens=1)
        body = request_body(entry, args, stream=False)
    started = time.monotonic()
    try:
        with anyio.fail_after(timeout_s):
            _, response = await open_first(client, [(model_id, entry)], api, body, "", {})
            try:
                raw = await _head(response)
            finally:
                await response.aclose()
    except UpstreamFailedError as failed:
        last = failed.attempts[-1]
        return ModelProbe(
            model_id, "fail", last.error or "the upstream failed", last.http_status, _ms(started)
        )
    except TimeoutError:
        return ModelProbe(model_id, "fail", f"no answer within {timeout_s:g} s", None, _ms(started))
    except httpx2.HTTPError as exc:
        return ModelProbe(model_id, "fail", f"broke off its answer: {type(exc).__name__}", None, _ms(started))
    latency = _ms(started)
    status = response.status_code
    if status != 200:
        return ModelProbe(
            model_id, "fail", f"{entry.model!r} answered HTTP {status}{_said(raw)}", status, latency
        )
    try:
        json.loads(raw)
    except (ValueError, RecursionError):
        return ModelProbe(
            model_id,
            "fail",
            f"{entry.model!r} answered HTTP 200 with a body that is not JSON",
            status,
            latency,
        )
    return ModelProbe(
        model_id, "ok", f"{entry.model!r} answered HTTP 200 in {latency:.0f} ms", status, latency
    )


async def _head(response: httpx2.Response) -> bytes:
    raw = bytearray()
    async for chunk in response.aiter_raw():
        raw.extend(chunk)
        if len(raw) > MAX_PROBE_BODY_BYTES:
            break
    return bytes(raw)


def _said(raw: bytes) -> str:
    try:
        payload = json.loads(raw)
    except (ValueError, RecursionError):
        return ""
    error = payload.get("error") if is_json_object(payload) else None
    message = error.get("message") if is_json_object(error) else None
    return f": {message[:300]}" if isinstance(message, str) else ""


def _ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 1)
