"""The host's models: one `[models.<id>]` entry (`ModelConfig`), its checks, and what the host knows of it.

Owns the shape of a model entry, the checks across entries (fallbacks name known models of the same
kind, without cycles) and the facts derived from an entry (`ModelFacts`: prices per million tokens and
the context window, taken from the entry or else from the genai-prices table). Does not own calling the
model (`upstream.py`) nor who may call it (`grants.py`).

Invariants: an entry never holds a key, only the name of the host variable that does (`api_key_env`),
read when a call is made (`api_key`). The price table is imported on first use only (it is a 1.6 MB
module that costs most of a second to import), and a model it does not know costs 0 unless priced in
the entry.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from functools import cache
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mcphost.protocol import HostModelInfo, InboundModel

logger = logging.getLogger(__name__)

ModelProvider = Literal["anthropic", "openai", "openai-compatible"]
ModelKind = Literal["chat", "rerank", "embedding"]
MODEL_KINDS: tuple[ModelKind, ...] = get_args(ModelKind)
WireFormat = Literal["anthropic", "openai"]
"""The wire format a provider speaks: Anthropic Messages, or OpenAI (Chat Completions and Responses)."""

MODEL_ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,199}$"
DEFAULT_BASE_URLS: Mapping[ModelProvider, str] = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
}
"""Where each provider is reached when `base_url` is unset, as its own SDK takes it (Anthropic's without
`/v1`, OpenAI's with it); `openai-compatible` has none."""
_TABLE_PROVIDERS: Mapping[ModelProvider, str] = {"anthropic": "anthropic", "openai": "openai"}


class ModelConfig(InboundModel):
    """One `[models.<id>]` entry: a model the host calls for its runs, with the host's own key."""

    provider: ModelProvider
    """`anthropic`, `openai`, or `openai-compatible` (Ollama, vLLM, LM Studio, gateways)."""
    base_url: str | None = Field(default=None, max_length=2000)
    """The API's base URL as the provider's SDK takes it (`https://api.anthropic.com`,
    `https://api.openai.com/v1`, `http://127.0.0.1:11434/v1`); required for `openai-compatible`."""
    api_key_env: str | None = Field(default=None, pattern=ENV_NAME_PATTERN)
    """The host environment variable holding the key, read at each call; never logged, never given to a
    runner. Unset: no key is sent (a local server)."""
    model: str = Field(min_length=1, max_length=200)
    """The upstream model name (`claude-sonnet-4-5`, `gpt-4o-mini`)."""
    kind: ModelKind = "chat"
    fallback: list[str] = Field(default_factory=list[str], max_length=10)
    """Model ids tried in order when this one answers 429 or 5xx, times out or cannot be reached."""
    input_usd_per_mtok: float | None = Field(default=None, ge=0, le=1_000_000)
    """USD per million input tokens; unset: the price table's, when it knows the model (else 0)."""
    output_usd_per_mtok: float | None = Field(default=None, ge=0, le=1_000_000)
    cached_usd_per_mtok: float | None = Field(default=None, ge=0, le=1_000_000)
    """USD per million cached input tokens read."""
    context_window: int | None = Field(default=None, ge=1, le=100_000_000)
    """Input tokens the model takes; unset: the price table's, when it knows the model."""
    tools: bool = True
    """The model supports tool calls (told to runners in their context)."""
    images: bool = False
    """The model takes images (told to runners in their context)."""
    responses: bool | None = None
    """The upstream serves the OpenAI Responses API (`/responses`); unset: true for `openai`, false for
    `openai-compatible` (most local servers and gateways serve Chat Completions only). A Responses call
    (Codex) to a model that does not is translated to Chat Completions (`llm.translate`)."""
    timeout_s: float = Field(default=120.0, gt=0, le=3600)
    """The longest wait for the upstream's answer to begin, and then between two streamed chunks."""
    connect_timeout_s: float = Field(default=10.0, gt=0, le=300)

    @field_validator("base_url")
    @classmethod
    def _url_form(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"base_url {value[:100]!r} must be an http:// or https:// URL")
        return value.rstrip("/") if value is not None else None

    @property
    def wire(self) -> WireFormat:
        return "anthropic" if self.provider == "anthropic" else "openai"

    @property
    def serves_responses(self) -> bool:
        """Responses calls go to the upstream's own `/responses` (else they are translated to chat)."""
        if self.wire != "openai":
            return False
        return self.responses if self.responses is not None else self.provider == "openai"

    @property
    def url(self) -> str:
        """The base URL calls go to (`base_url`, else the provider's default)."""
        if self.base_url is not None:
            return self.base_url
        return DEFAULT_BASE_URLS[self.provider]

    def api_key(self) -> str | None:
        """The key from the host's environment now (None when `api_key_env` is unset or empty)."""
        if self.api_key_env is None:
            return None
        return os.environ.get(self.api_key_env) or None


def check_models(models: Mapping[str, ModelConfig]) -> list[str]:
    """What is wrong with the `[models]` tables together, one line each (empty when nothing is)."""
    problems: list[str] = []
    for model_id, entry in models.items():
        where = f"models.{model_id}"
        if not re.fullmatch(MODEL_ID_PATTERN, model_id):
            problems.append(
                f"{where}: model id {model_id[:64]!r} must be 1-64 lowercase letters, digits and ._- "
                "(starting with a letter or digit)"
            )
        if entry.responses is not None and entry.wire != "openai":
            problems.append(f"{where}.responses: only for providers 'openai' and 'openai-compatible'")
        if entry.provider == "openai-compatible" and entry.base_url is None:
            problems.append(f"{where}.base_url: required for provider 'openai-compatible'")
        for other in entry.fallback:
            if other not in models:
                known = ", ".join(sorted(models)) or "none"
                problems.append(f"{where}.fallback: model {other!r} is not declared; declared: {known}")
            elif models[other].kind != entry.kind:
                problems.append(
                    f"{where}.fallback: model {other!r} is a {models[other].kind} model, not {entry.kind}"
                )
            elif models[other].wire != entry.wire:
                problems.append(
                    f"{where}.fallback: model {other!r} speaks the {models[other].wire} wire format and "
                    f"{model_id!r} the {entry.wire} one; a fallback must speak its model's format (one "
                    "request is sent along the chain)"
                )
            elif models[other].serves_responses != entry.serves_responses:
                problems.append(
                    f"{where}.fallback: model {other!r} and {model_id!r} disagree on serving the Responses "
                    "API (`responses`); set it the same on both (one request is sent along the chain)"
                )
        cycle = _cycle(models, model_id)
        if cycle is not None:
            problems.append(f"{where}.fallback: fallbacks form a cycle: {' -> '.join(cycle)}")
    return problems


def _cycle(models: Mapping[str, ModelConfig], start: str) -> list[str] | None:
    """A fallback path from `start` back to `start`, if there is one."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for nxt in models[node].fallback if node in models else []:
            if nxt == start:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def fallback_chain(models: Mapping[str, ModelConfig], model_id: str) -> list[str]:
    """`model_id` then its fallbacks in order (each once), as calls try them."""
    chain = [model_id]
    for other in models[model_id].fallback:
        if other not in chain:
            chain.append(other)
    return chain


class ModelFacts(BaseModel):
    """What the host knows of one model: its prices (USD per million tokens) and context window."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    input_usd_per_mtok: float
    output_usd_per_mtok: float
    cached_usd_per_mtok: float
    context_window: int | None
    priced_by: Literal["config", "table", "none"]
    """Where the prices came from: the entry, the genai-prices table, or nowhere (costs count as 0)."""

    def cost_usd(self, *, input_tokens: int, output_tokens: int, cached_tokens: int) -> float:
        """The cost of one call. `input_tokens` excludes the cached ones (as both providers report)."""
        return (
            input_tokens * self.input_usd_per_mtok
            + output_tokens * self.output_usd_per_mtok
            + cached_tokens * self.cached_usd_per_mtok
        ) / 1_000_000


def model_facts(entry: ModelConfig) -> ModelFacts:
    """The entry's prices and context window, each from the entry when set, else from the price table."""
    table = _table_facts(entry.provider, entry.model)
    configured = (entry.input_usd_per_mtok, entry.output_usd_per_mtok, entry.cached_usd_per_mtok)
    if all(v is not None for v in configured[:2]):
        priced_by: Literal["config", "table", "none"] = "config"
    elif table is not None:
        priced_by = "table"
    else:
        priced_by = "config" if any(v is not None for v in configured) else "none"
    base = table or (0.0, 0.0, 0.0, None)
    return ModelFacts(
        input_usd_per_mtok=_first(entry.input_usd_per_mtok, base[0]),
        output_usd_per_mtok=_first(entry.output_usd_per_mtok, base[1]),
        cached_usd_per_mtok=_first(entry.cached_usd_per_mtok, base[2]),
        context_window=entry.context_window if entry.context_window is not None else base[3],
        priced_by=priced_by,
    )


def _first(value: float | None, default: float) -> float:
    return default if value is None else value


@cache
def _table_facts(provider: ModelProvider, model: str) -> tuple[float, float, float, int | None] | None:
    """(input, output, cached read) USD per million tokens at the base tier and the context window of
    `model` in the genai-prices table, or None when the table does not know it."""
    table_provider = _TABLE_PROVIDERS.get(provider)
    if table_provider is None:
        return None
    from genai_prices import data_snapshot  # a 1.6 MB table: imported when a model needs it

    try:
        _, info = data_snapshot.get_snapshot().find_provider_model(model, None, table_provider, None)
    except LookupError:
        return None
    prices = info.get_prices(datetime.now(UTC))

    def usd(name: str) -> float:
        price: object = getattr(prices, name, None)
        base = getattr(price, "base", price)  # a TieredPrices' base tier, or a plain Decimal
        return float(base) if isinstance(base, Decimal | int | float) else 0.0

    return usd("input_mtok"), usd("output_mtok"), usd("cache_read_mtok"), info.context_window


def host_model_infos(models: Mapping[str, ModelConfig]) -> dict[str, HostModelInfo]:
    """What a run's context says of each model (its grant picks which): kind, context window, tools,
    images — never its provider, URL or key."""
    return {
        model_id: HostModelInfo(
            model_id=model_id,
            kind=entry.kind,
            context_window=model_facts(entry).context_window,
            tools=entry.tools,
            images=entry.images,
        )
        for model_id, entry in models.items()
    }
