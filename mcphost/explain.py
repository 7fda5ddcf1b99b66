"""Grant explain and dry run: what an event that has not happened would bind to and be granted, and why.

Owns the explanation document of `mcphost explain` and `POST /v1/explain`: which agent binds the event
and why each other agent does not, the three layers of the cut (the runner's manifest permissions, the
agent's policy, the event's scope ids), the grant they make and, for each named target, "allowed",
"approval" (allowed, and each call waits for a person: `[agents.approvals]`) or the layer that removed it
and the key that would add it. Does not decide any of it: the binding is
`Bindings.resolve`/`Bindings.mismatch`, the grant is `grants.build_grant` and each check is
`grants.check`, the same code an admitted run goes through, so an explanation cannot drift from what a
run gets. Nothing is stored, no token is minted and no runner is started here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import ConfigDict, Field

from mcphost.bindings import Bindings
from mcphost.common.fielddocs import DocumentedModel
from mcphost.errors import AmbiguousBindingError, InvalidArgumentError, NoBindingError
from mcphost.grants import GrantCheck, GrantView, build_grant, check
from mcphost.models import AgentBinding, AgentConfig, AgentEventEnvelope, RunGrant
from mcphost.protocol import STATE_SCOPES, AgentRunnerManifest, InboundModel, JSONObject, StateScope

MAX_TARGETS = 100
_DRY_RUN_ID = "run_explain"


class _Out(DocumentedModel):
    model_config = ConfigDict(frozen=True, defer_build=True)


class ExplainRequest(InboundModel):
    """The body of `POST /v1/explain`: an event that has not happened and the targets to check."""

    event: AgentEventEnvelope
    tools: list[str] = Field(default_factory=list[str], max_length=MAX_TARGETS)
    """Tool names: facts tools (`state_set`) or host tools (`<server>__<tool>`)."""
    resources: list[str] = Field(default_factory=list[str], max_length=MAX_TARGETS)
    """Resource URIs of the per-run MCP server (`mcphost://run/context`, `mcphost://artifacts/<id>`)."""
    state_scopes: list[StateScope] = Field(default_factory=list[StateScope], max_length=len(STATE_SCOPES))
    """State scopes; each is checked for reading and for writing."""
    models: list[str] = Field(default_factory=list[str], max_length=MAX_TARGETS)
    """Host model ids (`[models.<id>]`), or `ID:invoke|stream|rerank` for one way of calling them."""

    def targets(self) -> list[str]:
        return targets_of(self.tools, self.resources, self.state_scopes, self.models)


class AgentVerdict(_Out):
    agent: str
    runner: str
    binds: bool
    why: str


class BindingExplanation(_Out):
    binding_id: str | None
    """The agent the event binds to; None when none (or more than one) does."""
    why: str
    agents: list[AgentVerdict]
    """Every configured agent, with why it takes the event or not."""


class ExplainLayers(_Out):
    manifest: JSONObject
    """The runner and its manifest's `permissions`: the most any of its runs may get."""
    agent: JSONObject
    """The agent's `resources`, `state`, `storage`, `actions` and `budget`."""
    event: JSONObject
    """The event's scope ids and the state scopes they make available."""


class Explanation(_Out):
    """The answer of `mcphost explain --json` and `POST /v1/explain`."""

    agent: str | None
    runner: str | None
    binding: BindingExplanation
    layers: ExplainLayers | None
    grant: GrantView | None
    checks: list[GrantCheck]


def targets_of(
    tools: Sequence[str], resources: Sequence[str], state_scopes: Sequence[str], models: Sequence[str] = ()
) -> list[str]:
    """The `grants.check` targets of named tools, resources, state scopes (read and write each) and
    host models."""
    found = [f"tool:{t}" for t in tools] + [f"resource:{r}" for r in resources]
    found += [f"model:{m}" for m in models]
    for scope in state_scopes:
        found += [f"state:{scope}:read", f"state:{scope}:write"]
    if len(found) > 3 * MAX_TARGETS:
        raise InvalidArgumentError(f"{len(found)} targets; explain checks at most {3 * MAX_TARGETS} at once.")
    return found


