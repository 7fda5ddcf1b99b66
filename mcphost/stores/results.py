"""Run results: every accepted result of a run, by host-assigned sequence.

Owns the `run_results` table. Does not assign sequences, validate results or deliver them (the
orchestrator does: it persists here first, then publishes, so readers resume with `after=N`).

Invariants:
- (run_id, seq) is the primary key; a batch is written in one transaction (an executemany), so a flood
  of deltas costs one round trip per batch, not per result. A batch that repeats a stored sequence
  writes nothing and raises `ConflictError`. The batch's outbox rows and its actions' approvals are
  written in the same transaction (`Outbox.results`, `ApprovalStore.actions`).
- What a batch causes (`ResultEffects`: its event-log rows, transcript items and state writes) is
  written in the batch's transaction: a run's batch is one commit, and a crash leaves all or none of it.
  On PostgreSQL the usual batch (results, transcript items, state writes to distinct keys; nothing the
  outbox announces, no action to approve) is one statement that commits by itself
  (`_APPEND_WITH_EFFECTS`, `Database.run_statement`): one round trip, all or none of it all the same.
- A batch of a remote run's results deletes the queue rows they came from (`ResultEffects.consumed`)
  in its transaction: a row is either journaled or still queued, never both, never neither.
- `list(run_id, after=N)` reads the primary key range (run_id, seq > N) in order: O(limit).
- A stored payload nested deeper than `MAX_JSON_DEPTH` (stored before nesting was bounded, or straight
  into the database) is served as `{"type": …, "data": null, "data_error": {code, message}}`, so one
  row never fails a page, a result stream or `mcphost show`.
- Every method is retried when its connection drops (`@idempotent`): reads trivially, and `append_many`
  because a batch whose sequences are already stored with the same types and payloads (an earlier
  attempt committed before its connection dropped) counts as written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import column, delete, func, insert, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from mcphost.errors import ConflictError
from mcphost.models import Run, RunStatus
from mcphost.protocol import MAX_JSON_DEPTH, JSONObject, json_depth
from mcphost.stores._cursor import MAX_RUN_SEQ, check_after, check_limit
from mcphost.stores._retry import idempotent
from mcphost.stores._sql import Dialect
from mcphost.stores.approvals import ApprovalStore
from mcphost.stores.deliveries import Outbox
from mcphost.stores.engine import Database, core
from mcphost.stores.events import insert_event
from mcphost.stores.runs import RUN_COLUMNS, RunEnd, end_running, run_of
from mcphost.stores.state import upsert_state
from mcphost.stores.tables import RunResultRow, RuntimeResultRow, table_of
from mcphost.stores.transcript import add_item
from mcphost.stores.wakeups import CHANNEL, wake_payload

MAX_LIST_LIMIT = 10_000
_INSERT_ANNOUNCED = text(
    "WITH inserted AS ("
    " INSERT INTO run_results (run_id, seq, type, payload, created_at)"
    " SELECT :run_id, r.seq, r.type, CAST(r.payload AS json), :created_at"
    " FROM unnest(CAST(:seqs AS integer[]), CAST(:types AS varchar[]), CAST(:payloads AS text[]))"
    " AS r(seq, type, payload)"
    " RETURNING 1)"
    " SELECT pg_notify(:channel, :wake) FROM (SELECT 1 FROM inserted LIMIT 1) AS one"
)
"""PostgreSQL: a batch of results and its wake-up (`wakeups.announce`) in one statement and one round
trip, the rows as arrays (`unnest`), each payload the JSON text SQLAlchemy's own JSON type would bind."""
_TRANSCRIPT_COLUMNS = (
    ("item_id", "varchar"),
    ("conversation_id", "varchar"),
    ("thread_id", "varchar"),
    ("role", "varchar"),
    ("content", "text"),
    ("contents", "json"),
    ("artifacts", "json"),
    ("event_id", "varchar"),
    ("run_id", "varchar"),
    ("actor_id", "varchar"),
    ("created_at", "float8"),
)
_STATE_COLUMNS = (
    ("scope", "varchar"),
    ("owner", "varchar"),
    ("key", "varchar"),
    ("value", "json"),
    ("size", "integer"),
    ("updated_at", "float8"),
)


def _unnest_select(columns: tuple[tuple[str, str], ...], prefix: str) -> str:
    """`SELECT <columns> FROM unnest(<one array parameter per column>)`, a JSON column sent as text."""
    arrays = ", ".join(f"CAST(:{prefix}{n} AS {'text' if t == 'json' else t}[])" for n, t in columns)
    names = ", ".join(n for n, _ in columns)
    picked = ", ".join(f"CAST(x.{n} AS json)" if t == "json" else f"x.{n}" for n, t in columns)
    return f"SELECT {picked} FROM unnest({arrays}) AS x({names})"


