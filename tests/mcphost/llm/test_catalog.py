"""`[models.<id>]` in the config: checks across entries, agents' `resources.models`, prices and windows."""

from __future__ import annotations

from typing import Any

import pytest

from mcphost.config import settings_from_mapping
from mcphost.errors import ConfigError
from mcphost.llm import ModelConfig, fallback_chain, host_model_infos, model_facts


def load(models: dict[str, Any], **extra: Any) -> Any:
    return settings_from_mapping({"models": models, **extra}, source="m.toml", environ={})


def test_a_fallback_must_name_a_declared_model_of_the_same_kind_without_cycles() -> None:
    with pytest.raises(ConfigError, match=r"models.a.fallback: model 'nope' is not declared; declared: a"):
        load({"a": {"provider": "openai", "model": "x", "fallback": ["nope"]}})
    with pytest.raises(ConfigError, match=r"fallbacks form a cycle: a -> b -> a"):
        load(
            {
                "a": {"provider": "openai", "model": "x", "fallback": ["b"]},
                "b": {"provider": "openai", "model": "y", "fallback": ["a"]},
            }
        )
    with pytest.raises(ConfigError, match=r"model 'r' is a rerank model, not chat"):
        load(
            {
                "a": {"provider": "openai", "model": "x", "fallback": ["r"]},
                "r": {"provider": "openai", "model": "y", "kind": "rerank"},
            }
        )
    with pytest.raises(ConfigError, match=r"speaks the anthropic wire format"):
        load(
            {
                "a": {"provider": "openai", "model": "x", "fallback": ["c"]},
                "c": {"provider": "anthropic", "model": "claude-sonnet-4-5"},
            }
        )


def test_an_entry_is_checked_field_by_field() -> None:
    with pytest.raises(ConfigError, match=r"models.l.base_url: required for provider 'openai-compatible'"):
        load({"l": {"provider": "openai-compatible", "model": "llama3"}})
    with pytest.raises(ConfigError, match=r"models.k.api_key: unknown key"):
        load({"k": {"provider": "openai", "model": "x", "api_key": "sk-inline"}})
    with pytest.raises(ConfigError, match=r"model id 'Big Model' must be"):
        load({"Big Model": {"provider": "openai", "model": "x"}})
    with pytest.raises(ConfigError, match=r"must be an http:// or https:// URL"):
        load({"f": {"provider": "openai", "model": "x", "base_url": "file:///etc"}})


def test_an_agent_may_name_only_declared_models() -> None:
    def agents(models: list[str]) -> list[dict[str, Any]]:
        return [{"id": "a", "runner": "plugin:mcphost/echo/default", "resources": {"models": models}}]

    with pytest.raises(ConfigError, match=r"resources.models: model 'gone' is not declared; declared: m"):
        load({"m": {"provider": "openai", "model": "x"}}, agents=agents(["gone"]))
    settings = load({"m": {"provider": "openai", "model": "x"}}, agents=agents(["m"]))
    assert settings.agents[0].resources.models == ["m"]


def test_prices_and_context_window_come_from_the_entry_else_the_price_table() -> None:
    known = model_facts(ModelConfig(provider="anthropic", model="claude-sonnet-4-5"))
    assert (known.input_usd_per_mtok, known.output_usd_per_mtok, known.cached_usd_per_mtok) == (
        3.0,
        15.0,
        0.3,
    )
    assert known.context_window == 200_000
    assert known.priced_by == "table"
    own = model_facts(
        ModelConfig(
            provider="anthropic", model="claude-sonnet-4-5", input_usd_per_mtok=1, output_usd_per_mtok=2
        )
    )
    assert (own.input_usd_per_mtok, own.output_usd_per_mtok, own.cached_usd_per_mtok, own.priced_by) == (
        1.0,
        2.0,
        0.3,
        "config",
    )
    unknown = model_facts(
        ModelConfig(provider="openai-compatible", base_url="http://127.0.0.1:1/v1", model="llama3")
    )
    assert (unknown.input_usd_per_mtok, unknown.context_window, unknown.priced_by) == (0.0, None, "none")
    assert unknown.cost_usd(input_tokens=10**6, output_tokens=10**6, cached_tokens=0) == 0.0
    assert known.cost_usd(input_tokens=10**6, output_tokens=10**6, cached_tokens=10**6) == pytest.approx(18.3)


def test_the_chain_and_the_runner_view_of_a_model() -> None:
    settings = load(
        {
            "a": {"provider": "openai", "model": "gpt-4o-mini", "fallback": ["b", "c"], "images": True},
            "b": {"provider": "openai", "model": "x", "fallback": ["c"]},
            "c": {"provider": "openai", "model": "y", "api_key_env": "SECRET_KEY"},
        }
    )
    assert fallback_chain(settings.models, "a") == ["a", "b", "c"]
    info = host_model_infos(settings.models)["a"]
    assert (info.kind, info.context_window, info.tools, info.images) == ("chat", 128_000, True, True)
    assert "SECRET_KEY" not in str(host_model_infos(settings.models))
