"""The context builder's `runtime.static_refs`: content hashes that stay equal while the agent and its
grant do, and change with the instructions, the granted tools or the resources."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from mcphost.context import StaticParts, build_context, with_token
from mcphost.errors import InvalidArgumentError
from mcphost.facts import granted_tools
from mcphost.facts._tools import FACTS_TOOLS
from mcphost.grants import build_grant, mint_token
from mcphost.models import AgentBinding, AgentConfig, AgentEventEnvelope, new_id
from mcphost.orchestrator._admission import ContextBuilder
from mcphost.protocol import AgentRunContext, AgentRunnerManifest

RUNNER = "plugin:acme/bot/default"
PERMISSIONS: dict[str, Any] = {"history": ["page", "search"], "state": ["read"], "knowledge": ["retrieve"]}


def _context(
    run_id: str,
    *,
    text: str = "hi",
    conversation: str = "c1",
    prompt: str = "Be brief.",
    permissions: dict[str, Any] | None = None,
    knowledge: tuple[str, str] = ("Docs", "Product docs"),
) -> AgentRunContext:
    manifest = AgentRunnerManifest.model_validate(
        {"id": RUNNER, "name": "bot", "permissions": PERMISSIONS if permissions is None else permissions}
    )
    agent = AgentConfig.model_validate(
        {"id": "a", "runner": RUNNER, "prompt": prompt, "resources": {"knowledge_bases": ["kb"]}}
    )
    binding = AgentBinding(binding_id="a", agent=agent)
    event = AgentEventEnvelope.model_validate(
        {
            "event_type": "message.received",
            "conversation": {"conversation_id": conversation},
            "actor": {"actor_id": "u1"},
            "input": {"text": text},
        }
    )
    _, token_hash = mint_token()
    grant = build_grant(
        run_id=run_id,
        event=event,
        binding=binding,
        manifest=manifest,
        token_hash=token_hash,
        deadline_at=1e10,
    )
    return build_context(
        run_id=run_id,
        event=event,
        binding=binding,
        grant=grant,
        manifest=manifest,
        public_url="http://127.0.0.1:8765",
        latest_cursor=None,
        has_history_before=False,
        state={},
        knowledge_bases={"kb": knowledge},
        tools=granted_tools(grant),
    )


def _hashes(ctx: AgentRunContext) -> dict[str, str]:
    return {name: ref.sha256 for name, ref in ctx.runtime.static_refs.items()}


def _canonical_sha256(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_two_runs_of_the_same_agent_have_the_same_static_refs() -> None:
    first = _context("run_1", text="hello", conversation="c1")
    second = _context("run_2", text="something else", conversation="c2")
    assert first.runtime.static_refs == second.runtime.static_refs
    refs = first.runtime.static_refs
    assert {name: (ref.ref, ref.version) for name, ref in refs.items()} == {
        "instructions": ("prompts/instructions", "1"),
        "tools": ("tools/list", "1"),
        "resources": ("context/resources", "1"),
    }


def test_the_hashes_follow_the_documented_rule() -> None:
    ctx = _context("run_1")
    tools = [
        FACTS_TOOLS[name].tool.model_dump(mode="json", by_alias=True, exclude_none=True)
        for name in (
            "run_context",
            "history_page",
            "history_search",
            "state_get",
            "state_list",
            "knowledge_retrieve",
        )
    ]
    assert _hashes(ctx) == {
        "instructions": hashlib.sha256(b"Be brief.").hexdigest(),
        "tools": _canonical_sha256(tools),
        "resources": _canonical_sha256(ctx.resources.model_dump(mode="json")),
    }


def test_new_instructions_change_only_the_instructions_hash() -> None:
    before, after = _hashes(_context("run_1")), _hashes(_context("run_2", prompt="Be thorough."))
    assert after["instructions"] != before["instructions"]
    assert (after["tools"], after["resources"]) == (before["tools"], before["resources"])


def test_a_different_tool_grant_changes_the_tools_hash() -> None:
    narrower = {"history": ["page"], "state": ["read"], "knowledge": ["retrieve"]}
    before, after = _hashes(_context("run_1")), _hashes(_context("run_2", permissions=narrower))
    assert after["tools"] != before["tools"]
    assert after["instructions"] == before["instructions"]


def test_a_renamed_knowledge_base_changes_the_resources_hash() -> None:
    before = _hashes(_context("run_1"))
    after = _hashes(_context("run_2", knowledge=("Handbook", "Product docs")))
    assert after["resources"] != before["resources"]
    assert (after["instructions"], after["tools"]) == (before["instructions"], before["tools"])


def test_the_context_is_built_without_the_token_and_with_token_adds_it_for_the_runner() -> None:
    ctx = _context("run_1")
    assert ctx.context.mcp is not None
    assert (ctx.context.mcp.headers, ctx.context.mcp.bridge.env) == ({}, {})
    full = with_token(ctx, "t0ken")
    assert full.context.mcp is not None
    assert full.context.mcp.headers == {"Authorization": "Bearer t0ken"}
    assert full.context.mcp.bridge.env == {"MCPHOST_RUN_TOKEN": "t0ken"}
    assert full.runtime.static_refs == ctx.runtime.static_refs


def _shape(
    *, prompt: str = "Be brief.", areas: tuple[str, ...] = (), config: dict[str, Any] | None = None
) -> tuple[AgentBinding, AgentRunnerManifest]:
    manifest = AgentRunnerManifest.model_validate(
        {
            "id": RUNNER,
            "name": "bot",
            "permissions": {**PERMISSIONS, "storage": ["plugin", "workspace"]},
            "config_schema": [{"name": "tone", "type": "select", "options": ["dry", "warm"]}],
        }
    )
    agent = AgentConfig.model_validate(
        {
            "id": "a",
            "runner": RUNNER,
            "prompt": prompt,
            "config": config or {},
            "storage": {"areas": list(areas)},
        }
    )
    return AgentBinding(binding_id="a", agent=agent), manifest


def _parts(builder: ContextBuilder, binding: AgentBinding, manifest: AgentRunnerManifest) -> StaticParts:
    event = AgentEventEnvelope.model_validate({"event_type": "message.received", "input": {"text": "hi"}})
    grant = build_grant(
        run_id=new_id("run"),
        event=event,
        binding=binding,
        manifest=manifest,
        token_hash=mint_token()[1],
        deadline_at=1e10,
    )
    tools, tools_sha256 = builder.tools_of(grant)
    return builder.static_of(binding, manifest, grant, tools, tools_sha256)


def _builder() -> ContextBuilder:
    return ContextBuilder(
        public_url="http://127.0.0.1:8765",
        knowledge_bases=None,
        skills=None,
        models=None,
        tool_list=granted_tools,
        revise_context=None,
        warm=None,
    )


def test_the_static_parts_are_built_once_per_agent_and_grant_shape_and_anew_for_a_reloaded_agent() -> None:
    builder = _builder()
    binding, manifest = _shape()
    first = _parts(builder, binding, manifest)
    assert _parts(builder, binding, manifest) is first  # another run of the same agent: kept
    other_areas = _parts(builder, _shape(areas=("plugin",))[0], manifest)
    assert other_areas.resources.storage.areas == ["plugin"] != first.resources.storage.areas
    # A reloaded config is new objects, even for the same agent id: its new prompt is hashed.
    reloaded = _parts(builder, _shape(prompt="Be thorough.")[0], manifest)
    assert reloaded is not first
    assert reloaded.static_refs["instructions"].sha256 == hashlib.sha256(b"Be thorough.").hexdigest()
    assert first.static_refs["instructions"].sha256 == hashlib.sha256(b"Be brief.").hexdigest()


def test_a_config_the_runner_refuses_is_refused_at_every_run() -> None:
    builder = _builder()
    binding, manifest = _shape(config={"tone": "loud"})
    for _ in range(2):
        with pytest.raises(InvalidArgumentError, match="is not one of"):
            _parts(builder, binding, manifest)


def test_a_context_built_from_kept_static_parts_is_the_context_built_without_them() -> None:
    builder = _builder()
    binding, manifest = _shape(config={"tone": "dry"})
    event = AgentEventEnvelope.model_validate({"event_type": "message.received", "input": {"text": "hi"}})
    grant = build_grant(
        run_id="run_1", event=event, binding=binding, manifest=manifest, token_hash="h", deadline_at=1e10
    )
    tools, tools_sha256 = builder.tools_of(grant)
    static = builder.static_of(binding, manifest, grant, tools, tools_sha256)
    common: dict[str, Any] = {
        "run_id": "run_1",
        "event": event,
        "binding": binding,
        "grant": grant,
        "manifest": manifest,
        "public_url": "http://127.0.0.1:8765",
        "latest_cursor": None,
        "has_history_before": False,
        "state": {},
        "tools": tools,
    }
    assert build_context(**common, static=static) == build_context(**common)
