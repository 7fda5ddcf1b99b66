"""Inspection grants: runs without a runner, whose MCP endpoint reads one conversation for a while.

Owns creating, ending and sweeping these runner-less runs. Does not own when they end: the orchestrator
calls `end_grant` (cancel) and `end_expired` (its grant sweeper) and runs its `on_run_end` callbacks
after each, as for any run; `mcphost grant` / `mcphost revoke` call `create_grant` / `end_grant` on the
database directly (no host needed). Nothing else writes the status of a runner-less run.

Invariants:
- A grant is a runs row written through `RunStore` like any run: status `running` with no owning host
  (so host recovery never fails it), bound to one conversation through the grant only (the runs row has
  no conversation, so the grant never holds up the conversation's queue).
- Host tools are granted only when named (`<server>__<tool>` globs); a glob such as `*` never reaches
  them, so narrowing the facts tools can never widen the grant to every upstream tool.
- Everything is checked before anything is stored; the token is returned once and only its hash is kept.
- Past its deadline the facts server refuses the grant's token regardless; `end_expired` only records
  the end (`completed`).
"""

from __future__ import annotations

import fnmatch
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from mcphost.errors import InvalidArgumentError
from mcphost.grants import mint_token
from mcphost.models import Run, RunFailure, RunGrant, RunStatus, new_id
from mcphost.stores import Stores

logger = logging.getLogger(__name__)

INSPECTION_EVENT_TYPE = "inspection.granted"
INSPECTION_READ_TOOLS: tuple[str, ...] = (
    "run_context",
    "history_page",
    "history_search",
    "events_get",
    "events_page",
    "artifacts_metadata",
    "artifacts_read",
)
INSPECTION_WRITE_TOOLS: tuple[str, ...] = ("artifacts_create",)
MAX_GRANT_TTL_S = 30 * 24 * 3600.0
GRANT_SWEEP_S = 30.0
"""How often the orchestrator closes inspection grants past their deadline."""


@dataclass(frozen=True)
class InspectionGrant:
    """A fresh inspection grant. `token` is shown once and never stored (only its hash is)."""

    run: Run
    grant: RunGrant
    token: str


