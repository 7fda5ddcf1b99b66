"""Run-visible state: small JSON values by (scope, owner, key).

Owns the `state` table and its limits. Does not decide which owner a run may use (the grant's
`state_scope_id` does) or whether a run may write (the grant's `state_write`).

Invariants:
- `scope` is one of `STATE_SCOPES`; `owner` is the tuple `RunGrant.state_scope_id(scope)` returns,
  stored as one deterministic string (`_keys.encode_owner`); keys match `[A-Za-z0-9._:-]{1,200}`.
- A value is JSON whose compact UTF-8 serialization is at most `MAX_VALUE_BYTES`; that length is
  stored as `size`. Every check happens before anything is written, so a refused write changes nothing.
- `set` is an upsert on the primary key (scope, owner, key): race-safe, last writer wins.
  `state_values` (the checks) and `upsert_state` are the same write split in two, so a run's result
  batch writes its state in its own transaction (`ResultStore.append_many`); `read_snapshot` is
  `snapshot` inside a caller's transaction (a run's start, `RunStore.try_start`).
- `snapshot` reads (key, size) in key order and stops at the first key that no longer fits, then reads
  only the chosen values: its cost follows `max_bytes`, not the number of stored keys.
- Retried when their connection drops (`@idempotent`): the reads, and `set` (writing the same value
  again; a repeat lands as a later write, which last-writer-wins allows). `delete` is not (its answer,
  whether the key existed, would change).
- `set` refuses values nested deeper than `MAX_JSON_DEPTH`. A value stored deeper anyway (by an older
  version, or straight into the database) is never served and never fails a read of other keys: `get`
  and `list` mark its entry `unservable`, `snapshot` leaves it out and names it; `delete` removes it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import JSON, ColumnElement, Insert, ScalarSelect, bindparam, delete, func, select, type_coerce
from sqlalchemy.ext.asyncio import AsyncSession

from mcphost.errors import InvalidArgumentError, PayloadTooLargeError
from mcphost.protocol import MAX_JSON_DEPTH, STATE_SCOPES, JSONValue, json_depth, nesting_message
from mcphost.stores._cursor import CursorCodec, Page
from mcphost.stores._keys import check_key, encode_owner, key_page, key_page_query
from mcphost.stores._retry import idempotent
from mcphost.stores._sql import Dialect, upserting_insert
from mcphost.stores.engine import Database, core
from mcphost.stores.tables import StateRow, table_of

MAX_VALUE_BYTES = 256 * 1024
SNAPSHOT_MAX_BYTES = 64 * 1024
_SNAPSHOT_BATCH = 256


class StateEntry(BaseModel):
    """One stored state value."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    key: str
    value: JSONValue
    size: int
    """Bytes of the value's compact JSON."""
    updated_at: float
    unservable: bool = False
    """The stored value nests deeper than `MAX_JSON_DEPTH` (written before nesting was bounded, or
    straight into the database): `value` is None and serving it is refused; delete or overwrite it."""


class ScopeSnapshot(BaseModel):
    """The values of one owner's scope a run context carries, and the keys left out because their
    stored value cannot be served."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    values: dict[str, JSONValue]
    unservable: tuple[str, ...] = ()


def servable(value: JSONValue) -> bool:
    """Whether a stored value can be served (it nests at most `MAX_JSON_DEPTH` deep)."""
    return json_depth(value) <= MAX_JSON_DEPTH


def unservable_message(scope: str, key: str) -> str:
    """What to say about a stored value that cannot be served, and how to get rid of it."""
    return (
        f"The stored {scope!r} state value {key!r} nests arrays/objects more than {MAX_JSON_DEPTH} levels "
        "deep and cannot be served. Overwrite it (state_set) or delete it (state_delete; an operator: "
        f"`mcphost state delete {scope} {key} ...` or DELETE /v1/state/{scope}/{key})."
    )


def _entry(row: StateRow) -> StateEntry:
    if servable(row.value):
        return StateEntry(key=row.key, value=row.value, size=row.size, updated_at=row.updated_at)
    return StateEntry(key=row.key, value=None, size=row.size, updated_at=row.updated_at, unservable=True)


def _check_scope(scope: str) -> str:
    if scope not in STATE_SCOPES:
        raise InvalidArgumentError(
            f"Unknown state scope {scope!r}; known: {', '.join(STATE_SCOPES)}.", details={"field": "scope"}
        )
    return scope


def serialized_size(value: JSONValue) -> int:
    """Bytes of `value` as compact JSON (the unit of every state limit)."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"A state value must be plain JSON: {exc}.", details={"field": "value"}
        ) from exc
    return len(text.encode())


STATE_OWNER_IDS: dict[str, tuple[str, ...]] = {
    "conversation": ("runner_id", "binding_id", "conversation_id", "thread_id"),
    "actor": ("runner_id", "binding_id", "actor_id"),
    "subject": ("runner_id", "binding_id", "subject_type", "subject_id"),
    "runner": ("runner_id",),
    "binding": ("binding_id",),
    "workspace": ("workspace_id", "runner_id"),
}
"""The ids that make up each scope's owner, in owner order (the tuple `RunGrant.state_scope_id` builds;
a test pins that the two agree). `thread_id` may be left out: no thread is ""."""
OPTIONAL_OWNER_IDS = frozenset({"thread_id"})


