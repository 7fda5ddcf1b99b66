"""Human approvals: the `approvals` rows, their decisions and their expiry.

Owns the `approvals` table and the approval state machine. Does not own which calls need one (the
facts pipeline reads the grant's `approvals` globs) or how a run waits for one (`facts/_approvals.py`).

Invariants:
- Statuses: `pending` → `approved` | `denied`, once, through `decide`; a `pending` approval past its
  `expires_at` is `expired` (a denial) whether or not a write has recorded it yet, so every reader on
  every replica sees the same status at the same time.
- `decide` is idempotent: the decision an approval already has answers the stored record again
  (`changed=False`; a `deny` of an expired approval too), and the other one is a `ConflictError`.
- An approval is created in the same transaction as the `approval.requested` deliveries that announce
  it (`Outbox.announce`); approving an action writes its `action.approved` deliveries in the
  transaction of the decision, so an approved action is announced for execution exactly once.
- A `tool` approval is only worth deciding while its call waits: the call that stops waiting without a
  decision (its run's deadline, a cancel, the run's end) marks it `expired` with a note (`abandon`), and
  a decision on a `tool` approval whose run has ended (a host killed mid-wait) expires it too and is a
  `ConflictError`, so nobody approves a call that can no longer happen. A host that starts expires the
  ones a killed host left pending (`abandon_ended`, after recovery failed their runs), so they do not
  wait in the pending list for a decision that would be refused.
- `wait` wakes at once on a decision taken through this process's store, and reads the row every
  `OTHER_PROCESS_POLL_S` for decisions taken by another replica or the CLI.
- A `parked` approval's run has ended `parked` (its runner cannot wait): deciding it is the point, so
  the run's end does not expire it. Decided or expired, it is continued once: its continuation run's
  `event_id` is `continuation_event_id(approval_id)` (`continuation:<approval_id>`, a prefix no client
  and no hook can use: `mcphost.ingress`), unique in the runs table, so every replica (and a retry)
  that submits it gets the same run; `continued` records that run. An approved parked `tool` request
  lets exactly one call through: the first call of its continuation run — that id, the approval's agent
  and conversation, and no other run recorded as its continuation — with the same tool and arguments
  claims it (`use`, one conditional update), any later call asks again.
- Actions are unique per (agent, `idempotency_key`): `action_key` is the agent id and the SHA-256 of
  the key, and a second `action.requested` with a key already seen creates nothing.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict
from sqlalchemy import ColumnElement, Update, and_, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from mcphost.errors import ConflictError, InvalidArgumentError, NotFoundError
from mcphost.ingress import continued_approval
from mcphost.models import TERMINAL_STATUSES, RunStatus, new_id
from mcphost.protocol import JSONObject, is_json_object
from mcphost.stores._cursor import CursorCodec, Page, check_limit
from mcphost.stores._retry import idempotent
from mcphost.stores._sql import insert_ignoring
from mcphost.stores.deliveries import Outbox
from mcphost.stores.engine import Database
from mcphost.stores.tables import ApprovalRow, RunRow

ApprovalStatus = Literal["pending", "approved", "denied", "expired"]
ApprovalKind = Literal["tool", "action", "interaction"]
Decision = Literal["approve", "deny", "answer"]
"""`answer` (the note carries it) decides an `interaction` approval as `approved`; `approve` cannot."""
DEFAULT_APPROVAL_EXPIRY_S = 24 * 3600.0
MAX_NOTE_CHARS = 2000
OTHER_PROCESS_POLL_S = 1.0
"""How often `wait` reads an approval that another process (a replica, the CLI) may decide."""
ABANDONED_NOTE = (
    "no decision came while the call waited (its run reached its deadline, was cancelled or ended)"
)
RECOVERED_NOTE = (
    "no decision came before the call's run ended without it (the host running the call stopped while "
    "it waited); found at the next host start"
)


class ApprovalRecord(BaseModel):
    """One approval as stored, with the status it has now (`expired` once past `expires_at`)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    approval_id: str
    run_id: str
    agent_id: str | None
    conversation_id: str | None
    kind: ApprovalKind
    status: ApprovalStatus
    request: JSONObject
    """`tool`: `{tool, arguments}`; `action`: the `action.requested` data; `interaction`: the
    `interaction.requested` data (`{questions: [...]}`)."""
    note: str | None
    created_at: float
    expires_at: float
    decided_at: float | None
    parked: bool = False
    """Its run parked on it; the decision (or expiry) starts `continuation_run_id`."""
    continuation_run_id: str | None = None
    used_by_run_id: str | None = None
    """The run whose call an approved parked `tool` request let through (at most one)."""