def _tool_names(
    tools: Sequence[str], host_tools: Sequence[str], write: bool
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(facts tool names, host tool globs) a grant of these arguments gets; raises on a bad glob."""
    for glob in host_tools:
        if "__" not in glob:
            raise InvalidArgumentError(
                f"--host-tools {glob!r} does not name a host tool: write '<server>__<tool>' (globs allowed, "
                "such as 'search__*'), so that every host tool a grant reaches is named on purpose."
            )
    host_globs = tuple(dict.fromkeys([*(g for g in tools if "__" in g), *host_tools]))
    facts_globs = [g for g in tools if "__" not in g]
    available = INSPECTION_READ_TOOLS + INSPECTION_WRITE_TOOLS
    names = INSPECTION_READ_TOOLS + (INSPECTION_WRITE_TOOLS if write else ())
    for glob in facts_globs:
        if not any(fnmatch.fnmatchcase(n, glob) for n in available):
            raise InvalidArgumentError(
                f"--tools {glob!r} matches no tool an inspection grant can have ({', '.join(available)}) and "
                "names no host tool ('<server>__<tool>')."
            )
        if not any(fnmatch.fnmatchcase(n, glob) for n in names):
            raise InvalidArgumentError(f"--tools {glob!r} only matches tools that need --write.")
    if tools:  # `--tools` given (even only host tool globs): only the facts tools it matches
        names = tuple(n for n in names if any(fnmatch.fnmatchcase(n, g) for g in facts_globs))
    return tuple(dict.fromkeys(("run_context", *names))), host_globs


async def create_grant(
    stores: Stores,
    *,
    conversation_id: str,
    thread_id: str | None = None,
    ttl_s: float = 3600.0,
    tools: Sequence[str] = (),
    host_tools: Sequence[str] = (),
    write: bool = False,
    source: str = "cli",
) -> InspectionGrant:
    """A run with no runner whose MCP endpoint reads one conversation until `ttl_s` from now.

    Read-only (history, events, artifacts) unless `write` (artifacts_create). `tools` are globs that keep
    only the matching facts tools. Host tools (`<server>__<tool>`) are granted only when named: by the
    `host_tools` globs, or by a `tools` glob that itself contains `__`.
    """
    if not 0 < ttl_s <= MAX_GRANT_TTL_S:
        raise InvalidArgumentError(f"ttl must be more than 0 s and at most 30 days; got {ttl_s:g} s.")
    names, host_globs = _tool_names(tools, host_tools, write)
    run_id = new_id("run")
    token, token_hash = mint_token()
    now = time.time()
    grant = RunGrant(
        run_id=run_id,
        runner_id=None,
        plugin=None,
        binding_id=None,
        conversation_id=conversation_id,
        thread_id=thread_id,
        actor_id=None,
        subject_type=None,
        subject_id=None,
        bot_id=None,
        workspace_id=None,
        tools=frozenset(names),
        host_tool_globs=host_globs,
        artifact_create=write,
        deadline_at=now + ttl_s,
        token_hash=token_hash,
    )
    run = Run(
        run_id=run_id,
        event_id=new_id("evt"),
        event_type=INSPECTION_EVENT_TYPE,
        agent_id=None,
        runner_id=None,
        conversation_id=None,  # see the module docstring: the grant carries the conversation
        thread_id=None,
        status=RunStatus.QUEUED,
        created_at=now,
        deadline_at=grant.deadline_at,
    )
    await stores.runs.admit(run, grant=grant, concurrency="enqueue")
    run = await stores.runs.transition(run_id, RunStatus.RUNNING)
    await stores.events.append(
        event_id=run.event_id,
        event_type=INSPECTION_EVENT_TYPE,
        kind="system",
        conversation_id=None,
        thread_id=None,
        run_id=run_id,
        actor_id=None,
        source=source,
        payload={
            "conversation_id": conversation_id,
            "thread_id": thread_id,
            "tools": sorted(names),
            "host_tool_globs": list(grant.host_tool_globs),
            "write": write,
            "ttl_s": ttl_s,
        },
    )
    logger.info(
        "inspection grant %s for conversation %s until %.0f", run_id, conversation_id, grant.deadline_at
    )
    return InspectionGrant(run=run, grant=grant, token=token)


async def end_grant(
    stores: Stores, run_id: str, reason: str, *, status: RunStatus = RunStatus.CANCELLED
) -> Run:
    """End a runner-less run (its token stops working; other processes notice within their grant cache TTL).

    An already ended grant is returned as it is.
    """
    run = await stores.runs.get(run_id)
    if run.runner_id is not None:
        raise InvalidArgumentError(
            f"Run {run_id!r} is a run of {run.runner_id!r}, not an inspection grant; cancel it instead."
        )
    if run.status.is_terminal:
        return run
    error = None
    if status is not RunStatus.COMPLETED:
        error = RunFailure(
            code="cancelled", message=f"Inspection grant revoked: {reason}.", details={"reason": reason}
        )
    return await stores.runs.transition(run_id, status, error=error)


async def end_expired(stores: Stores, *, max_pages: int = 20) -> list[Run]:
    """Move runner-less runs past their deadline to `completed`; the runs as ended."""
    ended: list[Run] = []
    cursor: str | None = None
    now = time.time()
    for _ in range(max_pages):
        page = await stores.runs.list(status=RunStatus.RUNNING, limit=100, cursor=cursor)
        for run in page.items:
            if run.runner_id is None and run.deadline_at <= now:
                ended.append(await end_grant(stores, run.run_id, "expired", status=RunStatus.COMPLETED))
        if not page.has_more:
            break
        cursor = page.next_cursor
    return ended