def owner_from_ids(scope: str, ids: Mapping[str, str | None]) -> tuple[str, ...]:
    """The owner tuple of `scope` from the ids an operator names (`runner_id`, `conversation_id`, …).

    Raises:
        InvalidArgumentError: an unknown scope, a missing id the scope needs, or an id it does not use.
    """
    needed = STATE_OWNER_IDS[_check_scope(scope)]
    given = {name for name, value in ids.items() if value is not None}
    missing = [name for name in needed if name not in given and name not in OPTIONAL_OWNER_IDS]
    extra = sorted(given - set(needed))
    if missing or extra:
        wanted = ", ".join(n + (" (optional)" if n in OPTIONAL_OWNER_IDS else "") for n in needed)
        problem = f"missing {', '.join(missing)}" if missing else f"{', '.join(extra)} is not part of it"
        raise InvalidArgumentError(
            f"A {scope!r} state owner is made of {wanted}; {problem}.",
            details={"field": missing[0] if missing else extra[0], "owner_ids": list(needed)},
        )
    return tuple(ids.get(name) or "" for name in needed)


def _entry_cost(key: str, size: int) -> int:
    return len(json.dumps(key)) + 1 + size  # "key":value


def state_values(
    scope: str, owner: Sequence[str], key: str, value: JSONValue
) -> tuple[StateEntry, dict[str, Any]]:
    """The entry and the `state` row of one write, checked: nothing is written when this raises.

    Raises:
        InvalidArgumentError: bad scope or key, a value that is not JSON or that nests deeper
            than `MAX_JSON_DEPTH`.
        PayloadTooLargeError: the value is over `MAX_VALUE_BYTES` serialized.
    """
    if not servable(value):
        raise InvalidArgumentError(
            nesting_message(f"State value for {key!r}") + ".",
            details={"field": "value", "max_depth": MAX_JSON_DEPTH},
        )
    entry = StateEntry(key=check_key(key), value=value, size=serialized_size(value), updated_at=time.time())
    if entry.size > MAX_VALUE_BYTES:
        raise PayloadTooLargeError(
            f"State value for {key!r} is {entry.size} bytes as JSON; the limit is {MAX_VALUE_BYTES}. "
            "Keep state small and put larger data in storage or an artifact.",
            details={"field": "value", "max_bytes": MAX_VALUE_BYTES},
        )
    values = {
        "scope": _check_scope(scope),
        "owner": encode_owner(owner),
        **entry.model_dump(exclude={"unservable"}),
    }
    return entry, values


# Statements every run may execute (its state writes and the snapshots its context shows), built once
# (`engine.core`).
_STATE = table_of(StateRow)
_key, _value, _size = _STATE.c["key"], _STATE.c["value"], _STATE.c["size"]
_OF_OWNER = (_STATE.c["scope"] == bindparam("w_scope"), _STATE.c["owner"] == bindparam("w_owner"))
_SIZES = select(_key, _size).where(*_OF_OWNER).order_by(_key).limit(_SNAPSHOT_BATCH)
_SIZES_AFTER = (
    select(_key, _size).where(*_OF_OWNER, _key > bindparam("w_after")).order_by(_key).limit(_SNAPSHOT_BATCH)
)
_VALUES_UP_TO = select(_key, _value, _size).where(*_OF_OWNER, _key <= bindparam("w_last")).order_by(_key)


@cache
def _upsert(dialect: Dialect) -> Insert:
    """`upsert_state`'s statement, built once per dialect on its first use (`engine.core`), not at import."""
    return upserting_insert(dialect, _STATE, ["scope", "owner", "key"], ["value", "size", "updated_at"])


async def upsert_state(session: AsyncSession, dialect: Dialect, values: dict[str, Any]) -> None:
    """Inside `session`: write one checked `state_values` row, replacing what was at its key."""
    await (await core(session)).execute(_upsert(dialect), values)


def snapshot_owner(scope: str, owner: Sequence[str]) -> dict[str, str]:
    """The parameters of a snapshot's reads (`w_scope`, `w_owner`), the scope checked."""
    return {"w_scope": _check_scope(scope), "w_owner": encode_owner(owner)}


def first_sizes(scope: Any, owner: Any) -> ScalarSelect[Any]:
    """PostgreSQL: the first batch a snapshot reads (`_SIZES` of the owner given by the expressions
    `scope` and `owner`) as one JSON array of [key, size] in key order, NULL when the owner has none;
    for a statement that reads it together with others (`read_snapshot(first=...)`)."""
    from sqlalchemy.dialects.postgresql import aggregate_order_by  # loaded on PostgreSQL only

    sizes = (
        select(_key, _size)
        .where(_STATE.c["scope"] == scope, _STATE.c["owner"] == owner)
        .order_by(_key)
        .limit(_SNAPSHOT_BATCH)
        .subquery()
    )
    pair = func.json_build_array(sizes.c.key, sizes.c.size)
    return select(type_coerce(func.json_agg(aggregate_order_by(pair, sizes.c.key)), JSON)).scalar_subquery()