def _record(row: ApprovalRow, now: float) -> ApprovalRecord:
    record = ApprovalRecord.model_validate(row, from_attributes=True)
    if record.status == "pending" and now >= record.expires_at:
        return record.model_copy(update={"status": "expired", "decided_at": record.expires_at})
    return record


def _status_is(status: ApprovalStatus, now: float) -> ColumnElement[bool]:
    """Rows whose status, as `_record` reports it at `now`, is `status`."""
    unexpired = and_(ApprovalRow.status == "pending", ApprovalRow.expires_at > now)
    if status == "pending":
        return unexpired
    if status == "expired":
        return or_(
            ApprovalRow.status == "expired",
            and_(ApprovalRow.status == "pending", ApprovalRow.expires_at <= now),
        )
    return ApprovalRow.status == status


def _abandoning(approval_id: str, now: float) -> Update:
    """Expire `approval_id` if it is still pending, saying why (`ABANDONED_NOTE`)."""
    return (
        update(ApprovalRow)
        .where(ApprovalRow.approval_id == approval_id, ApprovalRow.status == "pending")
        .values(status="expired", note=ABANDONED_NOTE, decided_at=now)
    )


async def _ended_run_status(session: AsyncSession, run_id: str) -> str | None:
    """The terminal status of `run_id`, or None while it may still run."""
    status = (await session.execute(select(RunRow.status).where(RunRow.run_id == run_id))).scalar_one()
    return status if RunStatus(status).is_terminal else None


def _not_found(approval_id: str) -> NotFoundError:
    return NotFoundError(
        f"Approval {approval_id!r} does not exist; GET /v1/approvals lists them.",
        details={"approval_id": approval_id},
    )


def action_key(agent_id: str | None, idempotency_key: str) -> str:
    """The unique key of an action: its agent and the SHA-256 of its idempotency key (any length)."""
    return f"{agent_id or ''}/{hashlib.sha256(idempotency_key.encode()).hexdigest()}"


def announcement(record: ApprovalRecord) -> JSONObject:
    """The `data` of an `approval.requested` delivery."""
    return {
        "approval_id": record.approval_id,
        "kind": record.kind,
        "request": record.request,
        "expires_at": record.expires_at,
    }


