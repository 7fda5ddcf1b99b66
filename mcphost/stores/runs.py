"""Runs: admission, per-conversation ordering, the status state machine, grants and cancel requests.

Owns the `runs` table. Does not run anything (the orchestrator does) or decide what a grant allows
(`grants.py`). Size: past 600 lines because admission, start and the terminal moves share the private
`_move` (the one writer of `status`) and `_start_queued`, which must not leave this module.

Invariants:
- `status` is written in exactly one place, `_move`: a conditional `UPDATE … WHERE status = :current`
  checked against `ALLOWED_TRANSITIONS`. `transition` re-reads and retries when another writer moved the
  run first, so the check and the write are atomic together and an illegal move always raises
  `IllegalTransitionError` ("Run 'run_…' is completed; cannot move to running.").
- A run that reaches a terminal status gets `ended_at` and has its grant revoked in the same write,
  which also wakes other processes (`wakeups.announce`), as a cancel request's write does. A cancel
  request carries its reason (`cancel_reason`, the first one given), so the process executing the run
  ends it with that reason.
- Per conversation, admission and start are serialized across processes: inside the write transaction,
  PostgreSQL takes `pg_advisory_xact_lock` on the conversation (`_sql.lock_in_transaction`); SQLite's
  `BEGIN IMMEDIATE` already serializes all writers. Under that lock:
  - `admit` is idempotent on `event_id` — the event's latest run is returned — except when that run
    failed `host.restarted` (`RESTARTABLE_CODE`): then it inserts the next attempt, linked to it by
    `previous_run_id`. (event_id, attempt) is unique, so of two admissions racing to create the same
    attempt (PostgreSQL without a conversation lock) one inserts and the other returns its run. It
    applies the concurrency policy and inserts the run `queued`;
  - `try_start` moves a run to `running` only when no other run of its conversation is running and no
    older (`created_seq`) run of it is still queued: one at a time, first in first out. Runs without a
    conversation always start.
- `admit` with `start` starts a run that may start at once in its admission transaction (same rules).
- The start is one transaction: the move to `running`, the run's user transcript row, the snapshots of
  the state scopes its context shows, and its context (`context`, the `AgentRunContext` without its
  token, built from the thread's head after that row).
  The context is written once and never changed, so every replica serves the same one. When the
  context offers a warm session (`context.mcp.session`), the run's `warm_session_id` is written with it:
  from that commit on, every replica serves the session endpoint as this run (`stores/warm.py`).
- `created_seq` only grows (AUTOINCREMENT / a sequence), so it orders runs by admission.
- Admission, start and every status move run SQLAlchemy Core statements built once (`engine.core`,
  `_MOVES`) and read Core rows, never ORM objects: they are every run's statements. On PostgreSQL the
  usual admission (the event's first run, `enqueue` or a policy already applied) is one statement
  after the lock (`_admit.py`: the same rows, a run that may start inserted `running`), then the
  context's `UPDATE`.
- Retried when their connection drops (`@idempotent`, `_retry.py`), because repeating them is safe: every
  read; `admit` (a retry finds the row the first attempt may have committed, and recognizes it as its
  own by run id); `try_start` (a run already running on the same host counts as started); `finish`
  (first terminal status wins, a repeat returns it); `revoke` and `request_cancel` (they keep the first
  timestamp). `transition` is not: a repeat after a commit that was not acknowledged would raise
  `IllegalTransitionError` for a move that happened.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Row, Select, bindparam, func, insert, or_, select, true, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.dml import ReturningInsert, ReturningUpdate

from mcphost.errors import (
    ConcurrencyRejectedError,
    IllegalTransitionError,
    InvalidArgumentError,
    RunNotFoundError,
)
from mcphost.models import ALLOWED_TRANSITIONS, ConcurrencyPolicy, Run, RunFailure, RunGrant, RunStatus
from mcphost.protocol import AgentRunContext, JSONObject
from mcphost.stores._admit import Admitted, Starting, admit_first
from mcphost.stores._cursor import CursorCodec, Page, check_limit
from mcphost.stores._direct import AsyncpgConnection
from mcphost.stores._retry import idempotent
from mcphost.stores._sql import Dialect, among, lock_in_transaction
from mcphost.stores.conversations import LOCK_NAMESPACE, touch_conversation
from mcphost.stores.deliveries import Outbox
from mcphost.stores.engine import Database, core
from mcphost.stores.events import insert_event
from mcphost.stores.state import ScopeSnapshot, read_snapshot
from mcphost.stores.tables import RunRow, table_of
from mcphost.stores.transcript import add_item, thread_head
from mcphost.stores.wakeups import CHANNEL, announce, wake_payload

ACTIVE_STATUSES: tuple[str, ...] = (RunStatus.QUEUED.value, RunStatus.RUNNING.value)
RESTARTABLE_CODE = "host.restarted"
"""The error of a run its host stopped before it finished: submitting its event again makes a new attempt."""
_LOCK_NAMESPACE = LOCK_NAMESPACE

# The hot path's statements, built once (`engine.core`): admission, start and end of every run.
_RUNS = table_of(RunRow)
_C = _RUNS.c
_ROW: tuple[Any, ...] = tuple(c for c in _C if c.name not in ("context", "grant"))
"""The columns the hot statements read back: all but the two large JSON documents, which none of
their callers reads (the context is read by the run's facts requests, the grant by `grant`); each
would be decoded again on every status move."""
_BY_RUN = cast("Select[Any]", select(*_ROW).where(_C.run_id == bindparam("w_run_id")))
_GRANT_BY_RUN = select(_C.grant, _C.status, _C.revoked_at).where(_C.run_id == bindparam("w_run_id"))
_BY_EVENT = cast(
    "Select[Any]",
    select(*_ROW).where(_C.event_id == bindparam("w_event_id")).order_by(_C.attempt.desc()).limit(1),
)
_INSERT = cast("ReturningInsert[Any]", insert(_RUNS).returning(*_ROW))
_TURN = _RUNS.alias("turn")
_CONVERSATION_ACTIVE = (
    select(_TURN.c.run_id)
    .where(
        _TURN.c.conversation_id == bindparam("w_conversation"),
        among(_TURN.c.status, (RunStatus.RUNNING.value, RunStatus.QUEUED.value)),
    )
    .limit(1)
)
"""A queued or running run of the conversation: a new run, its newest, is not its turn. One search of
the `(conversation_id, status, created_seq)` index, however many runs of the conversation have ended.
The statuses are written into the SQL (`_sql.among`): as `status.in_(...)`, expanded by SQLAlchemy at
each execution, the statement had no prebuilt plan and went through SQLAlchemy's own execution, at a
twentieth of a served run's CPU."""
_TURN_TAKEN = _CONVERSATION_ACTIVE.where(
    or_(_TURN.c.status == RunStatus.RUNNING.value, _TURN.c.created_seq < bindparam("w_created_seq"))
)
"""A run of the conversation that goes first: one running, or one queued before. (The status list of
`_CONVERSATION_ACTIVE` keeps it a search of the index by conversation and status: an `OR` of the two
statuses alone made SQLite read every run of the conversation.)"""
_START_IN_TURN = cast(
    "ReturningUpdate[Any]",
    update(_RUNS)
    .where(_C.run_id == bindparam("w_run_id"), _C.status == RunStatus.QUEUED.value, ~_TURN_TAKEN.exists())
    .values(
        status=RunStatus.RUNNING.value,
        started_at=bindparam("v_started_at", type_=_C.started_at.type),
        host_id=bindparam("v_host_id", type_=_C.host_id.type),
    )
    .returning(*_ROW),
)
"""A queued run of a conversation started if it is its turn (`_TURN_TAKEN` finds none): the turn's
check and the move in one statement, under the conversation's lock."""
_SET_CONTEXT = (
    update(_RUNS)
    .where(_C.run_id == bindparam("w_run_id"))
    .values(context=bindparam("v_context", type_=_C.context.type), warm_session_id=bindparam("v_warm"))
)
_MOVES: dict[tuple[bool, tuple[str, ...], Dialect], ReturningUpdate[Any]] = {}
"""`_move`'s statements by (terminal, the other columns it sets, dialect): a handful, built on first
use."""

StartContext = Callable[[str | None, bool, Mapping[str, ScopeSnapshot]], Awaitable[AgentRunContext]]
"""(latest cursor, has older items) of the run's thread as it starts, and the snapshots of the state
scopes it asked for, read in the same transaction → the run's context, token-free. It runs inside the
transaction (on SQLite on the writer thread, `Database.run_write`), so it only computes: no awaits."""


@dataclass(frozen=True, slots=True)
class RunEnd:
    """A running run's end written with its last results (`ResultStore.append_ending`): the
    terminal move `finish` makes, in the results' transaction."""

    status: RunStatus
    error: RunFailure | None = None
    usage: JSONObject | None = None

    def __post_init__(self) -> None:
        if not self.status.is_terminal:
            raise ValueError(f"a run's end takes a terminal status; got {self.status}")


RUN_COLUMNS: tuple[Any, ...] = _ROW
"""The run's columns the hot statements read back (`_ROW`): what `run_of` reads."""


def run_of(row: RunRow | Row[Any]) -> Run:
    """The run of a row with `RUN_COLUMNS`."""
    return _run(row)


async def end_running(
    session: AsyncSession, dialect: Dialect, outbox: Outbox | None, run_id: str, end: RunEnd
) -> Run | None:
    """Move a `running` run to `end` in the caller's transaction, with its outbox rows (as `finish`
    does); None, writing nothing, when the run is not running (it ended, or was never started)."""
    moved = await _move(
        session, dialect, run_id, RunStatus.RUNNING, end.status, **_outcome(end.error, end.usage)
    )
    if moved is None:
        return None
    await _announce_end(session, outbox, moved)
    return _run(moved)


@dataclass(frozen=True)
class RunStart:
    """What starting a run writes besides its status (`try_start`, or `admit` starting it at once)."""

    host_id: str
    user_item: dict[str, Any] | None = None
    """`transcript.item_values` of the run's input message, appended to its thread as it starts."""
    context: StartContext | None = None
    state: Sequence[tuple[str, Sequence[str]]] = ()
    """The (scope, owner) pairs whose snapshots `context` gets."""


class GrantRecord(BaseModel):
    """A run's grant with what decides whether it is still good."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    grant: RunGrant
    status: RunStatus
    revoked: bool

    @property
    def active(self) -> bool:
        """The run is not finished and its grant was not revoked."""
        return not self.revoked and not self.status.is_terminal


def _run(row: RunRow | Row[Any]) -> Run:
    return Run(
        run_id=row.run_id,
        event_id=row.event_id,
        event_type=row.event_type,
        agent_id=row.agent_id,
        runner_id=row.runner_id,
        conversation_id=row.conversation_id or None,
        thread_id=row.thread_id or None,
        status=RunStatus(row.status),
        created_at=row.created_at,
        started_at=row.started_at,
        ended_at=row.ended_at,
        deadline_at=row.deadline_at,
        error=None if row.error is None else RunFailure.model_validate(row.error),
        usage=row.usage,
        host_id=row.host_id,
        attempt=row.attempt,
        previous_run_id=row.previous_run_id,
        created_by=row.created_by,
    )


def _restartable(run: Run) -> bool:
    """Whether `run` failed because its host stopped, so its event may start a next attempt."""
    return run.status is RunStatus.FAILED and run.error is not None and run.error.code == RESTARTABLE_CODE


async def _announce_end(session: AsyncSession, outbox: Outbox | None, moved: Row[Any]) -> None:
    """A run end's outbox rows (deliveries), in the transaction of `moved`, its terminal move; the
    wake-up came with the move (`_move`)."""
    if outbox is not None:
        await outbox.run_ended(session, moved)


def _outcome(error: RunFailure | None, usage: JSONObject | None) -> dict[str, Any]:
    """The `error` and `usage` columns a move to a terminal status writes, when given."""
    values: dict[str, Any] = {} if error is None else {"error": error.model_dump(mode="json")}
    return values if usage is None else values | {"usage": usage}


def run_not_found(run_id: str) -> RunNotFoundError:
    """The one answer for a run that does not exist, also to a key that may not see it (`api/_access`)."""
    return RunNotFoundError(f"Run {run_id!r} does not exist; list runs with GET /v1/runs to find its id.")


async def _row(session: AsyncSession, run_id: str) -> Row[Any]:
    row = (await (await core(session)).execute(_BY_RUN, {"w_run_id": run_id})).one_or_none()
    if row is None:
        raise run_not_found(run_id)
    return row


def _move_statement(terminal: bool, columns: tuple[str, ...], dialect: Dialect) -> ReturningUpdate[Any]:
    stmt = _MOVES.get((terminal, columns, dialect))
    if stmt is None:
        values: dict[str, Any] = {c: bindparam(f"v_{c}", type_=_C[c].type) for c in (*columns, "status")}
        if terminal:
            ended = bindparam("v_ended_at", type_=_C.ended_at.type)
            values |= {"ended_at": ended, "revoked_at": func.coalesce(_C.revoked_at, ended)}
        current = _C.status == bindparam("w_status")
        if dialect == "postgresql":
            current = current.is_(true())  # the row by its id alone (`results._ENDED` says why)
        built = cast(
            "ReturningUpdate[Any]",
            update(_RUNS).where(_C.run_id == bindparam("w_run_id"), current).values(values).returning(*_ROW),
        )
        if terminal and dialect == "postgresql":  # the end wakes other processes' waiters from its statement
            built = built.returning(func.pg_notify(bindparam("n_channel"), bindparam("n_wake")))
        stmt = _MOVES[terminal, columns, dialect] = built
    return stmt


def _move_of(
    dialect: Dialect, run_id: str, current: RunStatus, new: RunStatus, values: dict[str, Any]
) -> tuple[ReturningUpdate[Any], dict[str, Any]]:
    """`_move`'s statement and parameters."""
    if new not in ALLOWED_TRANSITIONS[current]:
        raise IllegalTransitionError(f"Run {run_id!r} is {current}; cannot move to {new}.")
    stmt = _move_statement(new.is_terminal, tuple(sorted(values)), dialect)
    params = {f"v_{c}": v for c, v in values.items()} | {
        "v_status": new.value,
        "v_ended_at": time.time(),
        "w_run_id": run_id,
        "w_status": current.value,
    }
    if new.is_terminal and dialect == "postgresql":
        params |= {"n_channel": CHANNEL, "n_wake": wake_payload("end", run_id)}
    return stmt, params


async def _move(
    session: AsyncSession, dialect: Dialect, run_id: str, current: RunStatus, new: RunStatus, **values: Any
) -> Row[Any] | None:
    """The one writer of `status`: move `current` → `new` unless another writer moved the run first.
    A move to a terminal status announces the run's end (`wakeups.announce`) within its statement."""
    stmt, params = _move_of(dialect, run_id, current, new, values)
    return (await (await core(session)).execute(stmt, params)).one_or_none()


async def _store_context(
    session: AsyncSession, run_id: str, context: dict[str, Any], warm: str | None, *, last: bool = False
) -> None:
    """A started run's stored context and warm session (`_built_context`), set on its row. `last`: the
    body's last statement, which on PostgreSQL goes with the transaction's `COMMIT` in one round trip
    when it can (`_direct.AsyncpgConnection.hold_for_commit`)."""
    connection = await core(session)
    params = {"w_run_id": run_id, "v_context": context, "v_warm": warm}
    if (
        last
        and isinstance(connection, AsyncpgConnection)
        and connection.hold_for_commit(_SET_CONTEXT, params)
    ):
        return
    await connection.execute(_SET_CONTEXT, params)


async def _built_context(
    build: StartContext, latest: str | None, has_before: bool, snapshots: Mapping[str, ScopeSnapshot]
) -> tuple[dict[str, Any], str | None]:
    """A starting run's context as stored (its JSON), and the warm session it offers, if any."""
    context = await build(latest, has_before, snapshots)
    mcp = context.context.mcp
    warm = None if mcp is None or mcp.session is None else mcp.session.session_id
    return context.model_dump(mode="json"), warm


async def _turn_taken(session: AsyncSession, conversation: str) -> bool:
    """Whether a run of `conversation` is queued or running: a new run (its newest) then waits its turn.
    A run without a conversation never waits. Read under the conversation's lock."""
    if not conversation:
        return False
    params = {"w_conversation": conversation}
    return (await (await core(session)).execute(_CONVERSATION_ACTIVE, params)).first() is not None


async def _window_page(
    session: AsyncSession, stmt: Select[RunRow], since: float | None, until: float | None, limit: int
) -> list[RunRow]:
    """Up to `limit + 1` rows of `stmt` (newest `created_seq` first, at most `limit + 1` a read) that
    were created in [`since`, `until`).

    A window is a `created_seq` range (`RunStore.list`); `created_at` is checked here, on the rows read,
    only to drop the runs whose clocks disagreed, which sit inside the range. In the SQL it let the
    planner read the page through the `(created_at, created_seq)` index: taking the two ranges for
    independent (they select the same rows), it expected a handful of rows and read the whole window,
    then sorted it (12.5k rows for one day at 5M runs, 7x the 10k-row database's time,
    `bench/pg_scale.py`). Without it the range is read newest first and stops at the page."""
    rows: list[RunRow] = []
    while True:
        read = (await session.execute(stmt)).scalars().all()
        rows += [
            row
            for row in read
            if (since is None or row.created_at >= since) and (until is None or row.created_at < until)
        ]
        if len(rows) > limit or len(read) <= limit:
            return rows[: limit + 1]
        stmt = stmt.where(RunRow.created_seq < read[-1].created_seq)


def interrupted_by(run_id: str) -> str:
    """The cancel reason of a run interrupted by the newer run `run_id` (`interrupt` policy)."""
    return f"interrupted by a newer event (run {run_id})"


class RunStore:
    """Admit, start, move, read and cancel runs."""

    def __init__(self, db: Database, cursors: CursorCodec, outbox: Outbox | None = None) -> None:
        self._db = db
        self._cursors = cursors
        self._outbox = outbox

    async def _announce(self, session: AsyncSession, moved: Row[Any]) -> None:
        """A run end's outbox rows, in the transaction that ended it (deliveries)."""
        if RunStatus(moved.status).is_terminal:
            await _announce_end(session, self._outbox, moved)

    @idempotent
    async def admit(
        self,
        run: Run,
        *,
        grant: RunGrant,
        concurrency: ConcurrencyPolicy,
        inbound: dict[str, Any] | None = None,
        start: RunStart | None = None,
    ) -> tuple[Run, bool]:
        """Record a new `queued` run for its event; (run, created).

        An event that already has a run returns its latest run with `created=False`, unless that run
        failed `host.restarted` and `run.created_by` is its creator: then the run is stored as the next
        attempt (`attempt`, `previous_run_id` are set here; the caller's values are ignored). Another
        key's event gets no attempt of its own: its latest run is returned (the API refuses it). With `reject`, an active
        run in the conversation raises; with `interrupt`, active runs of the conversation get a cancel
        request and the new run queues behind them. `inbound` (`events.event_values`) is the event-log
        row of the run's event, written in the same transaction as a created run (unless the log has it).
        With `start`, a created run that may start at once (`try_start`'s rules) is started in the same
        transaction and returned `running`: one transaction instead of two.

        Raises:
            ConcurrencyRejectedError: `reject` while the conversation has a queued or running run.
        """
        if run.status is not RunStatus.QUEUED or grant.run_id != run.run_id:
            raise ValueError(
                f"admit takes a queued run and its own grant; got {run.status} / {grant.run_id!r}"
            )
        conversation = run.conversation_id or ""
        values = run.model_dump(mode="json", exclude={"error"}) | {
            "conversation_id": conversation,
            "thread_id": run.thread_id or "",
            "grant": grant.model_dump(mode="json"),
            "token_hash": grant.token_hash,
        }

        async def admit_in(session: AsyncSession) -> tuple[Run, bool]:
            if conversation:
                await lock_in_transaction(session, self._db.dialect, _LOCK_NAMESPACE, conversation)
            policy = bool(conversation) and concurrency != "enqueue"
            if self._db.dialect == "postgresql" and not policy:
                # The usual case in one statement (`_admit.py`): the first run, or the event's latest.
                admitted = await self._admit_first(session, values, inbound, start)
                if admitted.created:
                    return _run(admitted.row), True
                existing: Row[Any] | None = admitted.row
            else:
                existing = await self._by_event(session, run.event_id)
            if existing is not None and existing.run_id == run.run_id:
                # Our own row when an earlier attempt committed before its connection dropped.
                return _run(existing), True
            if existing is None:
                values.update(attempt=1, previous_run_id=None)
            elif not _restartable(prior := _run(existing)) or prior.created_by != run.created_by:
                return prior, False
            else:
                values.update(attempt=prior.attempt + 1, previous_run_id=prior.run_id)
            if policy:
                await self._apply_policy(session, conversation, concurrency, run.run_id)
                if self._db.dialect == "postgresql" and existing is None:
                    admitted = await self._admit_first(session, values, inbound, start)
                    assert admitted.created  # under the conversation's lock, the event still has no run
                    return _run(admitted.row), True
            if start is not None and not await _turn_taken(session, conversation):
                await self._insert_started(session, values, start)
            row = (await (await core(session)).execute(_INSERT, values)).one()
            if conversation:
                actor = inbound.get("actor_id") if inbound is not None else None
                await touch_conversation(session, self._db.dialect, row, actor)
            if inbound is not None:  # a no-op for a later attempt: the log has its event already
                await insert_event(session, self._db.dialect, inbound)
            return _run(row), True

        try:
            lock = (_LOCK_NAMESPACE, conversation) if conversation else None
            return await self._db.run_write(admit_in, lock=lock)
        except IntegrityError:
            # Another admit of the same event (attempt) won the race, without a conversation lock to
            # order them: its run is the answer.
            existing_run = await self.get_by_event(run.event_id)
            if existing_run is None or _restartable(existing_run):
                raise
            return existing_run, existing_run.run_id == run.run_id

    async def _admit_first(
        self,
        session: AsyncSession,
        values: dict[str, Any],
        inbound: dict[str, Any] | None,
        start: RunStart | None,
    ) -> Admitted:
        """PostgreSQL: the event's first run admitted in one statement (`_admit.py`), and started with
        its context when it may start at once; else the event's latest run."""
        values.update(attempt=1, previous_run_id=None)
        starting = None
        if start is not None:
            scopes = start.state if start.context is not None else ()
            starting = Starting(start.host_id, start.user_item, start.context is not None, scopes)
        actor = inbound.get("actor_id") if inbound is not None else None
        admitted = await admit_first(session, values, actor_id=actor, inbound=inbound, start=starting)
        row = admitted.row
        if (
            admitted.created
            and start is not None
            and start.context is not None
            and row.status == RunStatus.RUNNING
        ):
            newest, items = admitted.head
            latest = None if newest is None else self._cursors.encode("transcript", newest)
            snapshots = {
                scope: await read_snapshot(session, scope, owner, first=first)
                for (scope, owner), first in zip(start.state, admitted.sizes, strict=True)
            }
            context, warm = await _built_context(start.context, latest, items > 1, snapshots)
            await _store_context(session, row.run_id, context, warm, last=True)  # nothing follows it
        return admitted

    async def _apply_policy(
        self, session: AsyncSession, conversation: str, concurrency: ConcurrencyPolicy, new_run_id: str
    ) -> None:
        active = (
            await session.execute(
                select(RunRow.run_id, RunRow.status)
                .where(RunRow.conversation_id == conversation, RunRow.status.in_(ACTIVE_STATUSES))
                .order_by(RunRow.created_seq)
                .limit(1)
            )
        ).one_or_none()
        if active is None:
            return
        if concurrency == "reject":
            raise ConcurrencyRejectedError(
                f"Conversation {conversation!r} already has {active.status} run {active.run_id!r} and the "
                "agent's concurrency policy is 'reject'; retry after it ends, or use 'enqueue' or 'interrupt'.",
                details={"active_run_id": active.run_id},
            )
        requested = (
            update(RunRow)
            .where(
                RunRow.conversation_id == conversation,
                RunRow.status.in_(ACTIVE_STATUSES),
                RunRow.cancel_requested_at.is_(None),
            )
            .values(cancel_requested_at=time.time(), cancel_reason=interrupted_by(new_run_id))
            .returning(RunRow.run_id)
        )
        for run_id in (await session.execute(requested)).scalars().all():
            await announce(session, self._db.dialect, "cancel", run_id)

    @idempotent
    async def try_start(
        self,
        run_id: str,
        *,
        host_id: str,
        user_item: dict[str, Any] | None = None,
        context: StartContext | None = None,
        state: Sequence[tuple[str, Sequence[str]]] = (),
    ) -> Run | None:
        """Move a queued run to `running` on `host_id` if it is its conversation's turn, else None.

        In the same transaction, when the run starts: `user_item` (`transcript.item_values` of the run's
        input message) is appended to its thread, then `context` is called with the thread's head after
        that append (latest cursor, older items?) and what it returns — the run's context without its
        token — is kept on the run (`context()`). A run already running on `host_id` is returned as it
        is, without calling `context` (so a repeat is harmless).
        """
        start = RunStart(host_id=host_id, user_item=user_item, context=context, state=state)

        async def try_start_in(session: AsyncSession) -> Run | None:
            row = await _row(session, run_id)
            if row.conversation_id:
                await lock_in_transaction(session, self._db.dialect, _LOCK_NAMESPACE, row.conversation_id)
                if self._db.dialect == "postgresql":
                    # Read again under the lock: another process may have moved it meanwhile (SQLite's
                    # BEGIN IMMEDIATE took the write lock before the first read).
                    row = await _row(session, run_id)
            if row.status == RunStatus.RUNNING and row.host_id == host_id:
                return _run(row)  # started by an attempt whose commit was not acknowledged
            if row.status != RunStatus.QUEUED:
                return None
            moved = await self._start_queued(session, row, start)
            return None if moved is None else _run(moved)

        return await self._db.run_write(try_start_in)

    async def _insert_started(self, session: AsyncSession, values: dict[str, Any], start: RunStart) -> None:
        """Inside `admit`'s transaction, for a new run whose turn it is (`_turn_taken` found no other):
        what `_start_queued` would write, made ready for one INSERT of the run as `running`. Appends the
        run's input message, reads its thread's head and its state snapshots, builds its context, and
        sets them in `values` (status, start, host, context): two statements fewer than inserting the
        run `queued` and moving it."""
        values.update(status=RunStatus.RUNNING.value, started_at=time.time(), host_id=start.host_id)
        if start.user_item is not None:
            await add_item(session, self._db.dialect, start.user_item)
        if start.context is not None:
            context, warm = await self._starting_context(
                session, values["conversation_id"], values["thread_id"], start.context, start.state
            )
            values.update(context=context, warm_session_id=warm)

    async def _starting_context(
        self,
        session: AsyncSession,
        conversation: str,
        thread: str | None,
        build: StartContext,
        state: Sequence[tuple[str, Sequence[str]]],
    ) -> tuple[dict[str, Any], str | None]:
        """A starting run's stored context and warm session: its thread's head (after its input message)
        and its state snapshots read in the caller's transaction, then `build` (`_built_context`)."""
        latest, has_before = (None, False)
        if conversation:
            latest, has_before = await thread_head(session, self._cursors, conversation, thread)
        snapshots = {scope: await read_snapshot(session, scope, owner) for scope, owner in state}
        return await _built_context(build, latest, has_before, snapshots)

    async def _start_queued(self, session: AsyncSession, row: Row[Any], start: RunStart) -> Row[Any] | None:
        """Inside a write transaction holding the conversation's lock: start the queued run `row` if it
        is its conversation's turn (`try_start`'s rules); the moved row, else None."""
        if row.conversation_id:  # only in its turn: checked by the statement that starts it
            started = {
                "w_run_id": row.run_id,
                "w_conversation": row.conversation_id,
                "w_created_seq": row.created_seq,
                "v_started_at": time.time(),
                "v_host_id": start.host_id,
            }
            moved = (await (await core(session)).execute(_START_IN_TURN, started)).one_or_none()
        else:
            moved = await _move(
                session,
                self._db.dialect,
                row.run_id,
                RunStatus.QUEUED,
                RunStatus.RUNNING,
                started_at=time.time(),
                host_id=start.host_id,
            )
        if moved is None:
            return None
        if start.user_item is not None:
            await add_item(session, self._db.dialect, start.user_item)
        if start.context is not None:
            context, warm = await self._starting_context(
                session, row.conversation_id, row.thread_id, start.context, start.state
            )
            await _store_context(session, row.run_id, context, warm)
        return moved

    @idempotent
    async def context(self, run_id: str) -> AgentRunContext | None:
        """The context the run was started with, without its token; None while it is queued, and for
        runs started before migration 0007 kept it.

        Raises:
            RunNotFoundError: no such run.
        """
        async with self._db.read() as session:
            stored = (
                await session.execute(select(RunRow.context).where(RunRow.run_id == run_id))
            ).one_or_none()
        if stored is None:
            raise run_not_found(run_id)
        return None if stored.context is None else AgentRunContext.model_validate(stored.context)

    async def transition(
        self,
        run_id: str,
        status: RunStatus,
        *,
        error: RunFailure | None = None,
        usage: JSONObject | None = None,
    ) -> Run:
        """Move a run to `status` (recording `error` and `usage` when given).

        Raises:
            RunNotFoundError: no such run.
            IllegalTransitionError: `ALLOWED_TRANSITIONS` does not allow the move from the current status.
        """
        values = _outcome(error, usage)
        # A run moves at most twice (queued → running → terminal), so a lost race repeats at most twice.
        for _ in range(3):
            async with self._db.write() as session:
                current = RunStatus((await _row(session, run_id)).status)
                moved = await _move(session, self._db.dialect, run_id, current, status, **values)
                if moved is not None:
                    await self._announce(session, moved)
                    return _run(moved)
        raise AssertionError(f"run {run_id!r} kept changing status under transition()")

    @idempotent
    async def finish(
        self,
        run_id: str,
        status: RunStatus,
        *,
        error: RunFailure | None = None,
        usage: JSONObject | None = None,
    ) -> Run:
        """Move an unfinished run to the terminal `status`; a run that has already ended stays as it is.

        The one idempotent terminal write: the first terminal status wins, and a repeat (after a commit
        whose acknowledgement was lost, or by a sweeper after the run's own close failed) returns the
        run as it ended. The caller compares `status` when it cares who won. On PostgreSQL without
        outbox rows to write (no webhook or channel), a running run's end is one statement that commits
        by itself (`Database.run_statement`: one round trip).

        Raises:
            RunNotFoundError: no such run.
        """
        if not status.is_terminal:
            raise ValueError(f"finish takes a terminal status; got {status}")
        values = _outcome(error, usage)

        async def finish_in(session: AsyncSession) -> Run | None:
            # A running run's end, the usual one, in one statement; any other finds out what it is.
            moved = await _move(session, self._db.dialect, run_id, RunStatus.RUNNING, status, **values)
            if moved is not None:
                await self._announce(session, moved)
                return _run(moved)
            row = await _row(session, run_id)
            if RunStatus(row.status).is_terminal:
                return _run(row)
            moved = await _move(session, self._db.dialect, run_id, RunStatus(row.status), status, **values)
            if moved is not None:
                await self._announce(session, moved)
            return None if moved is None else _run(moved)

        if self._db.dialect == "postgresql" and (self._outbox is None or not self._outbox.active):
            # A running run's end writes nothing else here: one statement, which commits by itself.
            stmt, params = _move_of(self._db.dialect, run_id, RunStatus.RUNNING, status, values)
            moved = (await self._db.run_statement(stmt, params)).one_or_none()
            if moved is not None:
                return _run(moved)
        for _ in range(3):  # queued → running → terminal: a lost race repeats at most twice
            if (ended := await self._db.run_write(finish_in)) is not None:
                return ended
        raise AssertionError(f"run {run_id!r} kept changing status under finish()")

    @idempotent
    async def active_on(self, host_id: str) -> list[str]:
        """Ids of queued or running runs that `host_id` owns, oldest first."""
        stmt = (
            select(RunRow.run_id)
            .where(RunRow.status.in_(ACTIVE_STATUSES), RunRow.host_id == host_id)
            .order_by(RunRow.created_seq)
        )
        async with self._db.read() as session:
            return list((await session.execute(stmt)).scalars().all())

    @idempotent
    async def get(self, run_id: str) -> Run:
        """The run with `run_id`."""
        async with self._db.read() as session:
            return _run(await _row(session, run_id))

    async def _by_event(self, session: AsyncSession, event_id: str) -> Row[Any] | None:
        return (await (await core(session)).execute(_BY_EVENT, {"w_event_id": event_id})).one_or_none()

    @idempotent
    async def get_by_event(self, event_id: str) -> Run | None:
        """The latest run (attempt) of an event, or None."""
        async with self._db.read() as session:
            row = await self._by_event(session, event_id)
        return None if row is None else _run(row)

    async def attempts(self, event_id: str) -> list[Run]:
        """Every run of an event, first attempt first (usually one)."""
        stmt = select(RunRow).where(RunRow.event_id == event_id).order_by(RunRow.attempt)
        async with self._db.read() as session:
            return [_run(row) for row in (await session.execute(stmt)).scalars().all()]

    async def adopt(
        self, run_id: str, *, host_id: str, from_host: str | None, status: RunStatus = RunStatus.QUEUED
    ) -> bool:
        """Make `host_id` the owner of a run of `from_host` in `status` (queued, or running on a runtime);
        False if it is not that any more."""
        owner = RunRow.host_id.is_(None) if from_host is None else RunRow.host_id == from_host
        stmt = (
            update(RunRow)
            .where(RunRow.run_id == run_id, RunRow.status == status.value, owner)
            .values(host_id=host_id)
            .returning(RunRow.run_id)
        )
        async with self._db.write() as session:
            return (await session.execute(stmt)).first() is not None

    async def replace_grant(self, run_id: str, grant: RunGrant, *, host_id: str) -> bool:
        """Store a new grant (a new token hash) for a queued run owned by `host_id`; False if it is not.

        A run re-queued after a host restart gets a new token: the old one lived only in the memory of
        the host that stopped.
        """
        if grant.run_id != run_id:
            raise ValueError(f"replace_grant takes the run's own grant; got {grant.run_id!r}")
        stmt = (
            update(RunRow)
            .where(
                RunRow.run_id == run_id,
                RunRow.status == RunStatus.QUEUED.value,
                RunRow.host_id == host_id,
            )
            .values(grant=grant.model_dump(mode="json"), token_hash=grant.token_hash)
            .returning(RunRow.run_id)
        )
        async with self._db.write() as session:
            return (await session.execute(stmt)).first() is not None

    @idempotent
    async def grant(self, run_id: str) -> GrantRecord:
        """The run's grant, its status and whether the grant was revoked."""
        async with self._db.read() as session:
            row = (await (await core(session)).execute(_GRANT_BY_RUN, {"w_run_id": run_id})).one_or_none()
        if row is None:
            raise run_not_found(run_id)
        return GrantRecord(
            grant=RunGrant.model_validate(row.grant),
            status=RunStatus(row.status),
            revoked=row.revoked_at is not None,
        )

    @idempotent
    async def revoke(self, run_id: str) -> None:
        """Revoke the run's grant (again is a no-op)."""
        stmt = (
            update(RunRow)
            .where(RunRow.run_id == run_id)
            .values(revoked_at=func.coalesce(RunRow.revoked_at, time.time()))
            .returning(RunRow.run_id)
        )
        async with self._db.write() as session:
            if (await session.execute(stmt)).first() is None:
                raise run_not_found(run_id)

    @idempotent
    async def request_cancel(self, run_id: str, reason: str | None = None) -> Run:
        """Ask the host running `run_id` to cancel it, for `reason` (no-op once the run has ended; the
        first request's time and the first reason given stay)."""
        stmt = (
            update(RunRow)
            .where(RunRow.run_id == run_id, RunRow.status.in_(ACTIVE_STATUSES))
            .values(
                cancel_requested_at=func.coalesce(RunRow.cancel_requested_at, time.time()),
                cancel_reason=func.coalesce(RunRow.cancel_reason, None if reason is None else reason[:1000]),
            )
        )
        async with self._db.write() as session:
            await session.execute(stmt)
            await announce(session, self._db.dialect, "cancel", run_id)  # its host acts if it still runs it
            return _run(await _row(session, run_id))

    @idempotent
    async def cancel_requested(self, host_id: str) -> list[tuple[str, str | None]]:
        """(run id, reason) of the runs running on `host_id` that were asked to cancel."""
        stmt = select(RunRow.run_id, RunRow.cancel_reason).where(
            RunRow.status == RunStatus.RUNNING.value,
            RunRow.host_id == host_id,
            RunRow.cancel_requested_at.is_not(None),
        )
        async with self._db.read() as session:
            return [(row.run_id, row.cancel_reason) for row in (await session.execute(stmt)).all()]

    @idempotent
    async def list(
        self,
        *,
        conversation_id: str | None = None,
        status: RunStatus | None = None,
        agent_id: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
        created_by: str | None = None,
    ) -> Page[Run]:
        """Runs newest first, optionally of one conversation, status, agent and/or creating key
        (`created_by`), created at or after `since` and before `until` (epoch seconds).

        A time window becomes a range of `created_seq` first (one index probe per bound on
        `(created_at, created_seq)`), so every filter reads through an index that ends in `created_seq`
        and a page reads O(limit) rows. The window's own test on `created_at` stays, so the answer is
        exact for runs admitted in clock order (one host; replicas whose clocks disagree by more than an
        admission may miss a run at the window's edge)."""
        check_limit(limit)
        if since is not None and until is not None and since > until:
            raise InvalidArgumentError(f"since ({since}) is after until ({until}); swap them.")
        stmt = select(RunRow)
        if conversation_id is not None:
            stmt = stmt.where(RunRow.conversation_id == conversation_id)
        if status is not None:
            stmt = stmt.where(RunRow.status == status.value)
        if agent_id is not None:
            stmt = stmt.where(RunRow.agent_id == agent_id)
        if created_by is not None:
            stmt = stmt.where(RunRow.created_by == created_by)
        if cursor is not None:
            stmt = stmt.where(RunRow.created_seq < self._cursors.decode_seq(cursor, "runs"))
        async with self._db.read() as session:
            if since is not None:
                first = select(RunRow.created_seq).where(RunRow.created_at >= since)
                low = await session.scalar(first.order_by(RunRow.created_at, RunRow.created_seq).limit(1))
                if low is None:
                    return Page[Run](items=[], next_cursor=None, prev_cursor=None, has_more=False)
                stmt = stmt.where(RunRow.created_seq >= low)
            if until is not None:
                last = select(RunRow.created_seq).where(RunRow.created_at < until)
                last = last.order_by(RunRow.created_at.desc(), RunRow.created_seq.desc()).limit(1)
                high = await session.scalar(last)
                if high is None:
                    return Page[Run](items=[], next_cursor=None, prev_cursor=None, has_more=False)
                stmt = stmt.where(RunRow.created_seq <= high)
            stmt = stmt.order_by(RunRow.created_seq.desc()).limit(limit + 1)
            rows = await _window_page(session, stmt, since, until, limit)
        has_more = len(rows) > limit
        kept = rows[:limit]
        return Page[Run](
            items=[_run(row) for row in kept],
            next_cursor=self._cursors.encode("runs", kept[-1].created_seq) if has_more else None,
            prev_cursor=None,
            has_more=has_more,
        )
