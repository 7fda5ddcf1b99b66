"""Event + binding + grant → the runner's `AgentRunContext` (PROTOCOL §3); the one context builder.

The one place where host models are converted into protocol models (STYLE 3). Owns the runner config
check against the manifest's `config_schema`, the `instructions` text, the `runtime.static_refs`
hashes and `with_token` (the one step that puts the run token into a context). Does not read or write stores: the caller passes in
the few facts the context needs (latest cursor, state snapshot), so building a context is pure and
cheap. The orchestrator builds a run's context once, as the run starts, and the runs store keeps it
without its token (`RunStore.try_start`), so every replica serves the same one.

Invariants:
- The context is a projection of the grant — `resources` and `available_apis` never show more than
  the grant allows — and it carries no history window, only handles. Skills are not permissions:
  `resources.skills` lists the configured skills the agent names in `resources.skills`.
- `grant_context` (a run started without a runner, such as an inspection grant, or before its host kept
  contexts) is assembled from the same parts as `build_context`, minus what only an agent has
  (`config`, skills, knowledge base names, `static_refs`).
- `static_refs` are SHA-256 hashes of canonical JSON (keys sorted, no spaces, UTF-8) or UTF-8 text,
  under rule version `STATIC_REFS_VERSION`: equal content gives equal hashes across runs and hosts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcphost import __version__
from mcphost.config import host_module_command
from mcphost.errors import InvalidArgumentError
from mcphost.models import AgentBinding, AgentEventEnvelope, Run, RunGrant
from mcphost.protocol import (
    ActorInfo,
    AgentRunContext,
    AgentRunnerManifest,
    AvailableApis,
    BridgeCommand,
    ConfigField,
    ContextAccess,
    ConversationInfo,
    Delivery,
    EventInfo,
    HostModelInfo,
    JSONObject,
    JSONValue,
    KnowledgeBaseInfo,
    MCPAccess,
    ModelEndpoints,
    Resources,
    RunInput,
    Runtime,
    SkillInfo,
    StateErrorEntry,
    StateSnapshot,
    StorageInfo,
    SubjectInfo,
    ToolInfo,
    Trigger,
)
from mcphost.protocol.context import StaticRef
from mcphost.stores import ScopeSnapshot
from mcphost.stores.state import unservable_message

MCP_PROTOCOL_VERSIONS = ["2025-11-25", "2026-07-28"]
SNAPSHOT_SCOPES = ("conversation", "actor", "subject", "runner")
"""The state scopes a run context carries a snapshot of (when the grant may read them)."""
TOKEN_ENV = "MCPHOST_RUN_TOKEN"
STATIC_REFS_VERSION = "1"
"""The version of the `static_refs` hashing rule (docs/protocol.md § runtime); a new rule, a new version."""
NO_INSTRUCTIONS = "No instructions were configured for this agent."


def state_snapshot(parts: Mapping[str, ScopeSnapshot]) -> StateSnapshot:
    """The context's state: each scope's values, and one error entry per key left out as unservable."""
    errors = [
        StateErrorEntry(scope=scope, key=key, message=unservable_message(scope, key))
        for scope, part in parts.items()
        for key in part.unservable
    ]
    values = {scope: dict(part.values) for scope, part in parts.items() if scope in SNAPSHOT_SCOPES}
    return StateSnapshot(**values, errors=errors)


def mcp_url(public_url: str, run_id: str) -> str:
    return f"{public_url.rstrip('/')}/runs/{run_id}/mcp"


def mcp_access(public_url: str, run_id: str) -> MCPAccess:
    """How a runner reaches the run's MCP endpoint, without the token (`with_token` adds it)."""
    url = mcp_url(public_url, run_id)
    return MCPAccess(
        url=url,
        bridge=BridgeCommand(command=[*host_module_command("mcphost_bridge"), "--url", url]),
        protocol_versions=list(MCP_PROTOCOL_VERSIONS),
    )


_TYPE_CHECKS: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "secret": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def _check_field(field: ConfigField, value: Any, agent_id: str) -> None:
    where = f"agent {agent_id!r} config.{field.name}"
    if field.type in _TYPE_CHECKS:
        expected = _TYPE_CHECKS[field.type]
        ok = isinstance(value, expected) and not (
            field.type in {"integer", "number"} and isinstance(value, bool)
        )
        if not ok:
            raise InvalidArgumentError(
                f"{where}: expected {field.type}, got {type(value).__name__} {value!r}"
            )
    elif field.type == "select" and field.options is not None and value not in field.options:
        raise InvalidArgumentError(f"{where}: {value!r} is not one of {field.options!r}")