class ApprovalStore:
    """Create, list, read and decide approvals."""

    def __init__(
        self,
        db: Database,
        cursors: CursorCodec,
        outbox: Outbox,
        *,
        expiry_s: float = DEFAULT_APPROVAL_EXPIRY_S,
    ) -> None:
        self._db = db
        self._cursors = cursors
        self._outbox = outbox
        self.expiry_s = expiry_s
        """How long an approval stays `pending` before it is `expired` (`[host] approval_expiry_s`)."""
        self._wakers: dict[str, anyio.Event] = {}
        """Approval id → the event its waiting call sleeps on; set by `decide` in this process."""

    def _values(self, run: RunRow, kind: ApprovalKind, request: JSONObject, now: float) -> dict[str, Any]:
        return {
            "approval_id": new_id("apr"),
            "run_id": run.run_id,
            "agent_id": run.agent_id,
            "conversation_id": run.conversation_id or None,
            "kind": kind,
            "status": "pending",
            "request": request,
            "action_key": None,
            "note": None,
            "created_at": now,
            "expires_at": now + self.expiry_s,
            "decided_at": None,
            "parked": False,
            "continuation_run_id": None,
            "used_by_run_id": None,
        }

    async def request(
        self, run_id: str, kind: ApprovalKind, request: JSONObject, *, parked: bool = False
    ) -> ApprovalRecord:
        """A new pending approval for `run_id`, announced as `approval.requested` (`parked`: the run
        parks on it instead of waiting).

        Raises:
            NotFoundError: the run does not exist.
        """
        now = time.time()
        async with self._db.write() as session:
            run = (await session.execute(select(RunRow).where(RunRow.run_id == run_id))).scalar_one_or_none()
            if run is None:
                raise NotFoundError(f"Run {run_id!r} does not exist.", details={"run_id": run_id})
            values = self._values(run, kind, request, now) | {"parked": parked}
            row = (
                await session.execute(insert(ApprovalRow).values(values).returning(ApprovalRow))
            ).scalar_one()
            record = _record(row, now)
            await self._outbox.announce(session, run_id, [("approval.requested", announcement(record))])
        return record

    async def actions(
        self, session: AsyncSession, run_id: str, items: Sequence[tuple[str, JSONObject]]
    ) -> None:
        """Approvals for `action.requested` results with an `idempotency_key`, stored in this transaction
        (`ResultStore.append_many`); a key the agent used before creates nothing."""
        wanted: list[JSONObject] = []
        for type_, payload in items:
            data = payload.get("data")
            if (
                type_ == "action.requested"
                and is_json_object(data)
                and isinstance(data.get("idempotency_key"), str)
            ):
                wanted.append(data)
        if not wanted:
            return
        run = (await session.execute(select(RunRow).where(RunRow.run_id == run_id))).scalar_one_or_none()
        if run is None:
            return  # the results insert fails on its foreign key; nothing to approve
        now = time.time()
        for data in wanted:
            key = data["idempotency_key"]
            assert isinstance(key, str)
            values = self._values(run, "action", data, now) | {"action_key": action_key(run.agent_id, key)}
            stmt = insert_ignoring(self._db.dialect, ApprovalRow, values, ["action_key"]).returning(
                ApprovalRow
            )
            row = (await session.execute(stmt)).scalar_one_or_none()
            if row is not None:
                announced = announcement(_record(row, now))
                await self._outbox.announce(session, run_id, [("approval.requested", announced)])

    async def decide(
        self, approval_id: str, decision: Decision, *, note: str | None = None
    ) -> tuple[ApprovalRecord, bool]:
        """Approve or deny a pending approval; the record and whether this call decided it.

        Raises:
            NotFoundError: no such approval.
            ConflictError: it already has the other decision, or it expired and `decision` is approve.
        """
        wanted: ApprovalStatus = "denied" if decision == "deny" else "approved"
        now = time.time()
        async with self._db.write() as session:
            row = (
                await session.execute(
                    select(ApprovalRow).where(ApprovalRow.approval_id == approval_id).with_for_update()
                )
            ).scalar_one_or_none()
            if row is None:
                raise _not_found(approval_id)
            current = _record(row, now)
            if decision != "deny" and (decision == "answer") != (current.kind == "interaction"):
                raise InvalidArgumentError(
                    f"Approval {approval_id!r} is of kind {current.kind!r}: decide it with "
                    + (
                        "'answer' (and the answer) or 'deny'."
                        if current.kind == "interaction"
                        else "'approve' or 'deny'."
                    ),
                    details={"approval_id": approval_id, "kind": current.kind},
                )
            if current.status == wanted or (current.status == "expired" and decision == "deny"):
                return current, False
            if current.status != "pending":
                raise ConflictError(
                    f"Approval {approval_id!r} is already {current.status}; it cannot be {wanted} now"
                    + (" (an expired approval counts as denied)." if current.status == "expired" else "."),
                    details={"approval_id": approval_id, "status": current.status},
                )
            record = current
            waits = current.kind == "tool" and not current.parked  # a parked run ended on purpose
            ended = await _ended_run_status(session, current.run_id) if waits else None
            if ended is not None:
                await session.execute(_abandoning(approval_id, now))  # committed, then refused below
            else:
                decided = (
                    await session.execute(
                        update(ApprovalRow)
                        .where(ApprovalRow.approval_id == approval_id, ApprovalRow.status == "pending")
                        .values(status=wanted, note=note, decided_at=now)
                        .returning(ApprovalRow)
                    )
                ).scalar_one()
                record = _record(decided, now)
                if record.kind == "action" and wanted == "approved":
                    approved: JSONObject = {"approval_id": approval_id, "note": note, **record.request}
                    await self._outbox.announce(session, record.run_id, [("action.approved", approved)])
        if ended is not None:
            raise ConflictError(
                f"Approval {approval_id!r} asked for a call of run {current.run_id!r}, which has ended "
                f"({ended}): no call waits for this decision, so it is now expired.",
                details={"approval_id": approval_id, "status": "expired", "run_status": ended},
            )
        if (waker := self._wakers.get(approval_id)) is not None:
            waker.set()  # after the commit: the woken call reads the decision
        return record, True

    async def wait(self, approval_id: str, *, until: float) -> ApprovalRecord:
        """The approval once it is decided or expired, or still `pending` at `until` (a deadline).

        A decision through this store wakes the wait at once; one taken by another process is read
        within `OTHER_PROCESS_POLL_S`.

        Raises:
            NotFoundError: no such approval.
        """
        waker = self._wakers[approval_id] = anyio.Event()
        try:
            while True:
                current = await self.get(approval_id)
                now = time.time()
                if current.status != "pending" or now >= until:
                    return current
                with anyio.move_on_after(min(min(until, current.expires_at) - now, OTHER_PROCESS_POLL_S)):
                    await waker.wait()
                if waker.is_set():
                    waker = self._wakers[approval_id] = anyio.Event()
        finally:
            self._wakers.pop(approval_id, None)

    async def use(self, run_id: str, request: JSONObject) -> ApprovalRecord | None:
        """The approved parked `tool` approval that lets this call of `run_id` through, claimed for it;
        None when `run_id` is not that approval's continuation (its `event_id` is not the host's
        `continuation_event_id`, or its agent or conversation is another's, or another run is recorded
        as the continuation), or the approval was not approved, asked for another call, or was used
        already."""
        async with self._db.write() as session:
            run = (
                await session.execute(
                    select(RunRow.event_id, RunRow.agent_id, RunRow.conversation_id).where(
                        RunRow.run_id == run_id
                    )
                )
            ).one_or_none()
            approval_id = None if run is None else continued_approval(run.event_id)
            if run is None or approval_id is None:
                return None
            row = (
                await session.execute(
                    select(ApprovalRow).where(ApprovalRow.approval_id == approval_id).with_for_update()
                )
            ).scalar_one_or_none()
            if (
                row is None
                or not row.parked
                or row.kind != "tool"
                or row.status != "approved"
                or row.used_by_run_id is not None
                or row.request != request
                or row.agent_id != run.agent_id
                or (row.conversation_id or "") != (run.conversation_id or "")
                or row.continuation_run_id not in (None, run_id)
            ):
                return None
            used = (
                await session.execute(
                    update(ApprovalRow)
                    .where(ApprovalRow.approval_id == approval_id, ApprovalRow.used_by_run_id.is_(None))
                    .values(used_by_run_id=run_id)
                    .returning(ApprovalRow)
                )
            ).scalar_one_or_none()
        return None if used is None else _record(used, time.time())

    @idempotent
    async def to_continue(self, *, limit: int = 100) -> list[ApprovalRecord]:
        """Parked approvals that are decided or expired and have no continuation run recorded yet."""
        now = time.time()
        stmt = (
            select(ApprovalRow)
            .where(
                ApprovalRow.parked.is_(True),
                ApprovalRow.continuation_run_id.is_(None),
                or_(ApprovalRow.status != "pending", ApprovalRow.expires_at <= now),
            )
            .order_by(ApprovalRow.seq)
            .limit(limit)
        )
        async with self._db.read() as session:
            rows = (await session.execute(stmt)).scalars().all()
        return [_record(row, now) for row in rows]

    @idempotent
    async def continued(self, approval_id: str, run_id: str) -> None:
        """Record the continuation run of a parked approval (the first one recorded stays)."""
        async with self._db.write() as session:
            await session.execute(
                update(ApprovalRow)
                .where(ApprovalRow.approval_id == approval_id, ApprovalRow.continuation_run_id.is_(None))
                .values(continuation_run_id=run_id)
            )

    @idempotent
    async def pending_parked(self, run_id: str) -> ApprovalRecord | None:
        """The newest pending approval `run_id` parks on, if any."""
        now = time.time()
        stmt = (
            select(ApprovalRow)
            .where(ApprovalRow.run_id == run_id, ApprovalRow.parked.is_(True), _status_is("pending", now))
            .order_by(ApprovalRow.seq.desc())
            .limit(1)
        )
        async with self._db.read() as session:
            row = (await session.execute(stmt)).scalar_one_or_none()
        return None if row is None else _record(row, now)

    @idempotent
    async def abandon(self, approval_id: str) -> None:
        """Expire a `pending` approval whose call stopped waiting (a decided one stays as it is)."""
        async with self._db.write() as session:
            await session.execute(_abandoning(approval_id, time.time()))

    @idempotent
    async def abandon_ended(self) -> list[str]:
        """Expire the `pending` unparked `tool` approvals whose run has ended (`RECOVERED_NOTE`); their ids.

        A call marks its own approval expired when it stops waiting (`abandon`), except when its host is
        killed mid-wait: recovery fails the run and this finishes what the call could not. Parked
        approvals (their decision is the point) and actions (they outlive their run) stay pending.
        """
        now = time.time()
        ended = select(RunRow.run_id).where(RunRow.status.in_([s.value for s in TERMINAL_STATUSES]))
        stmt = (
            update(ApprovalRow)
            .where(
                ApprovalRow.status == "pending",
                ApprovalRow.expires_at > now,
                ApprovalRow.kind == "tool",
                ApprovalRow.parked.is_(False),
                ApprovalRow.run_id.in_(ended),
            )
            .values(status="expired", note=RECOVERED_NOTE, decided_at=now)
            .returning(ApprovalRow.approval_id)
        )
        async with self._db.write() as session:
            return list((await session.execute(stmt)).scalars().all())

    @idempotent
    async def get(self, approval_id: str) -> ApprovalRecord:
        async with self._db.read() as session:
            row = (
                await session.execute(select(ApprovalRow).where(ApprovalRow.approval_id == approval_id))
            ).scalar_one_or_none()
        if row is None:
            raise _not_found(approval_id)
        return _record(row, time.time())

    @idempotent
    async def list(
        self,
        *,
        status: ApprovalStatus | None = None,
        run_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[ApprovalRecord]:
        """Approvals newest first, optionally of one status (as of now) and/or one run."""
        check_limit(limit)
        now = time.time()
        stmt = select(ApprovalRow)
        if status is not None:
            stmt = stmt.where(_status_is(status, now))
        if run_id is not None:
            stmt = stmt.where(ApprovalRow.run_id == run_id)
        if cursor is not None:
            stmt = stmt.where(ApprovalRow.seq < self._cursors.decode_seq(cursor, "approvals"))
        stmt = stmt.order_by(ApprovalRow.seq.desc()).limit(limit + 1)
        async with self._db.read() as session:
            rows = (await session.execute(stmt)).scalars().all()
        has_more = len(rows) > limit
        kept = rows[:limit]
        return Page[ApprovalRecord](
            items=[_record(r, now) for r in kept],
            next_cursor=self._cursors.encode("approvals", kept[-1].seq) if has_more else None,
            prev_cursor=None,
            has_more=has_more,
        )
