"""The context builder's `runtime.static_refs`: content hashes that stay equal while the agent and its
grant do, and change with the instructions, the granted tools or the resources."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from mcphost.context import build_context, with_token
from mcphost.facts import granted_tools
from mcphost.facts._tools import FACTS_TOOLS
from mcphost.grants import build_grant, mint_token
from mcphost.models import AgentBinding, AgentConfig, AgentEventEnvelope
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
