"""The three-layer cut: manifest ∩ agent policy ∩ event scope."""

from __future__ import annotations

from mcphost.grants import build_grant, check, hash_token, mint_token, token_matches
from mcphost.models import AgentBinding, AgentConfig, AgentEventEnvelope, RunGrant
from mcphost.protocol import AgentRunnerManifest


def test_the_grant_is_the_intersection_of_manifest_agent_and_event() -> None:
    manifest = AgentRunnerManifest.model_validate(
        {
            "id": "plugin:acme/bot/default",
            "name": "bot",
            "permissions": {
                "history": ["page"],
                "state": ["read", "write"],
                "storage": ["plugin"],
                "knowledge": ["retrieve"],
                "tools": ["call"],
            },
        }
    )
    agent = AgentConfig.model_validate(
        {
            "id": "a",
            "runner": "plugin:acme/bot/default",
            "state": {"scopes": ["conversation", "actor"], "write": False},
            "storage": {"areas": ["plugin", "workspace"]},
            "resources": {"tools": ["search__*"]},
            "budget": {"calls": 50, "bytes": 1_000_000},
        }
    )
    event = AgentEventEnvelope.model_validate(
        {
            "event_type": "message.received",
            "conversation": {"conversation_id": "c1"},
            "actor": {"actor_id": "u1"},
        }
    )
    token, token_hash = mint_token()
    grant = build_grant(
        run_id="run_1",
        event=event,
        binding=AgentBinding(binding_id="a", agent=agent),
        manifest=manifest,
        token_hash=token_hash,
        deadline_at=100.0,
    )
    assert grant.tools == {"run_context", "history_page", "state_get", "state_list", *_storage()}
    assert grant.state_read == {"conversation", "actor"}
    assert grant.state_write == frozenset()  # the agent said write = false
    assert grant.storage_areas == {"plugin"}  # workspace is not in the manifest
    assert grant.knowledge_bases == frozenset()  # the agent has none
    assert grant.host_tool_globs == ("search__*",)
    assert (grant.call_budget, grant.byte_budget) == (50, 1_000_000)
    assert grant.state_scope_id("conversation") == ("plugin:acme/bot/default", "a", "c1", "")
    assert grant.state_scope_id("subject") is None
    assert token_matches(token, grant.token_hash)
    assert not token_matches(token + "x", grant.token_hash)
    assert len(token) >= 43
    assert hash_token(token) == token_hash


def _storage() -> set[str]:
    return {"storage_get", "storage_set", "storage_delete", "storage_list"}


def _model_grant(declared: list[str], granted: list[str]) -> RunGrant:
    manifest = AgentRunnerManifest.model_validate(
        {"id": "plugin:acme/bot/default", "name": "bot", "permissions": {"models": declared}}
    )
    agent = AgentConfig.model_validate(
        {"id": "a", "runner": "plugin:acme/bot/default", "resources": {"models": granted}}
    )
    event = AgentEventEnvelope.model_validate({"event_type": "message.received", "input": {"text": "hi"}})
    return build_grant(
        run_id="run_1",
        event=event,
        binding=AgentBinding(binding_id="a", agent=agent),
        manifest=manifest,
        token_hash="x",
        deadline_at=0.0,
    )


def test_host_models_are_the_agent_s_models_when_the_manifest_declares_model_calls() -> None:
    grant = _model_grant(["invoke", "stream"], ["sonnet"])
    assert (grant.models, grant.model_calls) == (frozenset({"sonnet"}), frozenset({"invoke", "stream"}))
    assert check(grant, "model:sonnet").allowed
    assert check(grant, "model:sonnet:stream").allowed
    rerank = check(grant, "model:sonnet:rerank")
    assert (rerank.allowed, rerank.layer) == (False, "manifest")
    assert "add 'rerank' to permissions.models" in (rerank.fix or "")
    other = check(grant, "model:opus:invoke")
    assert (other.allowed, other.layer) == (False, "agent")
    assert "add 'opus' to resources.models" in (other.fix or "")
    none = _model_grant([], ["sonnet"])
    assert none.models == frozenset()
    assert check(none, "model:sonnet").layer == "manifest"
    assert _model_grant(["invoke"], []).model_calls == frozenset()


