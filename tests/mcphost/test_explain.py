"""Grant explain: the binding and the grant an event would get, from the real binding and grant code.

Each layer of the cut (manifest, agent, event) refuses a target with its own reason and fix; a target
every layer allows is `allowed`; and every answer agrees with the grant `build_grant` makes for a run of
the same event, the one the per-run MCP server enforces.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcphost.bindings import Bindings
from mcphost.cli._explain import render
from mcphost.errors import InvalidArgumentError, RunnerNotFoundError
from mcphost.explain import Explanation, explain, targets_of
from mcphost.grants import ALL_FACTS_TOOLS, action_out_of_scope, build_grant, check, refusal
from mcphost.models import AgentBinding, AgentConfig, AgentEventEnvelope
from mcphost.protocol import STATE_SCOPES, AgentRunnerManifest

RUNNER = "plugin:acme/bot/default"
MANIFEST = AgentRunnerManifest.model_validate(
    {
        "id": RUNNER,
        "name": "bot",
        "permissions": {
            "history": ["page"],
            "state": ["read", "write"],
            "storage": ["plugin"],
            "knowledge": ["list", "retrieve"],
            "tools": ["call"],
        },
    }
)


def agent(agent_id: str, **kw: Any) -> AgentConfig:
    return AgentConfig.model_validate({"id": agent_id, "runner": RUNNER, **kw})


SUPPORT = agent(
    "support",
    match={"bot_id": "support-bot"},
    state={"scopes": ["conversation", "actor"], "write": False},
    storage={"areas": ["plugin", "workspace"]},
    resources={"tools": ["search__*"], "knowledge_bases": ["docs"]},
)
BINDINGS = Bindings(
    [
        SUPPORT,
        agent("sales", match={"bot_id": "sales-bot"}),
        agent("greeter", event_types=["group.member_joined"]),
    ]
)


def event(**kw: Any) -> AgentEventEnvelope:
    base: dict[str, Any] = {
        "event_type": "message.received",
        "conversation": {"conversation_id": "c1", "bot_id": "support-bot"},
        "input": {"text": "hi"},
    }
    return AgentEventEnvelope.model_validate({**base, **kw})


def manifest_of(runner_id: str) -> AgentRunnerManifest:
    if runner_id != RUNNER:
        raise RunnerNotFoundError(f"Runner {runner_id!r} is not registered.")
    return MANIFEST


def explained(*targets: str, **kw: Any) -> Explanation:
    return explain(event(**kw), BINDINGS, manifest_of, list(targets))


def test_the_bound_agent_is_named_with_why_and_each_other_agent_with_why_not() -> None:
    answer = explained()
    assert (answer.agent, answer.runner, answer.binding.binding_id) == ("support", RUNNER, "support")
    assert (
        answer.binding.why == "event_types includes 'message.received' and match.bot_id = 'support-bot' fits"
    )
    why = {v.agent: (v.binds, v.why) for v in answer.binding.agents}
    assert why["sales"] == (False, "match.bot_id = 'sales-bot', and the event's bot_id is 'support-bot'")
    assert why["greeter"] == (
        False,
        "event_types ['group.member_joined'] does not include 'message.received'",
    )


def test_an_event_no_agent_takes_says_why_for_every_agent_and_allows_nothing() -> None:
    answer = explained("tool:run_context", conversation={"conversation_id": "c1"})
    assert (answer.agent, answer.layers, answer.grant) == (None, None, None)
    assert answer.binding.binding_id is None
    assert "No agent is bound to 'message.received'" in answer.binding.why
    assert {v.agent: v.why for v in answer.binding.agents}["support"] == (
        "match.bot_id = 'support-bot', and the event has no bot_id"
    )
    [only] = answer.checks
    assert (only.allowed, only.layer, only.fix) == (False, None, "bind an agent to the event first")


def test_a_target_every_layer_allows_is_allowed() -> None:
    answer = explained(
        "tool:state_get", "tool:search__web", "state:conversation:read", "resource:mcphost://run/context"
    )
    assert [(c.target, c.allowed, c.layer, c.fix) for c in answer.checks] == [
        ("tool:state_get", True, None, None),
        ("tool:search__web", True, None, None),
        ("state:conversation:read", True, None, None),
        ("resource:mcphost://run/context", True, None, None),
    ]


def test_a_tool_the_agent_marks_ask_is_approval_naming_the_key_not_plainly_allowed() -> None:
    asking = agent(
        "asker",
        match={"bot_id": "support-bot"},
        resources={"tools": ["search__*"]},
        approvals={"search__*": "ask", "state_set": "ask"},
    )
    answer = explain(
        event(),
        Bindings([asking]),
        manifest_of,
        ["tool:search__web", "tool:state_set", "tool:state_get", "resource:mcphost://run/context"],
    )
    assert [(c.target, c.allowed, c.approval, c.reason) for c in answer.checks] == [
        (
            "tool:search__web",
            True,
            True,
            "each call waits for a person's decision: [agents.approvals] 'search__*' = \"ask\"",
        ),
        (
            "tool:state_set",
            True,
            True,
            "each call waits for a person's decision: [agents.approvals] 'state_set' = \"ask\"",
        ),
        ("tool:state_get", True, False, None),
        ("resource:mcphost://run/context", True, False, None),
    ]


def test_the_manifest_layer_refuses_what_the_runner_does_not_declare() -> None:
    [events, artifact] = explained("tool:events_page", "resource:mcphost://artifacts/art_1").checks
    assert (events.allowed, events.layer) == (False, "manifest")
    assert events.reason == f"the manifest of runner {RUNNER!r} does not declare permissions.events 'page'"
    assert (
        events.fix
        == f"add 'page' to permissions.events in the manifest of runner {RUNNER!r} (its author's change)"
    )
    assert (artifact.allowed, artifact.layer) == (False, "manifest")
    assert artifact.fix is not None
    assert "permissions.artifacts" in artifact.fix
    [workspace] = explained("storage:workspace").checks
    assert (workspace.layer, workspace.reason) == (
        "manifest",
        f"the manifest of runner {RUNNER!r} does not declare storage area 'workspace' in permissions.storage",
    )


def test_the_agent_layer_refuses_what_its_config_leaves_out_and_names_the_key() -> None:
    write, subject, host_tool = explained(
        "tool:state_set", "state:subject:read", "tool:github__issues"
    ).checks
    assert (write.layer, write.reason) == ("agent", "state.write is false for agent 'support'")
    assert write.fix == "set state.write = true in the [[agents]] entry of 'support'"
    assert (subject.layer, subject.fix) == (
        "agent",
        "add 'subject' to state.scopes in the [[agents]] entry of 'support'",
    )
    assert host_tool.layer == "agent"
    assert host_tool.fix == (
        "add 'github__issues' (or 'github__*') to resources.tools in the [[agents]] entry of 'support'"
    )


def test_the_event_layer_refuses_a_scope_whose_id_the_event_lacks() -> None:
    [with_actor] = explained("state:actor:read", actor={"actor_id": "u1"}).checks
    assert with_actor.allowed
    [without] = explained("state:actor:read").checks
    assert (without.allowed, without.layer) == (False, "event")
    assert without.reason == "the event carries no actor.actor_id, so it has no 'actor' state"
    assert without.fix == "send the event with actor.actor_id set"


def test_layers_and_grant_are_those_of_a_real_run_of_the_event() -> None:
    answer = explained(actor={"actor_id": "u1"})
    assert answer.layers is not None
    assert answer.grant is not None
    assert answer.layers.manifest == {
        "runner": RUNNER,
        "permissions": MANIFEST.permissions.model_dump(mode="json"),
    }
    assert answer.layers.agent["state"] == {"scopes": ["conversation", "actor"], "write": False}
    assert answer.layers.event["actor_id"] == "u1"
    assert answer.layers.event["state_scopes"] == ["conversation", "actor", "runner", "binding"]
    grant = build_grant(
        run_id="run_1",
        event=event(actor={"actor_id": "u1"}),
        binding=AgentBinding(binding_id="support", agent=SUPPORT),
        manifest=MANIFEST,
        token_hash="x",
        deadline_at=1.0,
    )
    assert answer.grant.tools == sorted(grant.tools)
    assert answer.grant.state_read == sorted(grant.state_read)
    assert answer.grant.state_write == [] == sorted(grant.state_write)
    assert answer.grant.storage_areas == ["plugin"]
    assert answer.grant.knowledge_bases == ["docs"]


def test_every_check_agrees_with_the_grant_a_run_would_enforce() -> None:
    ev = event(actor={"actor_id": "u1"})
    grant = build_grant(
        run_id="run_1",
        event=ev,
        binding=AgentBinding(binding_id="support", agent=SUPPORT),
        manifest=MANIFEST,
        token_hash="x",
        deadline_at=1.0,
    )
    targets = [f"tool:{t}" for t in sorted(ALL_FACTS_TOOLS)]
    targets += [f"state:{s}:{m}" for s in STATE_SCOPES for m in ("read", "write")]
    answer = explain(ev, BINDINGS, manifest_of, targets)
    for found in answer.checks:
        kind, _, rest = found.target.partition(":")
        if kind == "tool":
            assert found.allowed == (rest in grant.tools), found
        else:
            scope, _, mode = rest.partition(":")
            granted = grant.state_write if mode == "write" else grant.state_read
            assert found.allowed == (scope in granted and grant.state_scope_id(scope) is not None), found
        assert found.allowed == (found.layer is None), found
        assert found.allowed or (found.reason and found.fix), found


@pytest.mark.parametrize(
    "target",
    [
        "tool:",
        "tool:no_such_tool",
        "state:planet:read",
        "state:actor",
        "resource:https://x",
        "nothing",
        "storage:x",
    ],
)
def test_a_malformed_target_is_an_invalid_argument_naming_it(target: str) -> None:
    with pytest.raises(InvalidArgumentError):
        explained(target)
    with pytest.raises(InvalidArgumentError):  # the same whether or not an agent binds
        explained(target, conversation={"conversation_id": "c1"})


def test_a_bound_runner_that_is_not_registered_is_runner_not_found() -> None:
    bindings = Bindings([agent("x").model_copy(update={"runner": "plugin:acme/gone/default"})])
    with pytest.raises(RunnerNotFoundError):
        explain(event(), bindings, manifest_of, [])


def test_state_scopes_are_checked_for_reading_and_writing() -> None:
    assert targets_of(["a"], ["mcphost://run/context"], ["actor"]) == [
        "tool:a",
        "resource:mcphost://run/context",
        "state:actor:read",
        "state:actor:write",
    ]


def test_a_refusal_names_the_layer_and_the_fix_and_nothing_of_other_agents() -> None:
    grant = build_grant(
        run_id="run_1",
        event=event(),
        binding=AgentBinding(binding_id="support", agent=SUPPORT),
        manifest=MANIFEST,
        token_hash="x",
        deadline_at=1.0,
    )
    message, details = refusal(grant, "tool:state_set", "call 'state_set'")
    assert message == (
        "This run may not call 'state_set': state.write is false for agent 'support' (agent layer). "
        "To allow it, set state.write = true in the [[agents]] entry of 'support'."
    )
    assert details == {
        "target": "tool:state_set",
        "layer": "agent",
        "fix": check(grant, "tool:state_set").fix,
    }
    message, _ = refusal(grant, "tool:github__issues", "call 'github__issues'")
    assert "search__*" not in message  # the agent's other globs are not the caller's business
    assert "sales" not in message


def test_a_platform_action_is_granted_only_when_manifest_and_agent_both_name_it() -> None:
    manifest = MANIFEST.model_copy(
        update={
            "permissions": MANIFEST.permissions.model_copy(
                update={"platform_api": ["message.edit", "refund"]}
            )
        }
    )
    actor = agent("actor", actions={"allow": ["message.edit", "deploy"]})
    answer = explain(
        event(),
        Bindings([actor]),
        lambda _: manifest,
        ["action:message.edit", "action:deploy", "action:refund"],
    )
    assert answer.layers is not None
    assert answer.grant is not None
    assert answer.layers.agent["actions"] == {"allow": ["message.edit", "deploy"]}
    assert answer.grant.actions == ["message.edit"]
    edit, deploy, refund = answer.checks
    assert edit.allowed
    assert (deploy.layer, deploy.fix) == (
        "manifest",
        f"add 'deploy' to permissions.platform_api in the manifest of runner {RUNNER!r} (its author's change)",
    )
    assert (refund.layer, refund.fix) == (
        "agent",
        "add 'refund' to actions.allow in the [[agents]] entry of 'actor'",
    )


def test_an_action_target_is_in_scope_only_when_every_scope_id_it_names_is_the_events() -> None:
    binding = AgentBinding(binding_id="support", agent=SUPPORT)
    grant = build_grant(
        run_id="run_x",
        event=event(actor={"actor_id": "u1"}),
        binding=binding,
        manifest=MANIFEST,
        token_hash="",
        deadline_at=0.0,
    )
    assert action_out_of_scope(grant, None) is None
    assert action_out_of_scope(grant, {"conversation_id": "c1", "actor_id": "u1", "order": 7}) is None
    assert action_out_of_scope(grant, {"message_id": "m1"}) is None  # the journal looks the message up
    assert action_out_of_scope(grant, {"conversation_id": "c2"}) == (
        "its target names conversation_id 'c2', and the event's conversation_id is 'c1'"
    )
    assert action_out_of_scope(grant, {"workspace_id": "w"}) == (
        "its target names workspace_id 'w', and the event carries no workspace_id"
    )
    assert action_out_of_scope(grant, {"bot_id": ["support-bot"]}) is not None
    assert action_out_of_scope(grant, "c1") is not None


def test_explain_shows_the_models_layer_and_the_key_that_adds_a_model() -> None:
    manifest = MANIFEST.model_copy(
        update={"permissions": MANIFEST.permissions.model_copy(update={"models": ["invoke"]})}
    )
    bindings = Bindings([agent("support", resources={"models": ["sonnet"]})])
    answer = explain(
        event(), bindings, lambda _: manifest, targets_of([], [], [], ["sonnet", "opus", "sonnet:stream"])
    )
    assert answer.layers is not None
    assert answer.layers.manifest["permissions"]["models"] == ["invoke"]  # type: ignore[index]  # JSON
    assert answer.layers.agent["resources"]["models"] == ["sonnet"]  # type: ignore[index]  # JSON
    assert answer.grant is not None
    assert (answer.grant.models, answer.grant.model_calls) == (["sonnet"], ["invoke"])
    allowed, opus, stream = answer.checks
    assert allowed.allowed
    assert (opus.layer, stream.layer) == ("agent", "manifest")
    assert (
        opus.fix
        == "add 'opus' to resources.models in the [[agents]] entry of 'support' (a [models.opus] table)"
    )
    assert "  models           sonnet (invoke)" in render(answer)
