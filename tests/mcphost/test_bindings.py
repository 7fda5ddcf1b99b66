"""Bindings: exactly one agent per event, overlaps refused at load."""

from __future__ import annotations

import re
from typing import Any

import pytest

from mcphost.bindings import Bindings
from mcphost.errors import ConfigError, NoBindingError
from mcphost.models import AgentConfig, AgentEventEnvelope


def agent(agent_id: str, **kw: Any) -> AgentConfig:
    return AgentConfig.model_validate({"id": agent_id, "runner": "plugin:t/t/t", **kw})


def event(event_type: str = "message.received", **kw: Any) -> AgentEventEnvelope:
    return AgentEventEnvelope.model_validate({"event_type": event_type, **kw})


def test_an_event_resolves_to_the_one_matching_agent() -> None:
    bindings = Bindings(
        [
            agent("support", match={"bot_id": "support-bot"}),
            agent("sales", match={"bot_id": ["sales-bot", "sales-2"]}),
            agent("greeter", event_types=["group.member_joined"]),
        ]
    )
    conv = {"conversation_id": "c1", "bot_id": "sales-2"}
    assert bindings.resolve(event(conversation=conv)).binding_id == "sales"
    assert bindings.resolve(event("group.member_joined", conversation=conv)).binding_id == "greeter"


def test_no_agent_names_the_event_type_and_scope() -> None:
    bindings = Bindings([agent("support", match={"bot_id": "support-bot"})])
    with pytest.raises(NoBindingError) as info:
        bindings.resolve(event(conversation={"conversation_id": "c1", "bot_id": "other"}))
    assert "'message.received'" in str(info.value)
    assert "bot_id='other'" in str(info.value)


def test_overlapping_agents_are_refused_at_load() -> None:
    with pytest.raises(ConfigError, match=r"agents 'a' and 'b' both take message\.received"):
        Bindings([agent("a"), agent("b", match={"conversation_id": "c1"})])
    with pytest.raises(ConfigError, match="both take"):
        Bindings([agent("a", event_types=["*"]), agent("b", event_types=["api.invoked"])])


def test_disjoint_match_values_do_not_overlap() -> None:
    Bindings([agent("a", match={"bot_id": "x"}), agent("b", match={"bot_id": ["y", "z"]})])


def test_an_explicit_agent_must_be_known_and_bound() -> None:
    bindings = Bindings([agent("a", match={"bot_id": "x"}), agent("b", event_types=["api.invoked"])])
    with pytest.raises(NoBindingError, match=re.escape("Agent 'nope' is not configured; known agents: a, b")):
        bindings.resolve(event(agent_id="nope"))
    with pytest.raises(NoBindingError, match=re.escape("Agent 'b' is not bound to 'message.received'")):
        bindings.resolve(event(agent_id="b", conversation={"conversation_id": "c", "bot_id": "x"}))
    assert bindings.resolve(event("api.invoked", agent_id="b")).binding_id == "b"


def test_every_match_key_reads_the_event_s_own_value() -> None:
    full = event(
        source="webui",
        conversation={"conversation_id": "c1", "thread_id": "t1", "bot_id": "b1", "workspace_id": "w1"},
        actor={"actor_id": "u1", "actor_type": "bot"},
        subject={"subject_type": "ticket", "subject_id": "s1"},
    )
    expected = {
        "conversation_id": "c1",
        "thread_id": "t1",
        "bot_id": "b1",
        "workspace_id": "w1",
        "actor_id": "u1",
        "actor_type": "bot",
        "subject_type": "ticket",
        "subject_id": "s1",
        "source": "webui",
    }
    assert {key: full.scope_value(key) for key in expected} == expected
    bare = event()
    assert {key: bare.scope_value(key) for key in expected if key != "source"} == dict.fromkeys(
        set(expected) - {"source"}
    )
    assert bare.scope_value("no_such_key") is None
