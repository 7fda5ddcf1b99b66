"""The run grant: the three-layer cut of PROTOCOL §6, token minting, and the checks used per call.

Owns the rule that turns (runner manifest permissions) ∩ (agent policy) ∩ (event scope) into a frozen
`RunGrant`. Invariants: the cut is computed once per run, here; every later check (the MCP endpoint,
the journal's `state.updated` check) reads the same frozen grant and never recomputes it. Tokens are
256-bit random values; only their SHA-256 is stored, and they are compared in constant time.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import secrets
from collections.abc import Mapping

from mcphost.models import AgentBinding, AgentEventEnvelope, RunGrant
from mcphost.protocol import AgentRunnerManifest, parse_runner_id

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
ALL_FACTS_TOOLS: frozenset[str] = frozenset(
    [t for tools in FACTS_TOOLS_BY_PERMISSION.values() for t in tools]
    + list(STORAGE_TOOLS)
    + list(ALWAYS_TOOLS)
)

TOKEN_BYTES = 32
"""256-bit run tokens."""


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
    """Cut manifest ∩ agent policy ∩ event scope into the run's frozen grant."""
    perms = manifest.permissions
    agent = binding.agent
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

    state_scopes = frozenset(agent.state.scopes)
    state_read = state_scopes if "read" in granted["state"] else frozenset[str]()
    state_write = state_scopes if "write" in granted["state"] else frozenset[str]()

    conv, actor, subject = event.conversation, event.actor, event.subject
    author, plugin, _ = parse_runner_id(manifest.id)
    return RunGrant(
        run_id=run_id,
        runner_id=manifest.id,
        plugin=f"{author}/{plugin}",
        binding_id=binding.binding_id,
        conversation_id=conv.conversation_id if conv else None,
        thread_id=conv.thread_id if conv else None,
        actor_id=actor.actor_id if actor else None,
        subject_type=subject.subject_type if subject else None,
        subject_id=subject.subject_id if subject else None,
        bot_id=conv.bot_id if conv else None,
        workspace_id=conv.workspace_id if conv else None,
        tools=frozenset(tools),
        host_tool_globs=tuple(agent.resources.tools) if "call" in perms.tools else (),
        ask=tuple(sorted(agent.approvals)),
        knowledge_bases=frozenset(agent.resources.knowledge_bases) if granted["knowledge"] else frozenset(),
        state_read=state_read,
        state_write=state_write,
        storage_areas=storage_areas,
        artifact_create="create" in granted["artifacts"],
        deadline_at=deadline_at,
        token_hash=token_hash,
        call_budget=agent.budget.calls,
        byte_budget=agent.budget.bytes,
    )


def allows_host_tool(grant: RunGrant, tool_name: str) -> bool:
    """True when the host tool `<server>__<tool>` matches one of the agent's granted globs."""
    return any(fnmatch.fnmatchcase(tool_name, pattern) for pattern in grant.host_tool_globs)


def allows_state(grant: RunGrant, scope: str, *, write: bool) -> bool:
    return scope in (grant.state_write if write else grant.state_read)
