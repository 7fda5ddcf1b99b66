"""Event → exactly one agent binding, or a clear error.

Owns the matching rule: an agent takes an event when the event's type is one of its `event_types` (or it
lists `"*"`) and every key of its `match` table equals the event's value for that key (a list means any
of). Invariant: at most one agent can match any event. Overlaps that can be seen from the config alone
are refused when the bindings are built (`ConfigError`), so `AmbiguousBindingError` at resolve time only
guards against a config that was built around this check.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from mcphost.errors import AmbiguousBindingError, ConfigError, NoBindingError
from mcphost.models import AgentBinding, AgentConfig, AgentEventEnvelope


def _values(value: str | list[str]) -> frozenset[str]:
    return frozenset([value]) if isinstance(value, str) else frozenset(value)


def _types_overlap(a: AgentConfig, b: AgentConfig) -> set[str]:
    ta, tb = set(a.event_types), set(b.event_types)
    if "*" in ta:
        return tb
    if "*" in tb:
        return ta
    return ta & tb


def _matches_overlap(a: AgentConfig, b: AgentConfig) -> bool:
    """True when some event could satisfy both match tables: every shared key has a shared value."""
    return all(_values(a.match[key]) & _values(b.match[key]) for key in set(a.match) & set(b.match))


class Bindings:
    """The agents of one configuration, checked for overlaps, resolving events to bindings."""

    def __init__(self, agents: Sequence[AgentConfig], *, source: str = "mcphost.toml") -> None:
        self._agents = list(agents)
        for a, b in combinations(self._agents, 2):
            shared = _types_overlap(a, b)
            if shared and _matches_overlap(a, b):
                raise ConfigError(
                    f"{source}: agents {a.id!r} and {b.id!r} both take {', '.join(sorted(shared))} events "
                    "with overlapping match filters, so one event could start two agents. Give them "
                    "disjoint event_types or a match key (bot_id, conversation_id, ...) with different values.",
                    details={"agents": [a.id, b.id], "event_types": sorted(shared)},
                )

    @property
    def agents(self) -> list[AgentConfig]:
        return list(self._agents)

    @staticmethod
    def matches(agent: AgentConfig, event: AgentEventEnvelope) -> bool:
        return Bindings.mismatch(agent, event) is None

    @staticmethod
    def mismatch(agent: AgentConfig, event: AgentEventEnvelope) -> str | None:
        """Why `agent` does not take `event` (its event_types, else the first `match` key that fails),
        or None when it does. `matches` and `resolve` decide by this, so `mcphost explain` cannot drift."""
        if "*" not in agent.event_types and event.event_type not in agent.event_types:
            return f"event_types {agent.event_types} does not include {event.event_type!r}"
        for key, expected in agent.match.items():
            actual = event.scope_value(key)
            if actual is None:
                return f"match.{key} = {expected!r}, and the event has no {key}"
            if actual not in _values(expected):
                return f"match.{key} = {expected!r}, and the event's {key} is {actual!r}"
        return None

    def resolve(self, event: AgentEventEnvelope) -> AgentBinding:
        """The one binding for `event`; `NoBindingError` or `AmbiguousBindingError` with the reason."""
        found = [agent for agent in self._agents if self.matches(agent, event)]
        scope = _scope_text(event)
        if event.agent_id is not None:
            chosen = [agent for agent in found if agent.id == event.agent_id]
            if not chosen:
                known = [a.id for a in self._agents]
                if event.agent_id not in known:
                    raise NoBindingError(
                        f"Agent {event.agent_id!r} is not configured; known agents: {', '.join(known) or 'none'}.",
                        details={"agent_id": event.agent_id, "event_type": event.event_type},
                    )
                raise NoBindingError(
                    f"Agent {event.agent_id!r} is not bound to {event.event_type!r} events{scope}; "
                    "check its event_types and match in mcphost.toml.",
                    details={"agent_id": event.agent_id, "event_type": event.event_type},
                )
            found = chosen
        if not found:
            raise NoBindingError(
                f"No agent is bound to {event.event_type!r} events{scope}. Add an [[agents]] entry whose "
                "event_types include it (and whose match fits), or send the event to a bound agent.",
                details={"event_type": event.event_type},
            )
        if len(found) > 1:
            raise AmbiguousBindingError(
                f"{len(found)} agents match {event.event_type!r}{scope}: {', '.join(a.id for a in found)}; "
                "exactly one must.",
                details={"agents": [a.id for a in found]},
            )
        agent = found[0]
        return AgentBinding(binding_id=agent.id, agent=agent)


def _scope_text(event: AgentEventEnvelope) -> str:
    parts = [
        f"{key}={value!r}"
        for key in ("bot_id", "conversation_id", "actor_id", "subject_type")
        if (value := event.scope_value(key)) is not None
    ]
    return f" ({', '.join(parts)})" if parts else ""
