"""What admission decides and builds: the checks an event passes before anything is stored, the run
and its grant, the event-log row written with them, the context a run starts with, and what a run
adopted from a stopped host needs to run again (or, executing on a runtime, to be followed again).

Owns building; it stores nothing itself and does not move a run's phase (`_core.py` does both). The
context builder (`ContextBuilder.starter`) runs inside the transaction that moves a run to `running`
(`runs.try_start`, or `runs.admit` starting it at once) and awaits nothing: on SQLite it runs on the
writer thread.

Invariants:
- `check_inputs` and the artifact reads come before anything is stored: an event that cannot run
  changes nothing.
- The context with the token is kept only on the run's `ActiveRun` (memory); the token-free one is
  what the store keeps and what a recording's header shows.
- The `tools/list` of a grant is a function of its allowed tools alone, so it is built once per set of
  tools (`TOOL_LISTS_KEPT`). A context's `StaticParts` (resources, checked config, `static_refs`) are a
  function of the agent, its runner's manifest and the grant's resource sets, so they are built once
  per such shape (`STATIC_PARTS_KEPT`), keyed by the agent and manifest objects themselves: a reloaded
  agent or runner is new objects, built anew. A config the manifest refuses is refused every time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from mcphost import tracing
from mcphost.common.validation import describe
from mcphost.context import (
    SNAPSHOT_SCOPES,
    StaticParts,
    build_context,
    content_sha256,
    static_parts,
    with_token,
)
from mcphost.errors import HostError, InvalidArgumentError
from mcphost.grants import build_grant, mint_token
from mcphost.models import (
    AgentBinding,
    AgentConfig,
    AgentEventEnvelope,
    Run,
    RunFailure,
    RunGrant,
    RunStatus,
    new_id,
)
from mcphost.orchestrator import _tuning as tuning
from mcphost.orchestrator._active import ActiveRun
from mcphost.orchestrator._execution import ExecutingRunner
from mcphost.protocol import AgentRunContext, AgentRunnerManifest, HostModelInfo, JSONObject
from mcphost.stores import ScopeSnapshot, Stores, event_values
from mcphost.stores.hosts import HOST_RESTARTED
from mcphost.stores.runs import StartContext
from mcphost.warm import WarmSessions, wants_warm

logger = logging.getLogger("mcphost.orchestrator")

Resolve = Callable[[AgentEventEnvelope], tuple[AgentBinding, ExecutingRunner]]
"""The orchestrator's binding of an event: its agent and runner, or the HostError that says why not."""


async def check_inputs(stores: Stores, event: AgentEventEnvelope) -> None:
    """The event's inputs hold together: media contents among its attachments, which exist (as its raw
    body does); else the HostError that says why."""
    for content in event.input.contents:
        if content.type != "text" and not any(
            a.artifact_id == content.artifact_id for a in event.input.attachments
        ):
            raise InvalidArgumentError(
                f"input.contents names artifact {content.artifact_id!r}, which is not among input.attachments; "
                "upload it first and list it in attachments"
            )
    for ref in event.input.attachments:
        await stores.artifacts.describe(ref.artifact_id)  # NotFoundError: nothing stored yet; never fetches
    if event.raw_ref is not None:
        await stores.artifacts.describe(event.raw_ref)


def new_run(
    event: AgentEventEnvelope,
    binding: AgentBinding,
    manifest: AgentRunnerManifest,
    *,
    host_id: str,
    timeout_s: float,
    created_by: str | None,
) -> tuple[Run, RunGrant, str]:
    """A new queued run of `event` on this host, its grant (deadline `timeout_s` from now) and token."""
    run_id = new_id("run")
    now = time.time()
    token, token_hash = mint_token()
    grant = build_grant(
        run_id=run_id,
        event=event,
        binding=binding,
        manifest=manifest,
        token_hash=token_hash,
        deadline_at=now + timeout_s,
    )
    if tracing.enabled():  # the ingest span, for whichever host starts the run
        trace = tracing.carrier()
        grant = grant.model_copy(
            update={
                "traceparent": trace.get(tracing.TRACEPARENT),
                "tracestate": trace.get(tracing.TRACESTATE),
            }
        )
    run = Run(
        run_id=run_id,
        event_id=event.event_id,
        event_type=event.event_type,
        agent_id=binding.agent.id,
        runner_id=manifest.id,
        conversation_id=event.conversation_id,
        thread_id=event.thread_id,
        status=RunStatus.QUEUED,
        created_at=now,
        deadline_at=grant.deadline_at,
        host_id=host_id,
        created_by=created_by,
    )
    return run, grant, token


def inbound(event: AgentEventEnvelope, run_id: str) -> dict[str, Any]:
    """The event-log row of a run's event, written together with the run."""
    return event_values(
        event_id=event.event_id,
        event_type=event.event_type,
        kind="inbound",
        conversation_id=event.conversation_id,
        thread_id=event.thread_id,
        run_id=run_id,
        actor_id=event.actor.actor_id if event.actor else None,
        source=event.source,
        payload=event.model_dump(mode="json"),
    )


