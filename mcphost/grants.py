"""The run grant: the three-layer cut of PROTOCOL §6, token minting, and the checks used per call.

Owns the rule that turns (runner manifest permissions) ∩ (agent policy) ∩ (event scope) into a frozen
`RunGrant`, and `check`, which says of one target (`tool:NAME`, `state:SCOPE:read|write`,
`storage:AREA`, `knowledge:KB`, `resource:URI`, `action:NAME`, `model:ID[:invoke|stream|rerank|embed]`) whether a grant allows it and, when not, which layer
removed it and which key would add it (and, of an allowed tool, whether its calls wait for a person's
approval: `asks_approval`). `mcphost explain` and every `unauthorized` refusal of the per-run
MCP server word their answer through `check`. `action_out_of_scope` is the event layer of a platform
action (`action.requested`): whether the scope ids its target names are the run's own.

Invariants: the cut is computed once per run, here (the manifest ∩ agent part once per agent and
manifest, which are not changed once loaded: a reloaded config brings new objects, and a new cut);
every later check (the MCP endpoint, the journal's `state.updated` check) reads the same frozen grant
and never recomputes it. `check` decides "allowed" from the grant's own sets, the same ones the MCP
server enforces; the layers kept with the grant (`RunGrant.layers`) only name the reason, and only what
the run's own agent and runner declare. Tokens are 256-bit random values; only their SHA-256 is stored,
and they are compared in constant time.

Size: past 600 lines because building a grant and explaining each of its refusals by layer are one
table read two ways (permissions → tools, models, state, storage, knowledge, actions): split apart, the
two halves would each restate that table.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping
from typing import Literal, Self

from pydantic import ConfigDict

from mcphost.common.fielddocs import DocumentedModel
from mcphost.models import AgentBinding, AgentEventEnvelope, GrantLayers, RunGrant
from mcphost.protocol import (
    STATE_SCOPES,
    AgentRunnerManifest,
    JSONObject,
    JSONValue,
    is_json_object,
    parse_runner_id,
)

FACTS_TOOLS_BY_PERMISSION: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("history", "page"): ("history_page",),
    ("history", "search"): ("history_search",),
    ("events", "get"): ("events_get",),
    ("events", "page"): ("events_page",),
    ("artifacts", "metadata"): ("artifacts_metadata",),
    ("artifacts", "read"): ("artifacts_read",),
    ("artifacts", "create"): ("artifacts_create",),
    ("state", "read"): ("state_get", "state_list"),
    ("state", "write"): ("state_set", "state_delete"),
    ("knowledge", "list"): ("knowledge_list",),
    ("knowledge", "retrieve"): ("knowledge_retrieve",),
}
"""Which facts tools each manifest permission unlocks (PROTOCOL §7)."""

STORAGE_TOOLS: tuple[str, ...] = ("storage_get", "storage_set", "storage_delete", "storage_list")
ALWAYS_TOOLS: tuple[str, ...] = ("run_context",)
MODEL_TOOLS_BY_CALL: Mapping[str, tuple[str, ...]] = {
    "invoke": ("models_list", "models_invoke"),
    "stream": ("models_list", "models_invoke"),
    "rerank": ("models_list", "models_rerank"),
    "embed": ("models_list", "models_embed"),
}
"""Which model tools each way of calling a model (`permissions.models`) unlocks, for a run granted at
least one host model; `models_invoke` streams when the client asks and `stream` is granted."""
ALL_FACTS_TOOLS: frozenset[str] = frozenset(
    [t for tools in FACTS_TOOLS_BY_PERMISSION.values() for t in tools]
    + [t for tools in MODEL_TOOLS_BY_CALL.values() for t in tools]
    + list(STORAGE_TOOLS)
    + list(ALWAYS_TOOLS)
)

TOKEN_BYTES = 32
"""256-bit run tokens."""


class GrantView(DocumentedModel):
    """What a grant allows, token-free and sorted: the one projection of a `RunGrant` that answers show
    (`GET /v1/runs/{run_id}`, with the run's ids added) and explain (`POST /v1/explain`)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    tools: list[str]
    host_tool_globs: list[str]
    knowledge_bases: list[str]
    state_read: list[str]
    state_write: list[str]
    storage_areas: list[str]
    artifact_create: bool
    actions: list[str]
    """Platform actions the run may ask for (`action.requested`), before the target's scope check."""
    models: list[str] = []
    """Host models the run may call (`[models.<id>]` ids)."""
    model_calls: list[str] = []
    """How it may call them: `invoke`, `stream`, `rerank`, `embed`."""
    call_budget: int | None
    byte_budget: int | None

    @classmethod
    def of(cls, grant: RunGrant, **extra: object) -> Self:
        """The view of `grant`; a subclass passes its own fields in `extra`."""
        return cls.model_validate(
            {
                "tools": sorted(grant.tools),
                "host_tool_globs": list(grant.host_tool_globs),
                "knowledge_bases": sorted(grant.knowledge_bases),
                "state_read": sorted(grant.state_read),
                "state_write": sorted(grant.state_write),
                "storage_areas": sorted(grant.storage_areas),
                "artifact_create": grant.artifact_create,
                "actions": sorted(grant.actions),
                "models": sorted(grant.models),
                "model_calls": sorted(grant.model_calls),
                "call_budget": grant.call_budget,
                "byte_budget": grant.byte_budget,
                **extra,
            }
        )


def mint_token() -> tuple[str, str]:
    """A fresh run token and its stored SHA-256 hex digest."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    return token, hash_token(token)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, token_hash: str) -> bool:
    """Constant-time comparison of a presented token with a stored hash."""
    return hmac.compare_digest(hash_token(token), token_hash)


def build_grant(
    *,
    run_id: str,
    event: AgentEventEnvelope,
    binding: AgentBinding,
    manifest: AgentRunnerManifest,
    token_hash: str,
    deadline_at: float,
) -> RunGrant:
    """Cut manifest ∩ agent policy ∩ event scope into the run's frozen grant: the cut of the agent and
    its runner (`_cut`, kept per agent and manifest), with the event's scope ids and the run's own
    fields set on a copy of it."""
    return _cut(binding, manifest).model_copy(
        update={
            "run_id": run_id,
            **event.scope_ids(),
            "deadline_at": deadline_at,
            "token_hash": token_hash,
            "record": binding.agent.record or event.options.record,
        }
    )


_CUTS: dict[tuple[int, int, str], tuple[AgentBinding, AgentRunnerManifest, RunGrant]] = {}
"""`_cut` per (agent, manifest, binding id), by identity (the objects are kept, so an id is not reused)."""
MAX_CUTS = 1024
"""`_CUTS` is emptied when it holds this many (agents and runners that a reloaded config replaced)."""


def _cut(binding: AgentBinding, manifest: AgentRunnerManifest) -> RunGrant:
    """The grant of `binding`'s agent on `manifest` before any event: the per-run and per-event fields
    empty (`build_grant` sets them on a copy). Built once per agent, manifest and binding id (none of
    them changes once loaded): this took 11 of an echo run's 13 µs of `build_grant`; a copy with its
    run's fields takes 2."""
    agent = binding.agent
    key = (id(agent), id(manifest), binding.binding_id)
    kept = _CUTS.get(key)
    if kept is not None and kept[0].agent is agent and kept[1] is manifest:
        return kept[2]
    perms = manifest.permissions
    granted: dict[str, list[str]] = {
        "history": list(perms.history),
        "events": list(perms.events),
        "artifacts": list(perms.artifacts),
        "state": list(perms.state),
        "knowledge": list(perms.knowledge) if agent.resources.knowledge_bases else [],
    }
    if not agent.state.write:
        granted["state"] = [p for p in granted["state"] if p != "write"]
    if not agent.state.scopes:
        granted["state"] = []

    tools: set[str] = set(ALWAYS_TOOLS)
    for (area, perm), names in FACTS_TOOLS_BY_PERMISSION.items():
        if perm in granted[area]:
            tools.update(names)
    storage_areas = frozenset(perms.storage) & frozenset(agent.storage.areas)
    if storage_areas:
        tools.update(STORAGE_TOOLS)
    if perms.models and agent.resources.models:
        for how in perms.models:
            tools.update(MODEL_TOOLS_BY_CALL[how])

    state_scopes = frozenset(agent.state.scopes)
    state_read = state_scopes if "read" in granted["state"] else frozenset[str]()
    state_write = state_scopes if "write" in granted["state"] else frozenset[str]()

    author, plugin, _ = parse_runner_id(manifest.id)
    cut = RunGrant(
        run_id="",
        runner_id=manifest.id,
        plugin=f"{author}/{plugin}",
        binding_id=binding.binding_id,
        conversation_id=None,
        thread_id=None,
        actor_id=None,
        subject_type=None,
        subject_id=None,
        bot_id=None,
        workspace_id=None,
        tools=frozenset(tools),
        host_tool_globs=tuple(agent.resources.tools) if "call" in perms.tools else (),
        ask=tuple(sorted(agent.approvals)),
        parks=manifest.capabilities.parks,
        knowledge_bases=frozenset(agent.resources.knowledge_bases) if granted["knowledge"] else frozenset(),
        state_read=state_read,
        state_write=state_write,
        storage_areas=storage_areas,
        artifact_create="create" in granted["artifacts"],
        actions=frozenset(perms.platform_api) & frozenset(agent.actions.allow),
        models=frozenset(agent.resources.models) if perms.models else frozenset(),
        model_calls=frozenset(perms.models) if agent.resources.models else frozenset(),
        deadline_at=0.0,
        token_hash="",
        call_budget=agent.budget.calls,
        byte_budget=agent.budget.bytes,
        record=False,
        layers=GrantLayers(
            runner_id=manifest.id,
            agent_id=agent.id,
            manifest=perms,
            tools=tuple(agent.resources.tools),
            knowledge_bases=tuple(agent.resources.knowledge_bases),
            state_scopes=tuple(agent.state.scopes),
            state_write=agent.state.write,
            storage_areas=tuple(agent.storage.areas),
            actions=tuple(agent.actions.allow),
            models=tuple(agent.resources.models),
        ),
    )
    if len(_CUTS) >= MAX_CUTS:
        _CUTS.clear()
    _CUTS[key] = (binding, manifest, cut)
    return cut


def allows_host_tool(grant: RunGrant, tool_name: str) -> bool:
    """True when the host tool `<server>__<tool>` matches one of the agent's granted globs."""
    return matches_tool_glob(grant.host_tool_globs, tool_name)


def matches_tool_glob(globs: Iterable[str], tool_name: str) -> bool:
    """True when the host tool `<server>__<tool>` matches one of `globs` (an agent's `resources.tools`)."""
    return any(fnmatch.fnmatchcase(tool_name, pattern) for pattern in globs)


def allows_state(grant: RunGrant, scope: str, *, write: bool) -> bool:
    return scope in (grant.state_write if write else grant.state_read)


# -- why a target is allowed or not ------------------------------------------------------------------

Layer = Literal["manifest", "agent", "event"]
"""The three layers of the cut, in the order they are applied (PROTOCOL §6)."""

CONTEXT_URI = "mcphost://run/context"
ARTIFACT_URI_PREFIX = "mcphost://artifacts/"
STORAGE_AREAS: tuple[str, ...] = ("plugin", "workspace", "binding")
_EVENT_FIELDS: Mapping[str, str] = {
    "conversation": "conversation.conversation_id",
    "actor": "actor.actor_id",
    "subject": "subject.subject_type and subject.subject_id",
    "workspace": "conversation.workspace_id",
}


class GrantCheck(DocumentedModel):
    """One target checked against a grant: allowed, or the layer that removed it and what would add it."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    target: str
    """What was checked: `tool:NAME`, `state:SCOPE:read|write`, `storage:AREA`, `knowledge:KB`,
    `resource:URI`, `action:NAME` (a platform action; its target's scope is checked per request) or
    `model:ID[:invoke|stream|rerank|embed]` (a host model)."""
    allowed: bool
    approval: bool = False
    """Allowed, but each call waits for a person's decision: the agent marks the tool `ask`
    (`[agents.approvals]`)."""
    layer: Layer | None = None
    """The first layer that removed the target (None when allowed, or for an inspection grant)."""
    reason: str | None = None
    """Why that layer removed it; for a tool that needs approval, the `[agents.approvals]` key that asks."""
    fix: str | None = None
    """The config key or manifest field that would add it."""


def asks_approval(grant: RunGrant, tool: str) -> str | None:
    """The `ask` glob (`[agents.approvals]`) that makes calls of `tool` wait for a person, or None."""
    return next((pattern for pattern in grant.ask if fnmatch.fnmatchcase(tool, pattern)), None)


def check(grant: RunGrant, target: str) -> GrantCheck:
    """Whether `grant` allows `target`, and when not, which layer removed it and how to add it.

    Raises:
        ValueError: `target` is not one of the forms above, or names no known tool, scope or resource.
    """
    kind, _, rest = target.partition(":")
    match kind:
        case "tool":
            allowed, removed = _tool(grant, rest)
        case "state":
            scope, _, mode = rest.partition(":")
            if mode not in ("read", "write"):
                raise ValueError(f"{target!r}: a state target is 'state:SCOPE:read' or 'state:SCOPE:write'")
            allowed, removed = _state(grant, scope, write=mode == "write")
        case "storage":
            allowed, removed = _storage(grant, rest)
        case "knowledge":
            if not rest:
                raise ValueError(f"{target!r}: name a knowledge base, as in 'knowledge:docs'")
            allowed = rest in grant.knowledge_bases
            removed = None if allowed else _knowledge_layers(grant, rest)
        case "model":
            model_id, _, how = rest.partition(":")
            if not model_id or how not in ("", "invoke", "stream", "rerank", "embed"):
                raise ValueError(
                    f"{target[:120]!r}: a model target is 'model:ID[:invoke|stream|rerank|embed]'"
                )
            allowed = model_id in grant.models and (not how or how in grant.model_calls)
            removed = None if allowed else _model_layers(grant.layers, model_id, how or None)
        case "action":
            if not rest:
                raise ValueError(f"{target!r}: name a platform action, as in 'action:message.edit'")
            allowed = rest in grant.actions
            removed = None if allowed else _action_layers(grant.layers, rest)
        case "resource":
            if rest == CONTEXT_URI:
                allowed, removed = True, None
            elif rest.startswith(ARTIFACT_URI_PREFIX) and len(rest) > len(ARTIFACT_URI_PREFIX):
                allowed, removed = _tool(grant, "artifacts_read")
            else:
                raise ValueError(
                    f"{target[:120]!r} names no resource of the per-run MCP server; its resources are "
                    f"{CONTEXT_URI!r} and '{ARTIFACT_URI_PREFIX}<artifact_id>'"
                )
        case _:
            raise ValueError(
                f"{target[:120]!r} is not a target; use tool:NAME, state:SCOPE:read|write, storage:AREA, "
                "knowledge:KB, resource:URI, action:NAME or model:ID[:invoke|stream|rerank|embed]"
            )
    if allowed:
        pattern = asks_approval(grant, rest) if kind == "tool" else None
        if pattern is not None:
            reason = f'each call waits for a person\'s decision: [agents.approvals] {pattern!r} = "ask"'
            return GrantCheck(target=target, allowed=True, approval=True, reason=reason)
        return GrantCheck(target=target, allowed=True)
    if removed is None:  # an inspection grant: no layers, only what `mcphost grant` named
        return GrantCheck(
            target=target,
            allowed=False,
            reason="this inspection grant was created without it",
            fix="create a grant that names it: mcphost grant --tools NAME / --host-tools GLOB / --write",
        )
    layer, reason, fix = removed
    return GrantCheck(target=target, allowed=False, layer=layer, reason=reason, fix=fix)


def refusal(grant: RunGrant, target: str, action: str) -> tuple[str, JSONObject]:
    """The message and details of an `unauthorized` answer for `target`: `This run may not <action>: ...`.

    Names the layer and the key only; it quotes nothing of the config beyond the run's own agent and
    runner ids and the target itself.
    """
    try:
        found = check(grant, target)
    except ValueError:  # a target no layer knows of (a malformed name): nothing to add it
        return f"This run may not {action}; tools/list shows what it may call.", {"target": target[:200]}
    assert not found.allowed, f"refusal() of {target[:200]!r}, which the grant allows"
    where = f" ({found.layer} layer)" if found.layer else ""
    message = f"This run may not {action}: {found.reason}{where}. To allow it, {found.fix}."
    details: JSONObject = {"target": target[:200], "layer": found.layer, "fix": found.fix}
    return message, details


_Removed = tuple[Layer, str, str] | None


def _tool(grant: RunGrant, name: str) -> tuple[bool, _Removed]:
    if not name:
        raise ValueError("name a tool, as in 'tool:state_get'")
    if name in ALL_FACTS_TOOLS:
        allowed = name in grant.tools
        return allowed, None if allowed else _facts_tool_layers(grant.layers, name)
    if "__" in name:
        allowed = allows_host_tool(grant, name)
        return allowed, None if allowed else _host_tool_layers(grant.layers, name)
    raise ValueError(
        f"there is no tool {name[:100]!r}: facts tools are {', '.join(sorted(ALL_FACTS_TOOLS))}; "
        "host tools are named '<server>__<tool>'"
    )


def _runner(layers: GrantLayers) -> str:
    return f"the manifest of runner {layers.runner_id!r}"


def _agent(layers: GrantLayers) -> str:
    return f"agent {layers.agent_id!r}"


def _entry(layers: GrantLayers) -> str:
    return f"the [[agents]] entry of {layers.agent_id!r}"


def _facts_tool_layers(layers: GrantLayers | None, name: str) -> _Removed:
    if layers is None:
        return None
    if name in STORAGE_TOOLS:
        return _storage_layers(layers, None)
    if name.startswith("models_"):
        return _model_tool_layers(layers, name)
    area, perm = next(key for key, names in FACTS_TOOLS_BY_PERMISSION.items() if name in names)
    declared: list[str] = getattr(layers.manifest, area)
    if perm not in declared:
        return (
            "manifest",
            f"{_runner(layers)} does not declare permissions.{area} {perm!r}",
            f"add {perm!r} to permissions.{area} in {_runner(layers)} (its author's change)",
        )
    if area == "knowledge" and not layers.knowledge_bases:
        return (
            "agent",
            f"{_agent(layers)} lists no resources.knowledge_bases",
            f"add a knowledge base id to resources.knowledge_bases in {_entry(layers)}",
        )
    if area == "state":
        return _state_agent_layer(layers, None, write=perm == "write")
    raise AssertionError(f"{name!r} is granted by every layer but missing from the grant")


def _host_tool_layers(layers: GrantLayers | None, name: str) -> _Removed:
    if layers is None:
        return None
    if "call" not in layers.manifest.tools:
        return (
            "manifest",
            f"{_runner(layers)} does not declare permissions.tools 'call'",
            f"add 'call' to permissions.tools in {_runner(layers)} (its author's change)",
        )
    server = name.split("__", 1)[0]
    return (
        "agent",
        f"no glob in resources.tools of {_agent(layers)} matches {name[:100]!r}",
        f"add {name[:100]!r} (or '{server[:60]}__*') to resources.tools in {_entry(layers)}",
    )


def _state(grant: RunGrant, scope: str, *, write: bool) -> tuple[bool, _Removed]:
    if scope not in STATE_SCOPES:
        raise ValueError(f"there is no state scope {scope[:100]!r}; known: {', '.join(STATE_SCOPES)}")
    granted = scope in (grant.state_write if write else grant.state_read)
    if granted and grant.state_scope_id(scope) is not None:
        return True, None
    layers = grant.layers
    if layers is None:
        return False, None
    mode = "write" if write else "read"
    if mode not in layers.manifest.state:
        return False, (
            "manifest",
            f"{_runner(layers)} does not declare permissions.state {mode!r}",
            f"add {mode!r} to permissions.state in {_runner(layers)} (its author's change)",
        )
    removed = _state_agent_layer(layers, scope, write=write)
    if removed is not None:
        return False, removed
    field = _EVENT_FIELDS.get(scope, scope)
    return False, (
        "event",
        f"the event carries no {field}, so it has no {scope!r} state",
        f"send the event with {field} set",
    )


def _state_agent_layer(layers: GrantLayers, scope: str | None, *, write: bool) -> _Removed:
    if write and not layers.state_write:
        return (
            "agent",
            f"state.write is false for {_agent(layers)}",
            f"set state.write = true in {_entry(layers)}",
        )
    if scope is None and not layers.state_scopes:
        return (
            "agent",
            f"state.scopes is empty for {_agent(layers)}",
            f"add a scope (such as 'conversation') to state.scopes in {_entry(layers)}",
        )
    if scope is not None and scope not in layers.state_scopes:
        return (
            "agent",
            f"state.scopes of {_agent(layers)} does not include {scope!r}",
            f"add {scope!r} to state.scopes in {_entry(layers)}",
        )
    return None


def _storage(grant: RunGrant, area: str) -> tuple[bool, _Removed]:
    if area not in STORAGE_AREAS:
        raise ValueError(f"there is no storage area {area[:100]!r}; known: {', '.join(STORAGE_AREAS)}")
    if area in grant.storage_areas and (area != "workspace" or grant.workspace_id is not None):
        return True, None
    layers = grant.layers
    if layers is None:
        return False, None
    removed = _storage_layers(layers, area)
    return False, removed or (
        "event",
        "the event carries no conversation.workspace_id, so it has no 'workspace' storage",
        "send the event with conversation.workspace_id set",
    )


def _storage_layers(layers: GrantLayers, area: str | None) -> _Removed:
    declared = list(layers.manifest.storage)
    if (area is None and not declared) or (area is not None and area not in declared):
        what = f"storage area {area!r}" if area else "any storage area"
        return (
            "manifest",
            f"{_runner(layers)} does not declare {what} in permissions.storage",
            f"add {repr(area) if area else 'an area (plugin, workspace or binding)'} to permissions.storage "
            f"in {_runner(layers)} (its author's change)",
        )
    if area is None and not set(declared) & set(layers.storage_areas):
        return (
            "agent",
            f"storage.areas of {_agent(layers)} shares no area with the manifest's {', '.join(declared)}",
            f"add one of {', '.join(repr(a) for a in declared)} to storage.areas in {_entry(layers)}",
        )
    if area is not None and area not in layers.storage_areas:
        return (
            "agent",
            f"storage.areas of {_agent(layers)} does not include {area!r}",
            f"add {area!r} to storage.areas in {_entry(layers)}",
        )
    return None


def _knowledge_layers(grant: RunGrant, kb_id: str) -> _Removed:
    layers = grant.layers
    if layers is None:
        return None
    if not layers.manifest.knowledge:
        return (
            "manifest",
            f"{_runner(layers)} declares no permissions.knowledge",
            f"add 'list' and 'retrieve' to permissions.knowledge in {_runner(layers)} (its author's change)",
        )
    return (
        "agent",
        f"resources.knowledge_bases of {_agent(layers)} does not include {kb_id[:100]!r}",
        f"add {kb_id[:100]!r} to resources.knowledge_bases in {_entry(layers)}",
    )


def _model_layers(layers: GrantLayers | None, model_id: str, how: str | None) -> _Removed:
    if layers is None:
        return None
    if not layers.manifest.models or (how is not None and how not in layers.manifest.models):
        what = repr(how) if how else "any of 'invoke', 'stream', 'rerank', 'embed'"
        return (
            "manifest",
            f"{_runner(layers)} does not declare {what} in permissions.models",
            f"add {how or 'invoke'!r} to permissions.models in {_runner(layers)} (its author's change)",
        )
    return (
        "agent",
        f"resources.models of {_agent(layers)} does not include {model_id[:100]!r}",
        f"add {model_id[:100]!r} to resources.models in {_entry(layers)} (a [models.{model_id[:64]}] table)",
    )


def _model_tool_layers(layers: GrantLayers, name: str) -> _Removed:
    unlocking = [how for how, names in MODEL_TOOLS_BY_CALL.items() if name in names]
    if not set(unlocking) & set(layers.manifest.models):
        return (
            "manifest",
            f"{_runner(layers)} declares none of {', '.join(map(repr, unlocking))} in permissions.models",
            f"add {unlocking[0]!r} to permissions.models in {_runner(layers)} (its author's change)",
        )
    return (
        "agent",
        f"{_agent(layers)} lists no resources.models",
        f"add a host model id to resources.models in {_entry(layers)} (a [models.<id>] table)",
    )


def _action_layers(layers: GrantLayers | None, name: str) -> _Removed:
    if layers is None:
        return None
    if name not in layers.manifest.platform_api:
        return (
            "manifest",
            f"{_runner(layers)} does not list {name[:100]!r} in permissions.platform_api",
            f"add {name[:100]!r} to permissions.platform_api in {_runner(layers)} (its author's change)",
        )
    return (
        "agent",
        f"actions.allow of {_agent(layers)} does not include {name[:100]!r}",
        f"add {name[:100]!r} to actions.allow in {_entry(layers)}",
    )


ACTION_SCOPE_KEYS: tuple[str, ...] = (
    "conversation_id",
    "thread_id",
    "bot_id",
    "workspace_id",
    "actor_id",
    "subject_type",
    "subject_id",
)
"""Keys of an action's `target` that name a scope: each one given must be the run's event's own."""
MESSAGE_KEY = "message_id"
"""A target key naming a message: it must be a message of the run's conversation (the journal looks
it up, `TranscriptStore.holds_message`)."""


def action_out_of_scope(grant: RunGrant, target: JSONValue) -> str | None:
    """Why an action's `target` lies outside the run's event scope, or None when it does not.

    The event layer of a platform action: a null target means the event's own scope; an object's scope
    keys (`ACTION_SCOPE_KEYS`) must each equal the id the event carries, and a `message_id` needs the
    event to have a conversation (whether the message is in it is the journal's lookup). Other keys are
    the receiver's to interpret, within that scope. Any other target cannot be checked and is refused.
    """
    if target is None:
        return None
    if not is_json_object(target):
        return "its target is not a JSON object, so the host cannot check that it lies in the event's scope"
    for key in ACTION_SCOPE_KEYS:
        if key not in target:
            continue
        own = getattr(grant, key)
        if own is None:
            return f"its target names {key} {_shown(target[key])}, and the event carries no {key}"
        if target[key] != own:
            return f"its target names {key} {_shown(target[key])}, and the event's {key} is {own!r}"
    if MESSAGE_KEY in target:
        if not isinstance(target[MESSAGE_KEY], str):
            return f"its target's {MESSAGE_KEY} is not a string"
        if grant.conversation_id is None:
            return f"its target names a {MESSAGE_KEY}, and the event has no conversation"
    return None


def _shown(value: JSONValue) -> str:
    return repr(value[:100]) if isinstance(value, str) else "(not a string)"
