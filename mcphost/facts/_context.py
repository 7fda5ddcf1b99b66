"""The run context as the facts server hands it back: the one the run was started with, without its token.

Owns `load_context` (the provider's in-memory copy, else the copy the runs store kept when the run
started) and `redact` (the token out of `context.mcp`). Builds nothing: `context.py` is the one builder.

Invariants:
- Every replica answers a run's context requests with the same context: the provider (the host that
  runs it) holds exactly what `RunStore.try_start` stored, so both sources give equal answers.
- What leaves here never contains the run token: the `Authorization` header and the bridge's token
  variable are removed, and so is any other header or environment value whose hash is the grant's token
  hash (a host that put the token somewhere unexpected).
- A run with no stored context — an inspection grant (no runner), or a run started before migration
  0007 — gets `context.grant_context` over its row, event and grant, with the thread's head and the
  granted state as they are now: no `config` (the `instructions` prompt says there is none), knowledge
  bases by id, no `mcp` (the caller is already connected).
"""

from __future__ import annotations

from pydantic import ValidationError

from mcphost.context import SNAPSHOT_SCOPES, TOKEN_ENV, grant_context
from mcphost.errors import NotFoundError
from mcphost.facts.providers import ContextProvider
from mcphost.grants import token_matches
from mcphost.models import AgentEventEnvelope, RunGrant
from mcphost.protocol import AgentRunContext, MCPAccess
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
    """The run's context without its token: the provider's copy, else the stored one, else what the
    stores still say of a run that has none stored (`context.grant_context`)."""
    ctx = await provider(grant.run_id) if provider is not None else None
    if ctx is None:
        ctx = await stores.runs.context(grant.run_id)
    if ctx is None:
        ctx = await _unstored(stores, grant)
    return redact(ctx, grant.token_hash)


async def _event_of(stores: Stores, event_id: str) -> AgentEventEnvelope | None:
    try:
        stored = await stores.events.get(event_id)
        return AgentEventEnvelope.model_validate(stored.payload)
    except (NotFoundError, ValidationError):
        return None


async def _unstored(stores: Stores, grant: RunGrant) -> AgentRunContext:
    """The context of a run that was not started with one (an inspection grant, or a run started before
    migration 0007): its row, event and grant, and the thread's head and granted state as they are now."""
    run = await stores.runs.get(grant.run_id)
    latest: str | None = None
    has_before = False
    if grant.conversation_id is not None:
        latest, has_before = await stores.transcript.head(grant.conversation_id, grant.thread_id)
    state: dict[str, ScopeSnapshot] = {}
    for scope in SNAPSHOT_SCOPES:
        owner = grant.state_scope_id(scope)
        if scope in grant.state_read and owner is not None:
            state[scope] = await stores.state.snapshot(scope, owner)
    return grant_context(
        run,
        grant,
        await _event_of(stores, run.event_id),
        latest_cursor=latest,
        has_history_before=has_before,
        state=state,
    )