def runner_config(binding: AgentBinding, manifest: AgentRunnerManifest) -> dict[str, Any]:
    """The agent's runner config checked against `config_schema`, defaults filled, `prompt` added."""
    agent = binding.agent
    config: dict[str, Any] = dict(agent.config)
    for field in manifest.config_schema:
        if field.name in config:
            _check_field(field, config[field.name], agent.id)
        elif field.default is not None:
            config[field.name] = field.default
        elif field.required:
            raise InvalidArgumentError(
                f"agent {agent.id!r}: runner {manifest.id!r} requires config.{field.name} ({field.type}); "
                f"set it under [agents.config] in mcphost.toml."
            )
    if agent.prompt is not None:
        config["prompt"] = agent.prompt
    return config


def _event_parts(event: AgentEventEnvelope) -> dict[str, Any]:
    """The context's fields that come from the run's event."""
    conv, actor, subject = event.conversation, event.actor, event.subject
    parts: dict[str, Any] = {
        "trigger": Trigger(type=event.event_type, source=event.source, timestamp=event.event_time),
        "event": EventInfo(
            event_id=event.event_id,
            event_type=event.event_type,
            event_time=event.event_time,
            source=event.source,
            source_event_type=event.source_event_type,
            raw_ref=event.raw_ref,
            data=dict(event.data),
        ),
        "conversation": ConversationInfo(**conv.model_dump()) if conv else None,
        "actor": ActorInfo(**actor.model_dump()) if actor else None,
        "subject": SubjectInfo(**subject.model_dump()) if subject else None,
        "input": RunInput(
            text=event.input.text,
            contents=list(event.input.contents),
            attachments=list(event.input.attachments),
        ),
    }
    return parts


def models_url(public_url: str, run_id: str) -> str:
    """The base of a run's model endpoints: `<public>/runs/<run_id>/models` (`/anthropic`, `/openai/v1`)."""
    return f"{public_url.rstrip('/')}/runs/{run_id}/models"


def model_endpoints(public_url: str, run_id: str) -> ModelEndpoints:
    base = models_url(public_url, run_id)
    return ModelEndpoints(anthropic=f"{base}/anthropic", openai=f"{base}/openai/v1")


def _models(grant: RunGrant, models: Mapping[str, HostModelInfo]) -> list[HostModelInfo]:
    calls = sorted(grant.model_calls)
    return [
        models.get(model_id, HostModelInfo(model_id=model_id)).model_copy(
            update={"model_id": model_id, "calls": calls}
        )
        for model_id in sorted(grant.models)
    ]


def _resources(
    grant: RunGrant,
    knowledge_bases: Mapping[str, tuple[str, str]],
    skills: Sequence[SkillInfo],
    models: Mapping[str, HostModelInfo] | None = None,
) -> Resources:
    return Resources(
        models=_models(grant, models or {}),
        tools=[
            ToolInfo(name=glob, description="host tools matching this pattern")
            for glob in grant.host_tool_globs
        ],
        knowledge_bases=[
            KnowledgeBaseInfo(
                kb_id=kb,
                name=knowledge_bases.get(kb, (kb, ""))[0],
                description=knowledge_bases.get(kb, (kb, ""))[1],
            )
            for kb in sorted(grant.knowledge_bases)
        ],
        skills=list(skills),
        storage=StorageInfo(areas=sorted(grant.storage_areas)),
    )


def _access(
    grant: RunGrant,
    latest_cursor: str | None,
    has_history_before: bool,
    mcp: MCPAccess | None,
    models: ModelEndpoints | None = None,
) -> ContextAccess:
    tools = grant.tools
    return ContextAccess(
        conversation_id=grant.conversation_id,
        thread_id=grant.thread_id,
        latest_cursor=latest_cursor,
        has_history_before=has_history_before,
        available_apis=AvailableApis(
            history_page="history_page" in tools,
            history_search="history_search" in tools,
            event_get="events_get" in tools,
            event_page="events_page" in tools,
            artifact_metadata="artifacts_metadata" in tools,
            artifact_read="artifacts_read" in tools,
            artifact_create="artifacts_create" in tools,
            state="state_get" in tools,
            storage=bool(grant.storage_areas),
            knowledge=bool(grant.knowledge_bases),
            tools=bool(grant.host_tool_globs),
        ),
        mcp=mcp,
        models=models if grant.models else None,
    )