def explain(
    event: AgentEventEnvelope,
    bindings: Bindings,
    manifest_of: Callable[[str], AgentRunnerManifest],
    targets: Sequence[str],
) -> Explanation:
    """Explain `event` under `bindings`. `manifest_of(runner_id)` raises `RunnerNotFoundError` when the
    runner is not registered.

    Raises:
        InvalidArgumentError: a target is malformed or names no known tool, scope or resource.
    """
    verdicts = [_verdict(agent, event) for agent in bindings.agents]
    try:
        binding = bindings.resolve(event)
    except (NoBindingError, AmbiguousBindingError) as error:
        checks = [_unbound(target, error.message) for target in targets]
        return Explanation(
            agent=None,
            runner=None,
            binding=BindingExplanation(binding_id=None, why=error.message, agents=verdicts),
            layers=None,
            grant=None,
            checks=checks,
        )
    manifest = manifest_of(binding.agent.runner)
    grant = build_grant(
        run_id=_DRY_RUN_ID, event=event, binding=binding, manifest=manifest, token_hash="", deadline_at=0.0
    )
    chosen = next(v for v in verdicts if v.agent == binding.binding_id)
    return Explanation(
        agent=binding.agent.id,
        runner=manifest.id,
        binding=BindingExplanation(binding_id=binding.binding_id, why=chosen.why, agents=verdicts),
        layers=_layers(binding, manifest, grant),
        grant=GrantView.of(grant),
        checks=[_check(grant, target) for target in targets],
    )


def _check(grant: RunGrant, target: str) -> GrantCheck:
    try:
        return check(grant, target)
    except ValueError as error:
        raise InvalidArgumentError(str(error), details={"target": target[:200]}) from None


def _unbound(target: str, why: str) -> GrantCheck:
    _check(_EMPTY_GRANT, target)  # a malformed target is refused whether or not an agent binds
    return GrantCheck(target=target, allowed=False, reason=why, fix="bind an agent to the event first")


_EMPTY_GRANT = RunGrant(
    run_id=_DRY_RUN_ID,
    runner_id=None,
    plugin=None,
    binding_id=None,
    conversation_id=None,
    thread_id=None,
    actor_id=None,
    subject_type=None,
    subject_id=None,
    bot_id=None,
    workspace_id=None,
    tools=frozenset(),
    deadline_at=0.0,
    token_hash="",
)


def _verdict(agent: AgentConfig, event: AgentEventEnvelope) -> AgentVerdict:
    mismatch = Bindings.mismatch(agent, event)
    if mismatch is None and event.agent_id is not None and event.agent_id != agent.id:
        mismatch = f"the event names agent {event.agent_id!r}"
    if mismatch is not None:
        return AgentVerdict(agent=agent.id, runner=agent.runner, binds=False, why=mismatch)
    types = "every event type ('*')" if "*" in agent.event_types else f"{event.event_type!r}"
    why = f"event_types includes {types}"
    if agent.match:
        why += " and " + ", ".join(f"match.{k} = {v!r}" for k, v in sorted(agent.match.items())) + " fits"
    return AgentVerdict(agent=agent.id, runner=agent.runner, binds=True, why=why)


def _layers(binding: AgentBinding, manifest: AgentRunnerManifest, grant: RunGrant) -> ExplainLayers:
    agent = binding.agent
    scope_ids: JSONObject = {
        "conversation_id": grant.conversation_id,
        "thread_id": grant.thread_id,
        "actor_id": grant.actor_id,
        "subject_type": grant.subject_type,
        "subject_id": grant.subject_id,
        "bot_id": grant.bot_id,
        "workspace_id": grant.workspace_id,
    }
    return ExplainLayers(
        manifest={"runner": manifest.id, "permissions": manifest.permissions.model_dump(mode="json")},
        agent={
            "id": agent.id,
            "resources": agent.resources.model_dump(mode="json"),
            "state": agent.state.model_dump(mode="json"),
            "storage": agent.storage.model_dump(mode="json"),
            "actions": agent.actions.model_dump(mode="json"),
            "budget": agent.budget.model_dump(mode="json"),
        },
        event={
            **scope_ids,
            "state_scopes": [s for s in STATE_SCOPES if grant.state_scope_id(s) is not None],
        },
    )