_APPEND_WITH_EFFECTS = text(
    "WITH inserted AS ("
    " INSERT INTO run_results (run_id, seq, type, payload, created_at)"
    " SELECT :run_id, r.seq, r.type, CAST(r.payload AS json), :created_at"
    " FROM unnest(CAST(:seqs AS integer[]), CAST(:types AS varchar[]), CAST(:payloads AS text[]))"
    " AS r(seq, type, payload)"
    " RETURNING 1),"
    f" item AS (INSERT INTO transcript ({', '.join(n for n, _ in _TRANSCRIPT_COLUMNS)})"
    f" {_unnest_select(_TRANSCRIPT_COLUMNS, 't_')} ON CONFLICT (item_id) DO NOTHING),"
    f" written AS (INSERT INTO state ({', '.join(n for n, _ in _STATE_COLUMNS)})"
    f" {_unnest_select(_STATE_COLUMNS, 's_')}"
    " ON CONFLICT (scope, owner, key) DO UPDATE"
    " SET value = excluded.value, size = excluded.size, updated_at = excluded.updated_at)"
    " SELECT pg_notify(:channel, :wake) FROM (SELECT 1 FROM inserted LIMIT 1) AS one"
)
"""PostgreSQL: `_INSERT_ANNOUNCED` with the batch's transcript items and state writes, each part as
arrays: the usual batch (`ResultStore.append_many`'s one-statement case) in one statement that commits
by itself, one round trip in all. The data-modifying parts see one snapshot and touch different tables;
a state key is written once per statement (`ON CONFLICT DO UPDATE` cannot touch a row twice), so a
batch that writes one key twice takes the transaction instead."""
_ENDED = (
    "ended AS (UPDATE runs SET status = :e_status, ended_at = :e_ended_at,"
    " revoked_at = COALESCE(revoked_at, :e_ended_at),"
    " error = COALESCE(CAST(CAST(:e_error AS text) AS json), error),"
    " usage = COALESCE(CAST(CAST(:e_usage AS text) AS json), usage)"
    f" WHERE run_id = :run_id AND (status = '{RunStatus.RUNNING.value}') IS TRUE"
    f" RETURNING {', '.join(c.name for c in RUN_COLUMNS)})"
)
"""PostgreSQL: a running run's end as a part of its last batch's statement (`RunEnd`): the move
`runs.finish` makes (`runs._move`), its row read back. The status check is written so that no index
can take it: the row is found by its id alone. Written as `status = 'running'`, it was planned on
`(status, created_seq)` whenever the statistics said `runs` was small (a fresh database, or one growing
faster than autovacuum samples it; the prepared plan is kept until the next `ANALYZE`), and each end then
read every running run of every host, filtering them by id."""
_APPEND_ENDING = text(
    _APPEND_WITH_EFFECTS.text.rsplit(" SELECT pg_notify", 1)[0] + f", {_ENDED}" + " SELECT ended.*,"
    " pg_notify(:channel, CASE WHEN ended.run_id IS NOT NULL THEN :end_wake ELSE :wake END) AS woken"
    " FROM (SELECT 1 FROM inserted LIMIT 1) AS one LEFT JOIN ended ON true"
).columns(*RUN_COLUMNS, column("woken"))
"""PostgreSQL: `_APPEND_WITH_EFFECTS` that also ends the run (`_ENDED`) and announces its end: a run's
last batch and its end in one statement that commits by itself. Its one row is the ended run, or nulls
when the run was not running (its end is then left to `runs.finish`). One wake-up: `end` when it ended
the run (a listener wakes the run's readers on an `end` as on `results`, `wakeups.py`), else
`results`; every listening process was woken twice per run before."""
_INSERT = insert(table_of(RunResultRow))
"""A batch's rows, as one executemany (`engine.core`: built once)."""


