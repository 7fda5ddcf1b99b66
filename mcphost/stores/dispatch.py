"""The queue of remote runs: enqueue, claim under a lease and a fence, posted results, ends, requeues.

Owns the `runtime_runs` and `runtime_results` tables (migration 0023) and the runtime audit kept once a
run ends (`runtime_audit`, migration 0027). Does not own the runs
themselves (`stores/runs.py`: a remote run is `running` on the host whose orchestrator executes it, as a
local one is), the runtimes (`stores/runtimes.py`) or when a lost lease is requeued or failed (the
host's executor, `runtimes/remote.py`, decides with the agent's `on_lost`).

Invariants:
- A run is held by at most one runtime at a time: `claim` moves a `queued` row to `claimed` in one
  write transaction (`FOR UPDATE SKIP LOCKED` on PostgreSQL, so claimers never wait on each other;
  SQLite's single writer serializes them) and bumps `fence`.
- Everything a runtime sends about a run (`post_results`, `post_end`) carries the fence of its claim
  and is refused with a `ConflictError` whose `details.reason` says why (`not_held`, `stale_fence`,
  `sequence_gap`) unless the run is `claimed` by that runtime under that fence.
- Results are numbered 1.. per fence; a batch that repeats numbers already stored is accepted again
  without storing them twice (a retry), a batch that skips numbers is refused (`sequence_gap`).
- `requeue` and `lose` are conditional on the fence they were decided on, so a claim that happened
  meanwhile is never undone; a requeue deletes the results of the lost fence not yet journaled, and its
  audit event keeps the runner-sequence shift of the attempts after it (`shift_of`), so a host that
  adopts the run later numbers them as the lost host did.
- A posted result row is deleted in the transaction that journals it (`stores/results.py`, `consumed`):
  whatever rows remain were never journaled, so a host that adopts a run after its host died forwards
  exactly those, in order (`adopt`).
- The runtime audit of a run (`audit`) is its row's events and current claim's timings while it is
  queued or claimed, and the copy `drop` keeps in `runtime_audit` (same transaction) once it ended: a
  claim that ends (requeued, lost, ended) records its renewals and timings in its event, so the events
  alone tell every attempt's story. At most `EVENTS_KEPT` events, oldest dropped first.

Size: past 600 lines because every write of the queue (enqueue, claim, heartbeat, results, end, output,
requeue, lose, adopt, drop) checks and moves the same row under the same fence rules, and each records
its runtime audit event in the same transaction; the audit's own table and views are in
`runtime_audit.py`.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Select, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from mcphost.errors import ConflictError
from mcphost.stores.engine import LONG_WRITE_BYTES, Database
from mcphost.stores.runtime_audit import (
    EVENTS_KEPT,
    RuntimeAudit,
    claim_facts,
    is_output_of,
    keep,
    kept_audit,
    live_audit,
)
from mcphost.stores.runtimes import RuntimeRecord
from mcphost.stores.tables import RunRow, RuntimeAuditRow, RuntimeResultRow, RuntimeRow, RuntimeRunRow

CLAIM_CANDIDATES = 64
"""Queued rows a claim looks at (oldest first) for one its runtime is eligible for."""
VIEW_LIMIT = 512
"""At most this many results in one `view`."""
_ELIGIBILITY = (RuntimeRunRow.selector, RuntimeRunRow.runner_id)
"""What a claim's first look reads of each queued row."""


class QueuedRun(BaseModel):
    """What the host's executor puts in the queue for one run."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    run_id: str
    host_id: str
    runner_id: str
    selector: dict[str, str]
    on_lost: Literal["requeue", "fail"]
    context: dict[str, Any]
    token_hash: str
    deadline_at: float
    agent_id: str | None = None
    """The run's agent: the claim's projection (secrets, workspace, skills) is built from its config."""
    workspace: str | None = None
    """The agent's workspace name: only a runtime that has it claims the run."""


class Claim(BaseModel):
    """A run a runtime claimed: its token-free context, the fence and the lease."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    run_id: str
    runner_id: str
    context: dict[str, Any]
    token_hash: str
    fence: int
    lease_until: float
    deadline_at: float
    attempt: int
    agent_id: str | None = None


class PostedResult(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    seq: int
    nbytes: int
    dropped: bool
    result: dict[str, Any]


class DispatchView(BaseModel):
    """The queue row of a run as its executor reads it, with the results after a sequence."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    state: Literal["queued", "claimed"]
    runtime_id: str | None
    fence: int
    lease_until: float
    attempts: int
    cancel_reason: str | None
    end_status: str | None
    end_through: int
    results: list[PostedResult]


