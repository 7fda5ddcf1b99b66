"""Calling a host model upstream: one request through a model's fallback chain, every attempt kept.

Owns the HTTP client the host calls providers with, the upstream URL and headers of each API (the
host's key added here, from its environment, at each call), the bounded waits, and the fallback rule:
the next model of the chain is tried when one answers 429 or 5xx, times out, or cannot be reached; any
other answer (a success, or the upstream's own 4xx refusal in the same wire format) is the answer.
Does not own who may call (the proxy checks the grant), budgets, or what is recorded (`Attempt`s are
handed back to the caller).

Invariants: the key never leaves this module but in the upstream request's header; no header of the
client's but the few in `PASSED_HEADERS` reaches the upstream (never its credential, the run token).
Every wait is bounded: connecting by the entry's `connect_timeout_s`, the answer's start and each later
chunk by its `timeout_s`, and the caller bounds the whole call by the run's deadline. A response
handed back is open (streamed): the caller reads it and closes it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

import httpx2

from mcphost.llm.catalog import ModelConfig
from mcphost.llm.wire import Api, ErrorKind
from mcphost.protocol import JSONObject, is_json_object

logger = logging.getLogger(__name__)

PASSED_HEADERS: tuple[str, ...] = ("anthropic-version", "anthropic-beta", "openai-beta", "accept")
"""Client headers the upstream gets as sent; the rest (credentials above all) stay here."""
ANTHROPIC_VERSION = "2023-06-01"
MAX_ERROR_BODY_BYTES = 64 * 1024
"""How much of a failed attempt's body is read (to say what it said) before the next is tried."""
_PATHS: Mapping[Api, str] = {
    "anthropic": "/v1/messages",
    "chat": "/chat/completions",
    "responses": "/responses",
    "rerank": "/rerank",
    "embeddings": "/embeddings",
}

AttemptStatus = Literal["ok", "failed"]


@dataclass
class Attempt:
    """One try of one model of the chain."""

    model_id: str
    upstream_model: str
    attempt: int
    """1 for the model named, 2.. for its fallbacks in order."""
    started: float = field(default_factory=time.monotonic)
    status: AttemptStatus = "ok"
    http_status: int | None = None
    error: str | None = None
    error_kind: ErrorKind | None = None


class UpstreamFailedError(Exception):
    """Every model of the chain failed; `attempts` says how, the last one last."""

    def __init__(self, attempts: list[Attempt]) -> None:
        self.attempts = attempts
        last = attempts[-1]
        super().__init__(last.error or "the upstream failed")

    @property
    def kind(self) -> ErrorKind:
        last = self.attempts[-1]
        if last.http_status == 429:
            return "rate_limit"
        return last.error_kind or "upstream"


def retryable(status: int) -> bool:
    """An answer the next model of the chain is tried after."""
    return status == 429 or status >= 500


def upstream_request(
    client: httpx2.AsyncClient,
    entry: ModelConfig,
    api: Api,
    body: JSONObject,
    query: str,
    headers: Mapping[str, str],
) -> httpx2.Request:
    """The request for `entry`: the body with the upstream model's name, the host's key, the passed headers."""
    sent: dict[str, str] = {name: headers[name] for name in PASSED_HEADERS if name in headers}
    sent["content-type"] = "application/json"
    key = entry.api_key()
    if api == "anthropic":
        sent.setdefault("anthropic-version", ANTHROPIC_VERSION)
        if key is not None:
            sent["x-api-key"] = key
    elif key is not None:
        sent["authorization"] = f"Bearer {key}"
    url = _endpoint(entry.url, api)
    if query:
        url = url.copy_with(query=query.encode())
    content = json.dumps({**body, "model": entry.model}, separators=(",", ":")).encode()
    timeout = _timeout(entry.connect_timeout_s, entry.timeout_s)
    return client.build_request("POST", url, content=content, headers=sent, timeout=timeout)


@lru_cache(maxsize=1024)
def _endpoint(base_url: str, api: Api) -> httpx2.URL:
    # Parsed once: parsing a URL is a good part of what building a request costs.
    return httpx2.URL(base_url + _PATHS[api])


@lru_cache(maxsize=1024)
def _timeout(connect_s: float, timeout_s: float) -> httpx2.Timeout:
    return httpx2.Timeout(connect=connect_s, read=timeout_s, write=timeout_s, pool=connect_s)


async def open_first(
    client: httpx2.AsyncClient,
    chain: Sequence[tuple[str, ModelConfig]],
    api: Api,
    body: JSONObject,
    query: str,
    headers: Mapping[str, str],
) -> tuple[list[Attempt], httpx2.Response]:
    """Try the chain's models in order; the attempts so far (the last one answered) and its open response.

    Raises:
        UpstreamFailedError: every model failed (429/5xx, timeout, unreachable).
    """
    attempts: list[Attempt] = []
    for number, (model_id, entry) in enumerate(chain, start=1):
        attempt = Attempt(model_id=model_id, upstream_model=entry.model, attempt=number)
        attempts.append(attempt)
        request = upstream_request(client, entry, api, body, query, headers)
        try:
            response = await client.send(request, stream=True)
        except httpx2.TimeoutException:
            attempt.status, attempt.error_kind = "failed", "timeout"
            attempt.error = f"model {model_id!r} did not answer within {entry.timeout_s:g} s"
        except httpx2.TransportError as exc:
            attempt.status, attempt.error_kind = "failed", "upstream"
            attempt.error = f"model {model_id!r} could not be reached: {type(exc).__name__}"
        else:
            attempt.http_status = response.status_code
            if not retryable(response.status_code):
                return attempts, response
            attempt.status, attempt.error_kind = "failed", "upstream"
            attempt.error = f"model {model_id!r} answered HTTP {response.status_code}{await _said(response)}"
            await response.aclose()
        if number < len(chain):
            logger.info("%s; trying its fallback %r", attempt.error, chain[number][0])
    raise UpstreamFailedError(attempts)


async def _said(response: httpx2.Response) -> str:
    """`: <the upstream's error message>` when its body says one, else empty."""
    raw = bytearray()
    try:
        async for chunk in response.aiter_raw():
            raw.extend(chunk)
            if len(raw) >= MAX_ERROR_BODY_BYTES:
                break
    except httpx2.HTTPError:
        return ""
    try:
        payload = json.loads(bytes(raw[:MAX_ERROR_BODY_BYTES]))
    except (ValueError, RecursionError):
        return ""
    error = _field(payload, "error")
    message = _field(error, "message")
    return f": {message[:300]}" if isinstance(message, str) else ""


def _field(value: object, name: str) -> object:
    return value.get(name) if is_json_object(value) else None  # pyright: ignore[reportArgumentType]