def snapshot_scopes(grant: RunGrant) -> list[tuple[str, tuple[str, ...]]]:
    """The (scope, owner) pairs whose state the run's context shows (read as it starts)."""
    return [
        (scope, owner)
        for scope in SNAPSHOT_SCOPES
        if scope in grant.state_read and (owner := grant.state_scope_id(scope)) is not None
    ]


def no_tools(grant: RunGrant) -> Sequence[JSONObject]:
    """The tool list of an orchestrator built without the facts server's table (tests): none."""
    del grant
    return ()


class ContextBuilder:
    """Builds the context each run starts with, from the host's knowledge bases, skills and tools."""

    def __init__(
        self,
        *,
        public_url: str,
        knowledge_bases: Mapping[str, tuple[str, str]] | None,
        skills: Mapping[str, tuple[str, str]] | None,
        models: Mapping[str, HostModelInfo] | None,
        tool_list: Callable[[RunGrant], Sequence[JSONObject]] | None,
        revise_context: Callable[[AgentRunContext], AgentRunContext] | None,
        warm: WarmSessions | None,
    ) -> None:
        self.public_url = public_url
        self._knowledge_bases = dict(knowledge_bases or {})
        self._skills = dict(skills or {})
        self._models = dict(models or {})
        self._tool_list: Callable[[RunGrant], Sequence[JSONObject]] = tool_list or no_tools
        """The facts tools a grant allows, as `tools/list` shows them (hashed into `static_refs`)."""
        self._tool_lists: dict[frozenset[str], tuple[Sequence[JSONObject], str]] = {}
        self._statics: dict[tuple[Any, ...], tuple[AgentConfig, AgentRunnerManifest, StaticParts]] = {}
        """`StaticParts` per agent, manifest and grant shape (`static_of`)."""
        self._revise_context = revise_context
        """Replaces each run's freshly built context (a replay runs on the recorded one)."""
        self._warm = warm
        """Warm harness sessions: agents with `warm = true` get the session endpoint, bound per run."""

    def starter(
        self, active: ActiveRun, event: AgentEventEnvelope, binding: AgentBinding, grant: RunGrant, token: str
    ) -> StartContext:
        """The run's context builder, called by `runs.try_start` inside the start transaction: the
        token-free context is stored on the run, the one with the token is kept on `active`."""

        async def build(
            latest: str | None, has_before: bool, state: Mapping[str, ScopeSnapshot]
        ) -> AgentRunContext:
            tools, tools_sha256 = self.tools_of(grant)
            static = self.static_of(binding, active.runner.manifest, grant, tools, tools_sha256)
            ctx = build_context(
                run_id=active.run_id,
                event=event,
                binding=binding,
                grant=grant,
                manifest=active.runner.manifest,
                public_url=self.public_url,
                latest_cursor=latest,
                has_history_before=has_before,
                state=state,
                knowledge_bases=self._knowledge_bases,
                skills=self._skills,
                models=self._models,
                tools=tools,
                tools_sha256=tools_sha256,
                static=static,
            )
            if self._revise_context is not None:
                ctx = self._revise_context(ctx)
            warm = self._warm if self._warm is not None and wants_warm(binding.agent.config) else None
            if warm is not None:
                ctx = warm.offer(ctx, agent_id=binding.agent.id, public_url=self.public_url)
            if grant.record:
                active.recording = ctx
            runner_ctx = with_token(ctx, token)
            active.context = warm.with_token(runner_ctx) if warm is not None else runner_ctx
            return ctx

        return build

    def static_of(
        self,
        binding: AgentBinding,
        manifest: AgentRunnerManifest,
        grant: RunGrant,
        tools: Sequence[JSONObject],
        tools_sha256: str,
    ) -> StaticParts:
        """`static_parts` of a run's context, built once per agent, manifest and grant shape: the
        `instructions` and `resources` hashes and the config check took 19 of the 53 µs of an echo
        agent's context, 32 of 68 µs with a 20 KB prompt (hashed whole)."""
        agent = binding.agent
        key = (
            id(agent),
            id(manifest),
            grant.models,
            grant.model_calls,
            grant.host_tool_globs,
            grant.knowledge_bases,
            grant.storage_areas,
            tools_sha256,
        )
        kept = self._statics.get(key)
        if kept is not None and kept[0] is agent and kept[1] is manifest:  # not a reused id
            return kept[2]
        static = static_parts(
            binding=binding,
            grant=grant,
            manifest=manifest,
            knowledge_bases=self._knowledge_bases,
            skills=self._skills,
            tools=tools,
            tools_sha256=tools_sha256,
            models=self._models,
        )
        if len(self._statics) >= tuning.STATIC_PARTS_KEPT:
            self._statics.clear()
        self._statics[key] = (agent, manifest, static)
        return static

    def tools_of(self, grant: RunGrant) -> tuple[Sequence[JSONObject], str]:
        """`tool_list(grant)` and its hash (`static_refs`), built once per set of allowed tools (agents
        reuse a handful of sets)."""
        kept = self._tool_lists.get(grant.tools)
        if kept is None:
            if len(self._tool_lists) >= tuning.TOOL_LISTS_KEPT:
                self._tool_lists.clear()
            tools = tuple(self._tool_list(grant))
            kept = self._tool_lists[grant.tools] = (tools, content_sha256(list(tools)))
        return kept