class Adopted(BaseModel):
    """A run's queue row as a host that adopts it finds it: the fence, and the shift of its runner
    sequences (the highest one journaled before the current attempt)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    fence: int
    shift: int


class HeldRun(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    run_id: str
    fence: int
    cancel_reason: str | None


class RuntimeClaim(BaseModel):
    """A run a runtime holds now, as the runtimes list shows it."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    run_id: str
    fence: int
    attempt: int
    claimed_at: float | None
    lease_until: float
    last_renewal_at: float | None


def _refused(run_id: str, reason: str, message: str, **details: Any) -> ConflictError:
    return ConflictError(message, details={"run_id": run_id, "reason": reason, **details})


def _append(events: Sequence[Any], event: dict[str, Any]) -> list[Any]:
    return [*events, event][-EVENTS_KEPT:]


async def _locked(session: AsyncSession, run_id: str) -> RuntimeRunRow | None:
    """The run's queue row, locked for this write transaction (None: none)."""
    stmt = select(RuntimeRunRow).where(RuntimeRunRow.run_id == run_id).with_for_update()
    return (await session.execute(stmt)).scalar_one_or_none()


def shift_of(events: Sequence[Any]) -> int:
    """The runner-sequence shift of the current attempt: the latest requeue's (0 when never requeued).
    The latest requeue is always among the last events kept (a claim and an end follow it at most)."""
    for event in reversed(events):
        if isinstance(event, dict) and event.get("event") == "requeued":  # pyright: ignore[reportUnknownMemberType]
            shift = event.get("shift", 0)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            return shift if isinstance(shift, int) else 0
    return 0


async def _lapsed_claim(
    session: AsyncSession, run_id: str, fence: int, event: str, why: str, **extra: Any
) -> RuntimeRunRow | None:
    """The run's row (locked) with `event` (and `extra`) recorded, when it is still claimed under `fence`
    and has not ended; else None (claimed again or ended meanwhile: nothing recorded)."""
    row = await _locked(session, run_id)
    if row is None or row.fence != fence or row.state != "claimed" or row.end_status is not None:
        return None
    row.events = _append(
        row.events, {"event": event, "at": time.time(), "why": why[:500], **claim_facts(row), **extra}
    )
    return row


def eligible(runtime: RuntimeRecord, selector: dict[str, str], runner_id: str) -> bool:
    """Whether `runtime` may run a run of `runner_id` whose agent selects `selector`."""
    labels = runtime.effective_labels
    return runner_id in runtime.runners() and all(labels.get(k) == v for k, v in selector.items())


