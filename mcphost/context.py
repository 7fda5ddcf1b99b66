"""Event + binding + grant → the runner's `AgentRunContext` (PROTOCOL §3).

The one place where host models are converted into protocol models (STYLE 3). Owns the runner config
check against the manifest's `config_schema`. Does not read stores: the caller passes in the few facts
the context needs (latest cursor, state snapshot), so building a context is pure and cheap.
Invariant: the context is a projection of the grant — `resources` and `available_apis` never show
more than the grant allows — and it carries no history window, only handles. Skills are not
permissions: `resources.skills` lists the configured skills the agent names in `resources.skills`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from mcphost import __version__
from mcphost.errors import InvalidArgumentError
from mcphost.models import AgentBinding, AgentEventEnvelope, RunGrant
from mcphost.protocol import (
    ActorInfo,
    AgentRunContext,
    AgentRunnerManifest,
    AvailableApis,
    BridgeCommand,
    ConfigField,
    ContextAccess,
    ConversationInfo,
    EventInfo,
    KnowledgeBaseInfo,
    MCPAccess,
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
from mcphost.stores import ScopeSnapshot
from mcphost.stores.state import unservable_message

MCP_PROTOCOL_VERSIONS = ["2025-11-25", "2026-07-28"]
SNAPSHOT_SCOPES = ("conversation", "actor", "subject", "runner")
"""The state scopes a run context carries a snapshot of (when the grant may read them)."""
TOKEN_ENV = "MCPHOST_RUN_TOKEN"


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


def mcp_access(public_url: str, run_id: str, token: str) -> MCPAccess:
    url = mcp_url(public_url, run_id)
    return MCPAccess(
        url=url,
        headers={"Authorization": f"Bearer {token}"},
        bridge=BridgeCommand(command=[sys.executable, "-m", "bridge", "--url", url], env={TOKEN_ENV: token}),
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


def build_context(
    *,
    run_id: str,
    event: AgentEventEnvelope,
    binding: AgentBinding,
    grant: RunGrant,
    manifest: AgentRunnerManifest,
    token: str,
    public_url: str,
    latest_cursor: str | None,
    has_history_before: bool,
    state: Mapping[str, ScopeSnapshot],
    knowledge_bases: Mapping[str, tuple[str, str]] | None = None,
    skills: Mapping[str, tuple[str, str]] | None = None,
) -> AgentRunContext:
    """Assemble the run context. `knowledge_bases` maps kb_id → (name, description), `skills` a skill's
    name → (display name, description); the agent's `resources.skills` picks the skills it is told of."""
    conv, actor, subject = event.conversation, event.actor, event.subject
    tools = grant.tools
    kbs = knowledge_bases or {}
    return AgentRunContext(
        run_id=run_id,
        trigger=Trigger(type=event.event_type, source=event.source, timestamp=event.event_time),
        event=EventInfo(
            event_id=event.event_id,
            event_type=event.event_type,
            event_time=event.event_time,
            source=event.source,
            source_event_type=event.source_event_type,
            raw_ref=event.raw_ref,
            data=dict(event.data),
        ),
        conversation=ConversationInfo(**conv.model_dump()) if conv else None,
        actor=ActorInfo(**actor.model_dump()) if actor else None,
        subject=SubjectInfo(**subject.model_dump()) if subject else None,
        input=RunInput(
            text=event.input.text,
            contents=list(event.input.contents),
            attachments=list(event.input.attachments),
        ),
        delivery=event.delivery.model_copy(
            update={
                "supports_streaming": event.delivery.supports_streaming and binding.agent.delivery.streaming
            }
        ),
        resources=Resources(
            tools=[
                ToolInfo(name=glob, description="host tools matching this pattern")
                for glob in grant.host_tool_globs
            ],
            knowledge_bases=[
                KnowledgeBaseInfo(
                    kb_id=kb, name=kbs.get(kb, (kb, ""))[0], description=kbs.get(kb, (kb, ""))[1]
                )
                for kb in sorted(grant.knowledge_bases)
            ],
            skills=[
                SkillInfo(skill_name=name, display_name=skills[name][0] or name, description=skills[name][1])
                for name in binding.agent.resources.skills
                if skills and name in skills
            ],
            storage=StorageInfo(areas=sorted(grant.storage_areas)),
        ),
        context=ContextAccess(
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
            mcp=mcp_access(public_url, run_id, token),
        ),
        state=state_snapshot(state),
        runtime=Runtime(host_version=__version__, trace_id=run_id, deadline_at=grant.deadline_at),
        config=runner_config(binding, manifest),
    )
