"""The run context as the facts server hands it back: the host's copy without the token, or a rebuild.

Owns `load_context` (provider first, then a rebuild from the stores) and `redact` (the token out of
`context.mcp`). Does not build contexts for runs being started (`context.py` does).

Invariants:
- What leaves here never contains the run token: the `Authorization` header and the bridge's token
  variable are removed, and so is any other header or environment value whose hash is the grant's token
  hash (a host that put the token somewhere unexpected).
- The rebuild (no provider, or the provider no longer has the run) uses only stored facts — the run row,
  its inbound event, the grant, the transcript cursor and the granted state — and never guesses the
  agent's config: `config` is empty, so the `instructions` prompt says there is none. `context.mcp` is
  left out (the caller is already connected).
"""

from __future__ import annotations

from pydantic import ValidationError

from mcphost import __version__
from mcphost.context import SNAPSHOT_SCOPES, TOKEN_ENV, state_snapshot
from mcphost.errors import NotFoundError
from mcphost.facts.providers import ContextProvider
from mcphost.grants import token_matches
from mcphost.models import AgentEventEnvelope, RunGrant
from mcphost.protocol import (
    ActorInfo,
    AgentRunContext,
    AvailableApis,
    ContextAccess,
    ConversationInfo,
    Delivery,
    EventInfo,
    KnowledgeBaseInfo,
    MCPAccess,
    Resources,
    RunInput,
    Runtime,
    StorageInfo,
    SubjectInfo,
    ToolInfo,
    Trigger,
)
from mcphost.stores import ScopeSnapshot, Stores


def _is_token(value: str, token_hash: str) -> bool:
    candidate = value.strip()
    if candidate.lower().startswith("bearer "):
        candidate = candidate[7:].strip()
    return bool(candidate) and token_matches(candidate, token_hash)


def redact(ctx: AgentRunContext, token_hash: str) -> AgentRunContext:
    """`ctx` without the run token."""
    mcp = ctx.context.mcp
    if mcp is None:
        return ctx
    headers = {
        name: value
        for name, value in mcp.headers.items()
        if name.lower() != "authorization" and not _is_token(value, token_hash)
    }
    env = {
        name: value
        for name, value in mcp.bridge.env.items()
        if name != TOKEN_ENV and not _is_token(value, token_hash)
    }
    clean = MCPAccess(
        url=mcp.url,
        headers=headers,
        bridge=mcp.bridge.model_copy(update={"env": env}),
        protocol_versions=list(mcp.protocol_versions),
    )
    return ctx.model_copy(update={"context": ctx.context.model_copy(update={"mcp": clean})})


async def load_context(stores: Stores, grant: RunGrant, provider: ContextProvider | None) -> AgentRunContext:
    """The run's context without its token."""
    ctx = await provider(grant.run_id) if provider is not None else None
    if ctx is None:
        ctx = await rebuild(stores, grant)
    return redact(ctx, grant.token_hash)


async def _event_of(stores: Stores, event_id: str) -> AgentEventEnvelope | None:
    try:
        stored = await stores.events.get(event_id)
        return AgentEventEnvelope.model_validate(stored.payload)
    except (NotFoundError, ValidationError):
        return None


async def rebuild(stores: Stores, grant: RunGrant) -> AgentRunContext:
    """What the stores still know of a run's context."""
    run = await stores.runs.get(grant.run_id)
    event = await _event_of(stores, run.event_id)
    latest: str | None = None
    has_before = False
    if grant.conversation_id is not None:
        latest, has_before = await stores.transcript.head(grant.conversation_id, grant.thread_id)
    state: dict[str, ScopeSnapshot] = {}
    for scope in SNAPSHOT_SCOPES:
        owner = grant.state_scope_id(scope)
        if scope in grant.state_read and owner is not None:
            state[scope] = await stores.state.snapshot(scope, owner)
    source = event.source if event is not None else "system"
    when = event.event_time if event is not None else run.created_at
    tools = grant.tools
    return AgentRunContext(
        run_id=grant.run_id,
        trigger=Trigger(type=run.event_type, source=source, timestamp=when),
        event=EventInfo(
            event_id=run.event_id,
            event_type=run.event_type,
            event_time=when,
            source=source,
            source_event_type=event.source_event_type if event is not None else None,
            raw_ref=event.raw_ref if event is not None else None,
            data=dict(event.data) if event is not None else {},
        ),
        conversation=(
            ConversationInfo(**event.conversation.model_dump())
            if event is not None and event.conversation is not None
            else None
        ),
        actor=ActorInfo(**event.actor.model_dump()) if event is not None and event.actor else None,
        subject=SubjectInfo(**event.subject.model_dump()) if event is not None and event.subject else None,
        input=(
            RunInput(
                text=event.input.text,
                contents=list(event.input.contents),
                attachments=list(event.input.attachments),
            )
            if event is not None
            else RunInput()
        ),
        delivery=event.delivery if event is not None else Delivery(),
        resources=Resources(
            tools=[
                ToolInfo(name=glob, description="host tools matching this pattern")
                for glob in grant.host_tool_globs
            ],
            knowledge_bases=[KnowledgeBaseInfo(kb_id=kb, name=kb) for kb in sorted(grant.knowledge_bases)],
            storage=StorageInfo(areas=sorted(grant.storage_areas)),
        ),
        context=ContextAccess(
            conversation_id=grant.conversation_id,
            thread_id=grant.thread_id,
            latest_cursor=latest,
            has_history_before=has_before,
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
        ),
        state=state_snapshot(state),
        runtime=Runtime(host_version=__version__, trace_id=grant.run_id, deadline_at=grant.deadline_at),
    )