async def read_snapshot(
    session: AsyncSession,
    scope: str,
    owner: Sequence[str],
    *,
    max_bytes: int = SNAPSHOT_MAX_BYTES,
    first: Sequence[Sequence[Any]] | None = None,
) -> ScopeSnapshot:
    """Inside `session`: the owner's values in key order, stopping before the first that would push
    the compact JSON of the result past `max_bytes`. A value that cannot be served is left out and its
    key listed in `unservable`: one bad value never fails the snapshot. `first`: the first batch of
    (key, size), already read in this transaction (`first_sizes`), instead of reading it here."""
    conn = await core(session)
    where = snapshot_owner(scope, owner)
    chosen: set[str] = set()
    total = 2  # {}
    after: str | None = None
    full = False
    while not full:
        if after is None and first is not None:
            rows = [(key, size) for key, size in first]
        elif after is None:
            rows = (await conn.execute(_SIZES, where)).all()
        else:
            rows = (await conn.execute(_SIZES_AFTER, where | {"w_after": after})).all()
        for key, size in rows:
            cost = _entry_cost(key, size) + (1 if chosen else 0)
            if total + cost > max_bytes:
                full = True
                break
            chosen.add(key)
            total += cost
        if len(rows) < _SNAPSHOT_BATCH:
            break
        after = rows[-1][0]
    if not chosen:
        return ScopeSnapshot(values={})
    last = max(chosen)
    rows = (await conn.execute(_VALUES_UP_TO, where | {"w_last": last})).all()
    # PostgreSQL reads each statement afresh: count again, skipping keys written in between.
    snapshot: dict[str, JSONValue] = {}
    unservable: list[str] = []
    total = 2
    for key, value, size in rows:
        if key not in chosen:
            continue
        if not servable(value):
            unservable.append(key)
            continue
        cost = _entry_cost(key, size) + (1 if snapshot else 0)
        if total + cost > max_bytes:
            break
        snapshot[key] = value
        total += cost
    return ScopeSnapshot(values=snapshot, unservable=tuple(unservable))


class StateStore:
    """Get, set, delete, list and snapshot state values."""

    def __init__(self, db: Database, cursors: CursorCodec) -> None:
        self._db = db
        self._cursors = cursors

    def _where(self, scope: str, owner: Sequence[str]) -> tuple[ColumnElement[bool], ColumnElement[bool]]:
        return (StateRow.scope == _check_scope(scope), StateRow.owner == encode_owner(owner))

    @idempotent
    async def get(self, scope: str, owner: Sequence[str], key: str) -> StateEntry | None:
        """The value at `key`, or None; an unservable value comes back with `unservable` set."""
        query = select(StateRow).where(*self._where(scope, owner), StateRow.key == check_key(key))
        async with self._db.read() as session:
            row = (await session.execute(query)).scalar_one_or_none()
        return None if row is None else _entry(row)

    @idempotent
    async def set(self, scope: str, owner: Sequence[str], key: str, value: JSONValue) -> StateEntry:
        """Store `value` at `key`, replacing what was there.

        Raises:
            InvalidArgumentError: bad scope or key, a value that is not JSON or that nests deeper
                than `MAX_JSON_DEPTH`.
            PayloadTooLargeError: the value is over `MAX_VALUE_BYTES` serialized.
        """
        entry, values = state_values(scope, owner, key, value)
        async with self._db.write() as session:
            await upsert_state(session, self._db.dialect, values)
        return entry

    async def delete(self, scope: str, owner: Sequence[str], key: str) -> bool:
        """Remove `key`; whether it existed."""
        stmt = (
            delete(StateRow)
            .where(*self._where(scope, owner), StateRow.key == check_key(key))
            .returning(StateRow.key)
        )
        async with self._db.write() as session:
            return (await session.execute(stmt)).first() is not None

    @idempotent
    async def snapshot(
        self, scope: str, owner: Sequence[str], *, max_bytes: int = SNAPSHOT_MAX_BYTES
    ) -> ScopeSnapshot:
        """The owner's values in key order, stopping before the first that would push the compact
        JSON of the result past `max_bytes` (`read_snapshot`)."""
        async with self._db.read() as session:
            return await read_snapshot(session, scope, owner, max_bytes=max_bytes)

    @idempotent
    async def list(
        self,
        scope: str,
        owner: Sequence[str],
        *,
        prefix: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[StateEntry]:
        """A page of the owner's entries in key order, optionally only keys starting with `prefix`."""
        query = key_page_query(
            select(StateRow).where(*self._where(scope, owner)),
            StateRow.key,
            codec=self._cursors,
            kind="state",
            prefix=prefix,
            cursor=cursor,
            limit=limit,
        )
        async with self._db.read() as session:
            rows = (await session.execute(query)).scalars().all()
        return key_page(
            rows, codec=self._cursors, kind="state", limit=limit, key_of=lambda r: r.key, item=_entry
        )