def trace_binding(
    start_ns: int,
    event: AgentEventEnvelope,
    binding: AgentBinding | None,
    run_id: str | None,
    error: str | None,
) -> None:
    """The binding step as a finished child of the ingest span, once the run it chose is known."""
    if not tracing.enabled():
        return
    attributes: dict[str, str | int | float | bool] = {tracing.EVENT_TYPE: event.event_type}
    if binding is not None:
        attributes[tracing.AGENT_NAME] = binding.agent.id
        attributes[tracing.BINDING_ID] = binding.binding_id
    if run_id is not None:
        attributes[tracing.RUN_ID] = run_id
    tracing.record("mcphost.binding", start_ns=start_ns, attributes=attributes, error_type=error)


async def _rebound(
    stores: Stores, run_id: str, resolve: Resolve
) -> tuple[AgentEventEnvelope, AgentBinding, ExecutingRunner] | str:
    """The event of a run adopted from a stopped host, read back from the event log and bound again to
    the same agent and runner; else why it cannot be (`where: what`, never the event's text)."""
    run = await stores.runs.get(run_id)
    try:
        event = AgentEventEnvelope.model_validate((await stores.events.get(run.event_id)).payload)
        binding, runner = resolve(event)
        if (binding.agent.id, runner.manifest.id) != (run.agent_id, run.runner_id):
            raise InvalidArgumentError(
                f"its event now binds to agent {binding.agent.id!r} (runner {runner.manifest.id!r}) "
                f"instead of {run.agent_id!r} ({run.runner_id!r})"
            )
    except (HostError, ValidationError) as exc:
        # A validation error's text quotes the input (event text): only `where: what` is stored.
        return exc.message if isinstance(exc, HostError) else describe(exc, root="(event)")
    return event, binding, runner


def _not_again(message: str) -> RunFailure:
    return HOST_RESTARTED.model_copy(
        update={"message": f"{HOST_RESTARTED.message} It could not be re-queued: {message}"}
    )


async def readmit(
    stores: Stores,
    run_id: str,
    resolve: Resolve,
    *,
    host_id: str,
) -> tuple[AgentEventEnvelope, AgentBinding, ExecutingRunner, RunGrant, str] | None:
    """What a queued run adopted from a stopped host needs to run here: its event read back from the
    event log and bound again, and its grant with a new token (the old one died with its host), now
    owned by `host_id`. None when it cannot run again: when its event no longer binds to the same agent
    and runner, it is failed `host.restarted` with why; when another host adopted it first, it is left."""
    rebound = await _rebound(stores, run_id, resolve)
    if isinstance(rebound, str):
        await stores.runs.transition(run_id, RunStatus.FAILED, error=_not_again(rebound))
        logger.warning("run %s could not be re-queued after a host restart: %s", run_id, rebound)
        return None
    event, binding, runner = rebound
    token, token_hash = mint_token()
    grant = (await stores.runs.grant(run_id)).grant.model_copy(update={"token_hash": token_hash})
    if not await stores.runs.replace_grant(run_id, grant, host_id=host_id):
        return None
    return event, binding, runner, grant, token


async def readopt(
    stores: Stores,
    run_id: str,
    resolve: Resolve,
    *,
    remote: bool,
) -> tuple[AgentEventEnvelope, AgentBinding, ExecutingRunner, RunGrant, AgentRunContext] | None:
    """What a run executing on a runtime, adopted from a stopped host, needs to be followed here: its
    event bound again, its grant unchanged (the runtime's fenced MCP token is keyed by its token hash)
    and its token-free context. None when its event no longer binds to the same agent and runner (it is
    failed `host.restarted` with why, and taken out of the queue), its agent runs locally now, this host
    follows no remote runs (`remote` False) or its context is gone."""
    rebound = await _rebound(stores, run_id, resolve)
    ctx = await stores.runs.context(run_id)
    if isinstance(rebound, str):
        why = rebound
    elif not remote or rebound[1].agent.runtime == "local":
        why = "its agent no longer runs on runtimes here"
    elif ctx is None:
        why = "its stored context is missing"
    else:
        event, binding, runner = rebound
        return event, binding, runner, (await stores.runs.grant(run_id)).grant, ctx
    await stores.runs.finish(run_id, RunStatus.FAILED, error=_not_again(why))
    await stores.dispatch.drop(run_id)
    logger.warning("run %s could not be followed on its runtime after a host restart: %s", run_id, why)
    return None
