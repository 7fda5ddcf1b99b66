"""PostgreSQL: a run's first admission in one statement (`RunStore.admit`'s usual case).

Owns the statement and reading its row. It inserts the event's first run unless the event has one,
and with it, from the inserted row: its conversation's row (`conversations.touch_from`), its event-log
row, and, when it may start at once, the run `running` with its user transcript row; it reads what the
run's context needs (the thread's head after that row, the first batch of each state snapshot,
`state.first_sizes`). Its one row is the inserted run (`created`), else the event's latest run, which
the caller decides on as before. Does not take the conversation's lock (the caller does, in an
earlier statement: a statement reads the database as it was when it began) nor build or write the
context (`RunStore.admit` does, from what this reads, in the next statement).

Invariants:
- The rows written are those of the statements it replaces (`runs._INSERT`, `touch_conversation`,
  `insert_event`, `_START_IN_TURN` / `_move`, `add_item`), with the same values; a run that starts is
  inserted `running` (with `started_at` and the starting host) instead of inserted `queued` and moved.
  A new run is its conversation's newest, so it is its turn when no run of the conversation is queued
  or running (`runs._TURN_TAKEN` for the newest `created_seq`), checked under the conversation's lock.
- Data-modifying parts of one statement do not see each other's rows: everything after the run's
  insert reads its row from its `RETURNING`, and the thread's head is the newest of the thread's rows
  before it and the inserted item.
- Built once per shape (`AdmitShape`, a handful), so `engine.core` prepares each once per connection.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CompoundSelect,
    Integer,
    Row,
    Select,
    Table,
    bindparam,
    case,
    exists,
    func,
    literal,
    literal_column,
    null,
    select,
    union_all,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.dml import ReturningInsert
from sqlalchemy.sql.elements import BindParameter, ColumnElement, KeyedColumnElement
from sqlalchemy.sql.selectable import CTE

from mcphost.models import RunStatus
from mcphost.stores._sql import among, pg_insert
from mcphost.stores.conversations import touch_from
from mcphost.stores.engine import core
from mcphost.stores.state import first_sizes, snapshot_owner
from mcphost.stores.tables import ConversationRow, EventRow, RunRow, TranscriptRow, table_of

_RUNS = table_of(RunRow)
_EVENTS = table_of(EventRow)
_TRANSCRIPT = table_of(TranscriptRow)
_UNSET = (
    "created_seq",
    "error",
    "revoked_at",
    "cancel_requested_at",
    "cancel_reason",
    "context",
    "warm_session_id",
)
RUN_VALUES = tuple(c.name for c in _RUNS.c if c.name not in _UNSET)
"""The columns an admission gives a run (`RunStore.admit`'s values); the rest keep their defaults."""
_ROW: tuple[Any, ...] = tuple(c for c in _RUNS.c if c.name not in ("context", "grant"))
"""The run's columns read back: `runs._ROW`."""
_STARTED = ("status", "started_at", "host_id")
"""The columns a run that starts at once gets from its start (`RunStart`) instead of its queued row."""
_ITEM = tuple(c.name for c in _TRANSCRIPT.c if c.name not in ("seq", "search"))
_EVENT = tuple(c.name for c in _EVENTS.c if c.name != "seq")


@dataclass(frozen=True)
class AdmitShape:
    """What one admission writes and reads, which decides its statement."""

    conversation: bool
    inbound: bool
    start: bool
    """The run starts at once when it may (`RunStart`)."""
    item: bool
    """With `start`: its user transcript row."""
    head: bool
    """With `start`: the thread's head, for its context."""
    scopes: int
    """With `start`: the number of state snapshots its context shows."""


@dataclass(frozen=True)
class Starting:
    """What the statement writes and reads for a run that starts at once (`runs.RunStart`)."""

    host_id: str
    user_item: Mapping[str, Any] | None
    head: bool
    """Its context reads the thread's head."""
    state: Sequence[tuple[str, Sequence[str]]]
    """The (scope, owner) of each state snapshot its context shows."""


@dataclass(frozen=True)
class Admitted:
    """The statement's answer: the run's row (`runs._ROW`) and whether it inserted it."""

    row: Row[Any]
    created: bool
    head: tuple[int | None, int]
    """(newest seq, items up to two) of the run's thread after its user row."""
    sizes: tuple[Sequence[Sequence[Any]], ...]
    """The first batch of (key, size) of each state snapshot, in the order given."""


_STATEMENTS: dict[AdmitShape, CompoundSelect[Any]] = {}


def _param(name: str, column: str, table: Table) -> BindParameter[Any]:
    return bindparam(name, type_=table.c[column].type)


def _columns(cte: CTE) -> list[KeyedColumnElement[Any]]:
    """`runs._ROW` as `cte` (a run's row) has them."""
    return [cte.c[c.name] for c in _ROW]


def _statement(shape: AdmitShape) -> CompoundSelect[Any]:
    found = _STATEMENTS.get(shape)
    if found is not None:
        return found
    existing: CTE = (
        select(*_ROW)
        .where(_RUNS.c.event_id == bindparam("r_event_id"))
        .order_by(_RUNS.c.attempt.desc())
        .limit(1)
        .cte("existing")
    )
    values: dict[str, ColumnElement[Any]] = {name: _param(f"r_{name}", name, _RUNS) for name in RUN_VALUES}
    source: Select[Any]
    if shape.start:
        turn = _RUNS.alias("turn")
        free: ColumnElement[bool] = literal(True, Boolean)
        if shape.conversation:
            taken = select(turn.c.run_id).where(
                turn.c.conversation_id == bindparam("r_conversation_id"),
                among(turn.c.status, (RunStatus.RUNNING.value, RunStatus.QUEUED.value)),
            )
            free = ~taken.exists()
        # OFFSET 0 keeps the subquery whole: PostgreSQL would pull it up into each `CASE` that reads
        # `free` (the turn check three times per admission, where once does).
        decided = select(free.label("free")).offset(literal_column("0")).subquery("decided")
        values |= {
            name: case((decided.c.free, _param(f"s_{name}", name, _RUNS)), else_=values[name])
            for name in _STARTED
        }
        source = select(*values.values()).select_from(decided)
    else:
        source = select(*values.values())
    source = source.where(~exists(select(literal(1)).select_from(existing)))
    inserting = cast(
        "ReturningInsert[Any]", _RUNS.insert().from_select(list(values), source).returning(*_ROW)
    )
    inserted = inserting.cte("inserted")
    parts: list[Any] = []
    if shape.conversation:
        c = inserted.c
        touched = cast(
            "Select[Any]",
            select(
                c.conversation_id,
                c.created_at,
                c.created_at,
                c.created_seq,
                c.run_id,
                c.agent_id,
                _param("c_actor_id", "actor_id", table_of(ConversationRow)),
                literal(1, Integer),
            ).select_from(inserted),
        )
        parts.append(touch_from(touched).cte("touched"))
    if shape.inbound:
        logged = select(*(_param(f"e_{name}", name, _EVENTS) for name in _EVENT)).select_from(inserted)
        log = pg_insert(_EVENTS).from_select(list(_EVENT), logged)
        parts.append(log.on_conflict_do_nothing(index_elements=["event_id"]).cte("logged"))
    item: CTE | None = None
    if shape.start and shape.item:
        said = (
            select(*(_param(f"t_{name}", name, _TRANSCRIPT) for name in _ITEM))
            .select_from(inserted)
            .where(inserted.c.status == RunStatus.RUNNING.value)
        )
        add = pg_insert(_TRANSCRIPT).from_select(list(_ITEM), said)
        item = add.on_conflict_do_nothing(index_elements=["item_id"]).returning(_TRANSCRIPT.c.seq).cte("item")
        if not shape.head:
            parts.append(item)
    extra: list[Any] = []
    if shape.start and shape.head:
        before = (
            select(_TRANSCRIPT.c.seq)
            .where(
                _TRANSCRIPT.c.conversation_id == bindparam("r_conversation_id"),
                _TRANSCRIPT.c.thread_id == bindparam("r_thread_id"),
            )
            .order_by(_TRANSCRIPT.c.seq.desc())
            .limit(2)
            .subquery("before")
        )
        newest: Select[Any] = select(before.c.seq)
        head: CTE = (newest if item is None else union_all(newest, select(item.c.seq))).cte("head")
        extra += [
            select(func.max(head.c.seq)).scalar_subquery().label("head_seq"),
            select(func.count()).select_from(head).scalar_subquery().label("head_items"),
        ]
    if shape.start:
        extra += [
            first_sizes(bindparam(f"p{i}_scope"), bindparam(f"p{i}_owner")).label(f"sizes_{i}")
            for i in range(shape.scopes)
        ]
    nothing = [sql_cast(null(), BigInteger if i < 2 and shape.head else JSON) for i in range(len(extra))]
    created = cast(
        "Select[Any]",
        select(*_columns(inserted), literal(True, Boolean).label("created"), *extra),
    )
    for part in parts:
        created = created.add_cte(part)
    prior = cast("Select[Any]", select(*_columns(existing), literal(False, Boolean), *nothing))
    built: CompoundSelect[Any] = union_all(created, prior)
    _STATEMENTS[shape] = built
    return built


async def admit_first(
    session: AsyncSession,
    values: Mapping[str, Any],
    *,
    actor_id: str | None,
    inbound: Mapping[str, Any] | None,
    start: Starting | None,
) -> Admitted:
    """Admit the event's first run (`values`, `RUN_VALUES`) in one statement, unless it has a run: see
    the module docstring. With `start`, the run starts at once if it may."""
    conversation = bool(values["conversation_id"])
    host, item, wants_head, scopes = (
        ("", None, False, ()) if start is None else (start.host_id, start.user_item, start.head, start.state)
    )
    shape = AdmitShape(
        conversation=conversation,
        inbound=inbound is not None,
        start=start is not None,
        item=item is not None,
        head=wants_head and conversation,
        scopes=len(scopes),
    )
    params: dict[str, Any] = {f"r_{name}": values[name] for name in RUN_VALUES}
    if conversation:
        params["c_actor_id"] = actor_id
    if inbound is not None:
        params |= {f"e_{name}": inbound[name] for name in _EVENT}
    if start is not None:
        params |= {"s_status": RunStatus.RUNNING.value, "s_started_at": time.time(), "s_host_id": host}
        if item is not None:
            params |= {f"t_{name}": item[name] for name in _ITEM}
        for i, (scope, owner) in enumerate(scopes):
            where = snapshot_owner(scope, owner)
            params |= {f"p{i}_scope": where["w_scope"], f"p{i}_owner": where["w_owner"]}
    row: Row[Any] = (await (await core(session)).execute(_statement(shape), params)).one()
    created = bool(row.created)
    head: tuple[int | None, int] = (None, 0)
    if shape.head and created:
        head = (row.head_seq, int(row.head_items or 0))
    sizes = (
        tuple(cast("list[Any]", getattr(row, f"sizes_{i}") or []) for i in range(shape.scopes))
        if created
        else ()
    )
    return Admitted(row=row, created=created, head=head, sizes=sizes)