def test_the_model_tools_follow_the_model_calls_and_explain_names_the_layer_that_removed_them() -> None:
    both = _model_grant(["invoke", "stream", "rerank"], ["sonnet"])
    assert {"models_list", "models_invoke", "models_rerank"} <= both.tools
    rerank_only = _model_grant(["rerank"], ["sonnet"])
    assert {"models_list", "models_rerank"} <= rerank_only.tools
    assert "models_invoke" not in rerank_only.tools
    invoke = check(rerank_only, "tool:models_invoke")
    assert (invoke.allowed, invoke.layer) == (False, "manifest")
    assert "'invoke', 'stream'" in (invoke.reason or "")
    no_models = _model_grant(["invoke"], [])
    assert not {t for t in no_models.tools if t.startswith("models_")}
    listed = check(no_models, "tool:models_list")
    assert (listed.allowed, listed.layer) == (False, "agent")
    assert "resources.models" in (listed.fix or "")


def test_grants_of_one_agent_share_its_cut_and_keep_each_event_s_own_scope() -> None:
    manifest = AgentRunnerManifest.model_validate(
        {"id": "plugin:acme/bot/default", "name": "bot", "permissions": {"state": ["read", "write"]}}
    )
    agent = AgentConfig.model_validate({"id": "a", "runner": "plugin:acme/bot/default"})
    binding = AgentBinding(binding_id="a", agent=agent)

    def grant_of(event: dict[str, object], run_id: str, deadline_at: float) -> RunGrant:
        return build_grant(
            run_id=run_id,
            event=AgentEventEnvelope.model_validate({"event_type": "message.received", **event}),
            binding=binding,
            manifest=manifest,
            token_hash=f"hash-{run_id}",
            deadline_at=deadline_at,
        )

    full = grant_of(
        {
            "conversation": {"conversation_id": "c1", "thread_id": "t1", "bot_id": "b", "workspace_id": "w"},
            "actor": {"actor_id": "u1"},
            "subject": {"subject_type": "ticket", "subject_id": "s1"},
            "options": {"record": True},
        },
        "run_1",
        5.0,
    )
    bare = grant_of({}, "run_2", 6.0)
    assert (full.run_id, full.token_hash, full.deadline_at, full.record) == ("run_1", "hash-run_1", 5.0, True)
    assert (full.conversation_id, full.thread_id, full.bot_id, full.workspace_id) == ("c1", "t1", "b", "w")
    assert (full.actor_id, full.subject_type, full.subject_id) == ("u1", "ticket", "s1")
    assert (bare.run_id, bare.token_hash, bare.deadline_at, bare.record) == (
        "run_2",
        "hash-run_2",
        6.0,
        False,
    )
    assert (bare.conversation_id, bare.thread_id, bare.bot_id, bare.workspace_id) == (None,) * 4
    assert (bare.actor_id, bare.subject_type, bare.subject_id) == (None,) * 3
    assert full.tools == bare.tools == {"run_context", "state_get", "state_list", "state_set", "state_delete"}
    assert full.layers is bare.layers  # the agent's cut, built once
    assert bare.state_scope_id("conversation") is None
    assert full.state_scope_id("conversation") == ("plugin:acme/bot/default", "a", "c1", "t1")

    # Another agent object (a reloaded config) gets a cut of its own, never the first one's.
    read_only = AgentConfig.model_validate(
        {"id": "a", "runner": "plugin:acme/bot/default", "state": {"write": False}}
    )
    other = build_grant(
        run_id="run_3",
        event=AgentEventEnvelope.model_validate({"event_type": "message.received"}),
        binding=AgentBinding(binding_id="a", agent=read_only),
        manifest=manifest,
        token_hash="h",
        deadline_at=0.0,
    )
    assert other.tools == {"run_context", "state_get", "state_list"}
    assert other.state_write == frozenset()