class StoredResult(BaseModel):
    """One persisted result."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    run_id: str
    seq: int
    type: str
    payload: JSONObject
    created_at: float


async def _write_effects(session: AsyncSession, dialect: Dialect, effects: ResultEffects) -> None:
    if effects.consumed is not None:
        run_id, fence, seq = effects.consumed
        await session.execute(
            delete(RuntimeResultRow).where(
                RuntimeResultRow.run_id == run_id,
                RuntimeResultRow.fence == fence,
                RuntimeResultRow.seq <= seq,
            )
        )
    for event in effects.events:
        await insert_event(session, dialect, event)
    for item in effects.transcript:
        await add_item(session, dialect, item)
    for values in effects.state:
        await upsert_state(session, dialect, values)


def _served(row: RunResultRow) -> StoredResult:
    payload = row.payload
    if json_depth(payload) > MAX_JSON_DEPTH:
        message = (
            f"The stored result {row.seq} of run {row.run_id!r} nests arrays/objects more than "
            f"{MAX_JSON_DEPTH} levels deep and cannot be served; the run's other results are intact."
        )
        payload = {
            "type": row.type,
            "data": None,
            "data_error": {"code": "runtime_error", "message": message},
        }
    return StoredResult(
        run_id=row.run_id, seq=row.seq, type=row.type, payload=payload, created_at=row.created_at
    )


@dataclass
class ResultEffects:
    """Rows a batch of results causes, written in the batch's transaction, in this order after it:
    event-log rows (`events.event_values`), transcript items (`transcript.item_values`) and state
    writes (`state.state_values`), each already checked by its builder."""

    events: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    transcript: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    state: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    consumed: tuple[str, int, int] | None = None
    """A remote run's batch: (run_id, fence, number) — its runtime's posted results of that fence up to
    that number are journaled now, and deleted from the queue (`stores/dispatch.py`)."""

    def __bool__(self) -> bool:
        return bool(self.events or self.transcript or self.state or self.consumed)


class ResultStore:
    """Append and read run results."""

    def __init__(
        self, db: Database, outbox: Outbox | None = None, approvals: ApprovalStore | None = None
    ) -> None:
        self._db = db
        self._outbox = outbox
        self._approvals = approvals

    @idempotent
    async def append_many(
        self,
        run_id: str,
        items: list[tuple[str, JSONObject]],
        *,
        first_seq: int,
        effects: ResultEffects | None = None,
        long: bool = False,
    ) -> list[StoredResult]:
        """Store `items` as (type, payload) at sequences first_seq, first_seq + 1, …, and `effects` in
        the same transaction (one commit per batch: its results and what they cause land together).
        A `long` batch (megabytes to encode and write) runs off the event loop (`Database.run_write`).

        Storing the same batch again is a no-op that returns the stored results (its effects were
        committed with it).

        Raises:
            ConflictError: one of the sequences is already stored for the run with other content.
        """
        stored, _ = await self._append(run_id, items, first_seq, effects, long, None)
        return stored

    @idempotent
    async def append_ending(
        self,
        run_id: str,
        items: list[tuple[str, JSONObject]],
        *,
        first_seq: int,
        end: RunEnd,
        effects: ResultEffects | None = None,
        long: bool = False,
    ) -> tuple[list[StoredResult], Run | None]:
        """`append_many`, and in the same transaction the run's `end` when it is running (the move
        `RunStore.finish` makes, with its outbox rows): its last batch and its end in one commit; on
        PostgreSQL the usual batch is still one statement. The run as it ended, or None when it was not
        running (nothing of the end is written: `finish` decides it) or the batch was already stored
        (a repeat: its end may or may not have been written with it; `finish` finds out).

        Raises:
            ConflictError: as `append_many`.
        """
        if not items:
            raise ValueError("a run's end is written with results; append_ending got none")
        return await self._append(run_id, items, first_seq, effects, long, end)

    async def _append(
        self,
        run_id: str,
        items: list[tuple[str, JSONObject]],
        first_seq: int,
        effects: ResultEffects | None,
        long: bool,
        end: RunEnd | None,
    ) -> tuple[list[StoredResult], Run | None]:
        if first_seq < 1:
            raise ValueError(f"result sequences start at 1; got first_seq={first_seq}")
        if not items and not effects:
            return [], None
        now = time.time()
        stored = [  # the caller's validated results: built, not validated again
            StoredResult.model_construct(
                run_id=run_id, seq=first_seq + i, type=type_, payload=payload, created_at=now
            )
            for i, (type_, payload) in enumerate(items)
        ]

        async def append_in(session: AsyncSession) -> Run | None:
            if stored:
                if self._db.dialect == "postgresql":  # with its wake-up (`wakeups.announce`; SQLite has none)
                    await (await core(session)).execute(
                        _INSERT_ANNOUNCED, self._announced(run_id, now, stored)
                    )
                else:
                    rows = [
                        {
                            "run_id": run_id,
                            "seq": r.seq,
                            "type": r.type,
                            "payload": r.payload,
                            "created_at": now,
                        }
                        for r in stored
                    ]
                    await (await core(session)).execute(_INSERT, rows)
                if self._outbox is not None:  # announced in the same transaction (stores/deliveries.py)
                    await self._outbox.results(session, run_id, items, first_seq=first_seq)
                if self._approvals is not None:  # actions with an idempotency key (stores/approvals.py)
                    await self._approvals.actions(session, run_id, items)
            if effects:
                await _write_effects(session, self._db.dialect, effects)
            if end is None:
                return None
            return await end_running(session, self._db.dialect, self._outbox, run_id, end)

        try:
            if not self._in_one_statement(stored, effects, end):
                return stored, await self._db.run_write(append_in, long=long)
            params = self._one_statement(run_id, now, stored, effects)
            if end is None:
                await self._db.run_statement(_APPEND_WITH_EFFECTS, params)
                return stored, None
            row = (await self._db.run_statement(_APPEND_ENDING, params | self._ending(run_id, end))).one()
            return stored, None if row.run_id is None else run_of(row)
        except IntegrityError as exc:
            already = await self.list(run_id, after=first_seq - 1, limit=len(stored))
            if [(r.seq, r.type, r.payload) for r in already] == [(r.seq, r.type, r.payload) for r in stored]:
                return already, None
            raise ConflictError(
                f"Run {run_id!r} already has results in sequences {first_seq}..{stored[-1].seq}, or the run "
                "does not exist; append after last_seq().",
                details={"run_id": run_id, "first_seq": first_seq},
            ) from exc

    def _ending(self, run_id: str, end: RunEnd) -> dict[str, Any]:
        """`_ENDED`'s parameters (besides the batch's `run_id` and `channel`)."""
        dumps = self._dumps()
        return {
            "e_status": end.status.value,
            "e_ended_at": time.time(),
            "e_error": None if end.error is None else dumps(end.error.model_dump(mode="json")),
            "e_usage": None if end.usage is None else dumps(end.usage),
            "end_wake": wake_payload("end", run_id),
        }

    def _in_one_statement(
        self, stored: list[StoredResult], effects: ResultEffects | None, end: RunEnd | None
    ) -> bool:
        """Whether the batch is one statement (`_APPEND_WITH_EFFECTS`, `_APPEND_ENDING` with an end): on
        PostgreSQL, results with only transcript items and state writes (distinct keys) besides them,
        none the outbox announces and no action to approve; with an end, nothing the outbox announces
        at all (a run's end makes rows for its webhooks and channels)."""
        if self._db.dialect != "postgresql" or not stored:
            return False
        if end is not None and self._outbox is not None and self._outbox.active:
            return False
        kinds = [r.type for r in stored]
        if (self._outbox is not None and self._outbox.announces(kinds)) or (
            self._approvals is not None and "action.requested" in kinds
        ):
            return False
        if effects is None:
            return True
        keys = {(v["scope"], v["owner"], v["key"]) for v in effects.state}
        return not effects.events and effects.consumed is None and len(keys) == len(effects.state)

    def _one_statement(
        self, run_id: str, now: float, stored: list[StoredResult], effects: ResultEffects | None
    ) -> dict[str, Any]:
        dumps = self._dumps()
        items = effects.transcript if effects is not None else []
        state = effects.state if effects is not None else []
        params = self._announced(run_id, now, stored)
        for prefix, columns, rows in (("t_", _TRANSCRIPT_COLUMNS, items), ("s_", _STATE_COLUMNS, state)):
            for name, type_ in columns:
                params[prefix + name] = [dumps(row[name]) if type_ == "json" else row[name] for row in rows]
        return params

    def _announced(self, run_id: str, now: float, stored: list[StoredResult]) -> dict[str, Any]:
        """`_INSERT_ANNOUNCED`'s parameters: the results as arrays, and their wake-up."""
        dumps = self._dumps()
        return {
            "run_id": run_id,
            "created_at": now,
            "seqs": [r.seq for r in stored],
            "types": [r.type for r in stored],
            "payloads": [dumps(r.payload) for r in stored],
            "channel": CHANNEL,
            "wake": wake_payload("results", run_id),
        }

    def _dumps(self) -> Callable[[Any], str]:
        """What SQLAlchemy's JSON type binds: the engine's serializer, json.dumps by default."""
        return getattr(self._db.engine.dialect, "_json_serializer", None) or json.dumps

    @idempotent
    async def list(self, run_id: str, *, after: int = 0, limit: int = 1000) -> list[StoredResult]:
        """Results with seq > `after`, oldest first, at most `limit` (1..10,000)."""
        check_limit(limit, MAX_LIST_LIMIT)
        check_after(after, MAX_RUN_SEQ)
        stmt = (
            select(RunResultRow)
            .where(RunResultRow.run_id == run_id, RunResultRow.seq > after)
            .order_by(RunResultRow.seq)
            .limit(limit)
        )
        async with self._db.read() as session:
            rows = (await session.execute(stmt)).scalars().all()
        return [_served(r) for r in rows]

    @idempotent
    async def last_seq(self, run_id: str) -> int:
        """The highest stored sequence of the run, 0 when none."""
        async with self._db.read() as session:
            seq = (
                await session.execute(select(func.max(RunResultRow.seq)).where(RunResultRow.run_id == run_id))
            ).scalar_one()
        return seq or 0