class DispatchStore:
    """The queue of remote runs and the results their runtimes post."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def enqueue(self, run: QueuedRun) -> None:
        """Put `run` in the queue (again: a leftover row of the same run is replaced)."""
        now = time.time()

        async def enqueue_in(session: AsyncSession) -> None:
            await session.execute(delete(RuntimeRunRow).where(RuntimeRunRow.run_id == run.run_id))
            session.add(
                RuntimeRunRow(
                    run_id=run.run_id,
                    host_id=run.host_id,
                    runner_id=run.runner_id,
                    selector=run.selector,
                    on_lost=run.on_lost,
                    context=run.context,
                    token_hash=run.token_hash,
                    deadline_at=run.deadline_at,
                    agent_id=run.agent_id,
                    workspace=run.workspace,
                    state="queued",
                    runtime_id=None,
                    fence=0,
                    lease_until=0.0,
                    attempts=0,
                    queued_at=now,
                    cancel_reason=None,
                    end_status=None,
                    received=0,
                    end_through=0,
                    events=[{"event": "queued", "at": now}],
                    renewals=0,
                )
            )

        await self._db.run_write(enqueue_in)

    async def claim(
        self, runtime: RuntimeRecord, *, lease_s: float, look: bool = True, workspaces: Collection[str] = ()
    ) -> Claim | None:
        """The oldest queued run `runtime` is eligible for, now held by it; None when there is none, it
        has no free slot or it is not `online` as of this transaction. A run whose agent has a workspace
        is eligible only for a runtime that has it (`workspaces`, from the host's `[runtimes.<name>]`).

        With `look`, a read looks first: a claim that finds nothing (a runtime's long poll, several
        times a second) takes no write transaction, so it never queues behind the host's writers. A
        caller that knows a run was just queued passes `look=False` and saves that read."""
        now = time.time()
        queued = self._queued(now)
        if look:
            async with self._db.read() as session:
                waiting = (await session.execute(queued.with_only_columns(*_ELIGIBILITY))).all()
            if not any(eligible(runtime, dict(selector), runner_id) for selector, runner_id in waiting):
                return None

        async def claim_in(session: AsyncSession) -> Claim | None:
            state = (
                await session.execute(
                    select(RuntimeRow.state).where(RuntimeRow.runtime_id == runtime.runtime_id)
                )
            ).scalar_one_or_none()
            if state != "online":  # drained, disabled or removed since its caller read it
                return None
            held = (
                await session.execute(
                    select(func.count()).where(
                        RuntimeRunRow.runtime_id == runtime.runtime_id, RuntimeRunRow.state == "claimed"
                    )
                )
            ).scalar_one()
            if held >= runtime.slots:
                return None
            candidates = (await session.execute(queued.with_for_update(skip_locked=True))).scalars().all()
            for row in candidates:
                if not eligible(runtime, dict(row.selector), row.runner_id):
                    continue
                if row.workspace is not None and row.workspace not in workspaces:
                    continue
                row.state = "claimed"
                row.runtime_id = runtime.runtime_id
                row.fence += 1
                row.received = 0
                row.attempts += 1
                row.lease_until = now + lease_s
                row.runtime_name = runtime.name
                row.claimed_at = now
                row.first_result_at = None
                row.renewals = 0
                row.last_renewal_at = None
                row.events = _append(
                    row.events,
                    {
                        "event": "claimed",
                        "at": now,
                        "runtime": runtime.name,
                        "runtime_id": runtime.runtime_id,
                        "fence": row.fence,
                        "attempt": row.attempts,
                    },
                )
                await session.flush()
                return Claim(
                    run_id=row.run_id,
                    runner_id=row.runner_id,
                    context=dict(row.context),
                    token_hash=row.token_hash,
                    fence=row.fence,
                    lease_until=row.lease_until,
                    deadline_at=row.deadline_at,
                    attempt=row.attempts,
                    agent_id=row.agent_id,
                )
            return None

        return await self._db.run_write(claim_in)

    @staticmethod
    def _queued(now: float) -> Select[RuntimeRunRow]:
        """The queued rows a claim may take, oldest first (at most `CLAIM_CANDIDATES`)."""
        return (
            select(RuntimeRunRow)
            .where(
                RuntimeRunRow.state == "queued",
                RuntimeRunRow.cancel_reason.is_(None),
                RuntimeRunRow.deadline_at > now,
            )
            .order_by(RuntimeRunRow.queued_at, RuntimeRunRow.run_id)
            .limit(CLAIM_CANDIDATES)
        )

    async def heartbeat(
        self, runtime: RuntimeRecord, held: Sequence[tuple[str, int]], *, lease_s: float
    ) -> tuple[list[HeldRun], list[str]]:
        """The runtime is alive: its leases on the runs it says it holds (under their current fence)
        last another `lease_s`. Returns those runs (with any cancel asked for them) and the ids of the
        runs it named that it no longer holds (lost: stop them)."""
        now = time.time()
        wanted = dict(held)

        async def heartbeat_in(session: AsyncSession) -> list[HeldRun]:
            await session.execute(
                update(RuntimeRow)
                .where(RuntimeRow.runtime_id == runtime.runtime_id)
                .values(last_heartbeat_at=now)
            )
            held_rows = (
                await session.execute(
                    select(
                        RuntimeRunRow.run_id,
                        RuntimeRunRow.fence,
                        RuntimeRunRow.lease_until,
                        RuntimeRunRow.cancel_reason,
                    ).where(RuntimeRunRow.runtime_id == runtime.runtime_id, RuntimeRunRow.state == "claimed")
                )
            ).all()
            kept = [
                HeldRun(run_id=run_id, fence=fence, cancel_reason=cancel_reason)
                for run_id, fence, lease_until, cancel_reason in held_rows
                if wanted.get(run_id) == fence and lease_until > now
            ]
            if kept:
                # A statement, not ORM rows: a row its executor deleted meanwhile is skipped, not an error.
                await session.execute(
                    update(RuntimeRunRow)
                    .where(
                        RuntimeRunRow.run_id.in_([k.run_id for k in kept]),
                        RuntimeRunRow.runtime_id == runtime.runtime_id,
                        RuntimeRunRow.state == "claimed",
                    )
                    .values(
                        lease_until=now + lease_s,
                        renewals=RuntimeRunRow.renewals + 1,
                        last_renewal_at=now,
                    )
                    .execution_options(synchronize_session=False)
                )
            return kept

        kept = await self._db.run_write(heartbeat_in)
        held_now = {k.run_id for k in kept}
        return kept, [run_id for run_id in wanted if run_id not in held_now]

    async def _held(
        self, session: AsyncSession, runtime_id: str, run_id: str, fence: int, *, lock: bool
    ) -> RuntimeRunRow:
        stmt = select(RuntimeRunRow).where(RuntimeRunRow.run_id == run_id)
        row = (await session.execute(stmt.with_for_update() if lock else stmt)).scalar_one_or_none()
        if row is None or row.state != "claimed" or row.runtime_id != runtime_id:
            raise _refused(
                run_id,
                "not_held",
                f"Run {run_id!r} is not held by this runtime (it ended, was never claimed by it, or went "
                "back to the queue after its lease lapsed); stop it and drop what it produced.",
            )
        if row.fence != fence:
            raise _refused(
                run_id,
                "stale_fence",
                f"Fence {fence} of run {run_id!r} is stale (the current claim is fence {row.fence}); its "
                "lease lapsed and the run was claimed again. Stop it and drop what it produced.",
                fence=row.fence,
            )
        if row.lease_until <= time.time():
            raise _refused(
                run_id,
                "lease_expired",
                f"The lease of run {run_id!r} (fence {fence}) lapsed before this arrived; the run goes back "
                "to the queue. Stop it and drop what it produced.",
                fence=row.fence,
            )
        return row

    async def post_results(
        self,
        runtime_id: str,
        run_id: str,
        fence: int,
        first_seq: int,
        items: Sequence[PostedResult],
        end: str | None = None,
    ) -> tuple[int, str | None]:
        """Store a batch numbered from `first_seq` (with `end`, the runner's answer after its last
        result: the run's end too, as `post_end` records it); returns the last number stored for the
        fence and the cancel reason asked for the run (None: none).

        Raises:
            ConflictError: not held under `fence`, or the batch starts past the next number.
        """
        now = time.time()
        last_seq = first_seq + len(items) - 1

        async def post_in(session: AsyncSession) -> tuple[int, str | None]:
            row = await self._held(session, runtime_id, run_id, fence, lock=True)
            if row.end_status is not None and end is not None and last_seq == row.end_through:
                return row.received, row.cancel_reason  # a retry of the same batch and end
            if row.end_status is not None:
                raise _refused(
                    run_id,
                    "ended",
                    f"Run {run_id!r} already posted its end (fence {fence}); no more results.",
                )
            last = row.received
            if first_seq > last + 1:
                raise _refused(
                    run_id,
                    "sequence_gap",
                    f"Results of run {run_id!r} start at {first_seq} but the next expected is {last + 1}; "
                    "send the missing ones first.",
                    expected=last + 1,
                )
            fresh = [r for r in items if r.seq > last]
            for item in fresh:
                session.add(
                    RuntimeResultRow(
                        run_id=run_id,
                        fence=fence,
                        seq=item.seq,
                        nbytes=item.nbytes,
                        dropped=item.dropped,
                        result=item.result,
                    )
                )
            if fresh:
                row.received = fresh[-1].seq
                if row.first_result_at is None:
                    row.first_result_at = now
            if end is not None:
                row.end_status = end
                row.end_through = last_seq
                row.events = _append(
                    row.events, {"event": "ended", "at": now, "status": end, **claim_facts(row)}
                )
            await session.flush()
            return row.received, row.cancel_reason

        return await self._db.run_write(post_in, long=sum(i.nbytes for i in items) > LONG_WRITE_BYTES)

    async def post_end(self, runtime_id: str, run_id: str, fence: int, status: str, last_seq: int) -> None:
        """The runner answered with `status` after result `last_seq` (all stored first).

        Raises:
            ConflictError: not held under `fence`, or results up to `last_seq` are missing.
        """
        now = time.time()

        async def end_in(session: AsyncSession) -> None:
            row = await self._held(session, runtime_id, run_id, fence, lock=True)
            if row.end_status is not None:
                return  # a retry of the same end
            stored = row.received
            if stored != last_seq:
                raise _refused(
                    run_id,
                    "sequence_gap",
                    f"The end of run {run_id!r} says its last result is {last_seq} but {stored} are stored; "
                    "send every result before the end.",
                    expected=stored + 1,
                )
            row.end_status = status
            row.end_through = last_seq
            row.events = _append(
                row.events, {"event": "ended", "at": now, "status": status, **claim_facts(row)}
            )

        await self._db.run_write(end_in)

    async def check_held(self, runtime_id: str, run_id: str, fence: int) -> None:
        """Refuse (as `post_results` would) unless `runtime_id` holds `run_id` under `fence` now.

        Raises:
            ConflictError: `not_held`, `stale_fence` or `lease_expired`.
        """
        async with self._db.read() as session:
            await self._held(session, runtime_id, run_id, fence, lock=False)

    async def post_output(
        self, runtime_id: str, run_id: str, fence: int, *, artifact_id: str, size: int, cut_bytes: int
    ) -> None:
        """Record the artifact holding the runner's output the claim under `fence` posted (a retry
        records the newer one).

        Raises:
            ConflictError: not held under `fence` (the artifact stays unreferenced; retention takes it).
        """
        now = time.time()
        async with self._db.write() as session:
            row = await self._held(session, runtime_id, run_id, fence, lock=True)
            event = {
                "event": "output",
                "at": now,
                "fence": fence,
                "artifact_id": artifact_id,
                "bytes": size,
                "cut_bytes": cut_bytes,
            }
            row.events = _append([e for e in row.events if not is_output_of(e, fence)], event)

    async def lose(self, run_id: str, fence: int, why: str) -> bool:
        """Record that the claim under `fence` was lost and the run fails (its agent's `on_lost` is
        `fail`); False when it was claimed again or ended meanwhile."""
        async with self._db.write() as session:
            row = await _lapsed_claim(session, run_id, fence, "lost", why)
            return row is not None

    async def view(self, run_id: str, after: int) -> DispatchView | None:
        """The run's queue row with the results of its current fence numbered after `after`."""
        async with self._db.read() as session:
            row = (
                await session.execute(select(RuntimeRunRow).where(RuntimeRunRow.run_id == run_id))
            ).scalar_one_or_none()
            if row is None:
                return None
            results = (
                (
                    await session.execute(
                        select(RuntimeResultRow)
                        .where(
                            RuntimeResultRow.run_id == run_id,
                            RuntimeResultRow.fence == row.fence,
                            RuntimeResultRow.seq > after,
                        )
                        .order_by(RuntimeResultRow.seq)
                        .limit(VIEW_LIMIT)
                    )
                )
                .scalars()
                .all()
            )
            return DispatchView(
                state=row.state,  # pyright: ignore[reportArgumentType]  # written as queued/claimed only
                runtime_id=row.runtime_id,
                fence=row.fence,
                lease_until=row.lease_until,
                attempts=row.attempts,
                cancel_reason=row.cancel_reason,
                end_status=row.end_status,
                end_through=row.end_through,
                results=[
                    PostedResult(seq=r.seq, nbytes=r.nbytes, dropped=r.dropped, result=dict(r.result))
                    for r in results
                ],
            )

    async def requeue(self, run_id: str, fence: int, why: str, *, shift: int = 0) -> bool:
        """Put a run whose lease under `fence` lapsed back in the queue (a new fence); False when it was
        claimed again or ended meanwhile. `shift`: the highest runner sequence journaled so far, past
        which the next attempt's results are numbered (kept in the audit event, `shift_of`)."""
        async with self._db.write() as session:
            row = await _lapsed_claim(session, run_id, fence, "requeued", why, shift=shift)
            if row is None:
                return False
            row.state = "queued"
            row.runtime_id = None
            row.fence = fence + 1
            row.received = 0
            row.lease_until = 0.0
            await session.execute(delete(RuntimeResultRow).where(RuntimeResultRow.run_id == run_id))
            return True

    async def adopt(self, run_id: str, host_id: str, *, grace_s: float) -> Adopted | None:
        """`host_id` executes the run from now on (its host died): a claim's lease lasts at least
        `grace_s` more, so its runtime, retrying with back-off while no host answered, reaches this one
        before the lease lapses. None when the run has no queue row."""
        now = time.time()
        async with self._db.write() as session:
            row = await _locked(session, run_id)
            if row is None:
                return None
            previous = row.host_id
            row.host_id = host_id
            if row.state == "claimed":
                row.lease_until = max(row.lease_until, now + grace_s)
            row.events = _append(
                row.events, {"event": "adopted", "at": now, "host": host_id, "from": previous}
            )
            return Adopted(fence=row.fence, shift=shift_of(row.events))

    async def cancel(self, run_id: str, reason: str) -> bool:
        """Ask the run's runtime to cancel it; True when a runtime holds it (it hears of it in its next
        heartbeat or results answer), False when it is only queued (never to be claimed now)."""
        async with self._db.write() as session:
            row = await _locked(session, run_id)
            if row is None:
                return False
            if row.cancel_reason is None:
                row.cancel_reason = reason[:1000]
            return row.state == "claimed"

    async def held_fence(self, run_id: str) -> int | None:
        """The fence of the claim that holds `run_id` now (lease not lapsed), else None."""
        async with self._db.read() as session:
            row = (
                await session.execute(
                    select(RuntimeRunRow.fence, RuntimeRunRow.state, RuntimeRunRow.lease_until).where(
                        RuntimeRunRow.run_id == run_id
                    )
                )
            ).one_or_none()
        if row is None or row.state != "claimed" or row.lease_until <= time.time():
            return None
        return row.fence

    async def events(self, run_id: str) -> list[Any]:
        """The run's runtime audit events (claims, requeues, ends), oldest first."""
        found = await self.audit(run_id)
        return list(found.events) if found is not None else []

    async def audit(self, run_id: str) -> RuntimeAudit | None:
        """Where `run_id` runs or ran: its queue row while it is queued or claimed, else the copy kept
        when it ended; None for a run never queued for a runtime (a local one)."""
        async with self._db.read() as session:
            live = (
                await session.execute(select(RuntimeRunRow).where(RuntimeRunRow.run_id == run_id))
            ).scalar_one_or_none()
            if live is not None:
                return live_audit(live)
            kept = await session.get(RuntimeAuditRow, run_id)
            return kept_audit(kept) if kept is not None else None

    async def held_runs(self) -> dict[str, list[RuntimeClaim]]:
        """The runs each runtime holds now (runtime id → its claims, oldest first)."""
        stmt = select(RuntimeRunRow).where(RuntimeRunRow.state == "claimed")
        async with self._db.read() as session:
            rows = (await session.execute(stmt.order_by(RuntimeRunRow.claimed_at))).scalars().all()
        held: dict[str, list[RuntimeClaim]] = {}
        for row in rows:
            held.setdefault(row.runtime_id or "", []).append(
                RuntimeClaim(
                    run_id=row.run_id,
                    fence=row.fence,
                    attempt=row.attempts,
                    claimed_at=row.claimed_at,
                    lease_until=row.lease_until,
                    last_renewal_at=row.last_renewal_at,
                )
            )
        return held

    async def drop(self, run_id: str) -> None:
        """The run ended on the host: forget its queue row and results (later posts are `not_held`),
        keeping its runtime audit in `runtime_audit`."""
        now = time.time()

        async def drop_in(session: AsyncSession) -> None:
            row = (
                await session.execute(
                    select(RuntimeRunRow).where(RuntimeRunRow.run_id == run_id).with_for_update()
                )
            ).scalar_one_or_none()
            run_exists = (
                await session.execute(select(RunRow.run_id).where(RunRow.run_id == run_id))
            ).scalar_one_or_none()
            if row is not None and run_exists is not None:
                await keep(session, row, now)
            await session.execute(delete(RuntimeResultRow).where(RuntimeResultRow.run_id == run_id))
            await session.execute(delete(RuntimeRunRow).where(RuntimeRunRow.run_id == run_id))

        await self._db.run_write(drop_in)