def _runtime(grant: RunGrant, static_refs: Mapping[str, StaticRef] | None = None) -> Runtime:
    return Runtime(
        host_version=__version__,
        trace_id=grant.run_id,
        deadline_at=grant.deadline_at,
        static_refs=dict(static_refs or {}),
    )


def instructions_text(config: Mapping[str, Any], skills: Sequence[SkillInfo]) -> str:
    """The `instructions` prompt: the agent's static prompt (`config.prompt`), then its skills."""
    parts: list[str] = []
    prompt = config.get("prompt")
    if isinstance(prompt, str) and prompt.strip():
        parts.append(prompt.strip())
    if skills:
        lines = ["Skills:"]
        for skill in skills:
            title = skill.display_name or skill.skill_name
            about = f": {skill.description}" if skill.description else ""
            lines.append(f"- {skill.skill_name} ({title}){about}")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) or NO_INSTRUCTIONS


def content_sha256(content: str | JSONValue) -> str:
    """The hex SHA-256 of `content`: a string's UTF-8 bytes, anything else's canonical JSON (keys
    sorted, `,`/`:` without spaces, non-ASCII kept, UTF-8)."""
    text = (
        content
        if isinstance(content, str)
        else json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def static_refs(
    config: Mapping[str, Any],
    resources: Resources,
    tools: Sequence[JSONObject],
    tools_sha256: str | None = None,
) -> dict[str, StaticRef]:
    """Hashes of the parts of a run's prompt prefix that change only when the agent or grant does:
    the `instructions` prompt text, the granted facts tools as `tools/list` shows them, and the
    context's `resources` (host tool patterns, knowledge bases, skills, storage areas).
    `tools_sha256` is `content_sha256(list(tools))` when the caller keeps it (it costs more than the
    rest of a run's context to compute)."""

    def ref(name: str, content: str | JSONValue) -> StaticRef:
        return StaticRef(ref=name, version=STATIC_REFS_VERSION, sha256=content_sha256(content))

    return {
        "instructions": ref("prompts/instructions", instructions_text(config, resources.skills)),
        "tools": StaticRef(
            ref="tools/list",
            version=STATIC_REFS_VERSION,
            sha256=content_sha256(list(tools)) if tools_sha256 is None else tools_sha256,
        ),
        "resources": ref("context/resources", resources.model_dump(mode="json")),
    }


@dataclass(frozen=True)
class StaticParts:
    """The parts of a run's context that change only when its agent, runner or grant shape does: the
    `resources`, the checked runner `config` and the `static_refs` hashes (`static_parts`)."""

    resources: Resources
    config: Mapping[str, Any]
    static_refs: Mapping[str, StaticRef]


def static_parts(
    *,
    binding: AgentBinding,
    grant: RunGrant,
    manifest: AgentRunnerManifest,
    knowledge_bases: Mapping[str, tuple[str, str]] | None = None,
    skills: Mapping[str, tuple[str, str]] | None = None,
    tools: Sequence[JSONObject] = (),
    tools_sha256: str | None = None,
    models: Mapping[str, HostModelInfo] | None = None,
) -> StaticParts:
    """A context's `StaticParts` (`build_context` takes the same arguments). Raises `InvalidArgumentError`
    for an agent config the runner's `config_schema` refuses."""
    told = [
        SkillInfo(skill_name=name, display_name=skills[name][0] or name, description=skills[name][1])
        for name in binding.agent.resources.skills
        if skills and name in skills
    ]
    resources = _resources(grant, knowledge_bases or {}, told, models)
    config = runner_config(binding, manifest)
    return StaticParts(resources, config, static_refs(config, resources, tools, tools_sha256))


def build_context(
    *,
    run_id: str,
    event: AgentEventEnvelope,
    binding: AgentBinding,
    grant: RunGrant,
    manifest: AgentRunnerManifest,
    public_url: str,
    latest_cursor: str | None,
    has_history_before: bool,
    state: Mapping[str, ScopeSnapshot],
    knowledge_bases: Mapping[str, tuple[str, str]] | None = None,
    skills: Mapping[str, tuple[str, str]] | None = None,
    tools: Sequence[JSONObject] = (),
    tools_sha256: str | None = None,
    models: Mapping[str, HostModelInfo] | None = None,
    static: StaticParts | None = None,
) -> AgentRunContext:
    """Assemble the run context, without its token (`with_token` adds it). `static` is `static_parts` of
    the same arguments when the caller keeps them (`ContextBuilder` does, per agent and grant shape). `knowledge_bases` maps kb_id → (name, description), `skills` a skill's
    name → (display name, description); the agent's `resources.skills` picks the skills it is told of.
    `tools` are the facts tools the grant allows, as `tools/list` shows them (hashed into
    `runtime.static_refs`; `tools_sha256` is that hash when the caller keeps it); `models` describes
    the host's models by id (the grant picks which the context lists)."""
    if grant.run_id != run_id:
        raise ValueError(f"build_context takes the run's own grant; got {grant.run_id!r} for {run_id!r}")
    if static is None:
        static = static_parts(
            binding=binding,
            grant=grant,
            manifest=manifest,
            knowledge_bases=knowledge_bases,
            skills=skills,
            tools=tools,
            tools_sha256=tools_sha256,
            models=models,
        )
    return AgentRunContext(
        run_id=run_id,
        **_event_parts(event),
        delivery=event.delivery.model_copy(
            update={
                "supports_streaming": event.delivery.supports_streaming and binding.agent.delivery.streaming
            }
        ),
        resources=static.resources,
        context=_access(
            grant,
            latest_cursor,
            has_history_before,
            mcp_access(public_url, run_id),
            model_endpoints(public_url, run_id),
        ),
        state=state_snapshot(state),
        runtime=_runtime(grant, static.static_refs),
        config=dict(static.config),
    )


def grant_context(
    run: Run,
    grant: RunGrant,
    event: AgentEventEnvelope | None,
    *,
    latest_cursor: str | None,
    has_history_before: bool,
    state: Mapping[str, ScopeSnapshot],
) -> AgentRunContext:
    """The context of a run that has no stored one: what its row, grant and event say. No `config`
    (the `instructions` prompt says there is none), no skills, knowledge bases by id, no `mcp` (the
    caller is already connected) and no `static_refs`."""
    parts: dict[str, Any]
    if event is not None:
        parts = _event_parts(event)
        delivery = event.delivery
    else:
        when = run.created_at
        parts = {
            "trigger": Trigger(type=run.event_type, source="system", timestamp=when),
            "event": EventInfo(
                event_id=run.event_id, event_type=run.event_type, event_time=when, source="system"
            ),
        }
        delivery = Delivery()
    return AgentRunContext(
        run_id=run.run_id,
        **parts,
        delivery=delivery,
        resources=_resources(grant, {}, ()),
        context=_access(grant, latest_cursor, has_history_before, None),
        state=state_snapshot(state),
        runtime=_runtime(grant),
    )


def with_token(ctx: AgentRunContext, token: str) -> AgentRunContext:
    """`ctx` (built without a token) as its runner gets it: the token in `mcp` as bearer header and in
    the bridge's environment."""
    mcp = ctx.context.mcp
    if mcp is None:
        return ctx
    full = mcp.model_copy(
        update={
            "headers": {"Authorization": f"Bearer {token}", **mcp.headers},
            "bridge": mcp.bridge.model_copy(update={"env": {**mcp.bridge.env, TOKEN_ENV: token}}),
        }
    )
    return ctx.model_copy(update={"context": ctx.context.model_copy(update={"mcp": full})})


def with_trace(ctx: AgentRunContext, trace: Mapping[str, str]) -> AgentRunContext:
    """`ctx` with the W3C trace context `trace` (`traceparent`, `tracestate`) in `runtime`: the host's
    span around the runner, which the runner's own spans and MCP calls descend from."""
    runtime = ctx.runtime.model_copy(
        update={"traceparent": trace.get("traceparent"), "tracestate": trace.get("tracestate")}
    )
    return ctx.model_copy(update={"runtime": runtime})
