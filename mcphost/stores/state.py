"""Run-visible state: small JSON values by (scope, owner, key).

Owns the `state` table and its limits. Does not decide which owner a run may use (the grant's
`state_scope_id` does) or whether a run may write (the grant's `state_write`).

Invariants:
- `scope` is one of `STATE_SCOPES`; `owner` is the tuple `RunGrant.state_scope_id(scope)` returns,
  stored as one deterministic string (`_keys.encode_owner`); keys match `[A-Za-z0-9._:-]{1,200}`.
- A value is JSON whose compact UTF-8 serialization is at most `MAX_VALUE_BYTES`; that length is
  stored as `size`. Every check happens before anything is written, so a refused write changes nothing.
- `set` is an upsert on the primary key (scope, owner, key): race-safe, last writer wins.
- `snapshot` reads (key, size) in key order and stops at the first key that no longer fits, then reads
  only the chosen values: its cost follows `max_bytes`, not the number of stored keys.
- Retried when their connection drops (`@idempotent`): the reads, and `set` (writing the same value
  again; a repeat lands as a later write, which last-writer-wins allows). `delete` is not (its answer,
  whether the key existed, would change).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict
from sqlalchemy import ColumnElement, delete, select

from mcphost.errors import InvalidArgumentError, PayloadTooLargeError
from mcphost.protocol import STATE_SCOPES, JSONValue
from mcphost.stores._cursor import CursorCodec, Page
from mcphost.stores._keys import check_key, encode_owner, key_page, key_page_query
from mcphost.stores._retry import idempotent
from mcphost.stores._sql import upsert
from mcphost.stores.engine import Database
from mcphost.stores.tables import StateRow

MAX_VALUE_BYTES = 256 * 1024
SNAPSHOT_MAX_BYTES = 64 * 1024
_SNAPSHOT_BATCH = 256


class StateEntry(BaseModel):
    """One stored state value."""

    model_config = ConfigDict(frozen=True)

    key: str
    value: JSONValue
    size: int
    """Bytes of the value's compact JSON."""
    updated_at: float


def _entry(row: StateRow) -> StateEntry:
    return StateEntry(key=row.key, value=row.value, size=row.size, updated_at=row.updated_at)


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


def _entry_cost(key: str, size: int) -> int:
    return len(json.dumps(key)) + 1 + size  # "key":value


class StateStore:
    """Get, set, delete, list and snapshot state values."""

    def __init__(self, db: Database, cursors: CursorCodec) -> None:
        self._db = db
        self._cursors = cursors

    def _where(self, scope: str, owner: Sequence[str]) -> tuple[ColumnElement[bool], ColumnElement[bool]]:
        return (StateRow.scope == _check_scope(scope), StateRow.owner == encode_owner(owner))

    @idempotent
    async def get(self, scope: str, owner: Sequence[str], key: str) -> StateEntry | None:
        """The value at `key`, or None."""
        query = select(StateRow).where(*self._where(scope, owner), StateRow.key == check_key(key))
        async with self._db.read() as session:
            row = (await session.execute(query)).scalar_one_or_none()
        return None if row is None else _entry(row)

    @idempotent
    async def set(self, scope: str, owner: Sequence[str], key: str, value: JSONValue) -> StateEntry:
        """Store `value` at `key`, replacing what was there.

        Raises:
            InvalidArgumentError: bad scope or key, or a value that is not JSON.
            PayloadTooLargeError: the value is over `MAX_VALUE_BYTES` serialized.
        """
        entry = StateEntry(
            key=check_key(key), value=value, size=serialized_size(value), updated_at=time.time()
        )
        if entry.size > MAX_VALUE_BYTES:
            raise PayloadTooLargeError(
                f"State value for {key!r} is {entry.size} bytes as JSON; the limit is {MAX_VALUE_BYTES}. "
                "Keep state small and put larger data in storage or an artifact.",
                details={"field": "value", "max_bytes": MAX_VALUE_BYTES},
            )
        values = {"scope": _check_scope(scope), "owner": encode_owner(owner), **entry.model_dump()}
        stmt = upsert(
            self._db.dialect, StateRow, values, ["scope", "owner", "key"], ["value", "size", "updated_at"]
        )
        async with self._db.write() as session:
            await session.execute(stmt)
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
    ) -> dict[str, JSONValue]:
        """The owner's values in key order, stopping before the first that would push the compact
        JSON of the result past `max_bytes`."""
        where = self._where(scope, owner)
        chosen: set[str] = set()
        total = 2  # {}
        after: str | None = None
        async with self._db.read() as session:
            full = False
            while not full:
                query = select(StateRow.key, StateRow.size).where(*where)
                if after is not None:
                    query = query.where(StateRow.key > after)
                rows = (await session.execute(query.order_by(StateRow.key).limit(_SNAPSHOT_BATCH))).all()
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
                return {}
            last = max(chosen)
            rows = (
                await session.execute(
                    select(StateRow.key, StateRow.value, StateRow.size)
                    .where(*where, StateRow.key <= last)
                    .order_by(StateRow.key)
                )
            ).all()
        # PostgreSQL reads each statement afresh: count again, skipping keys written in between.
        snapshot: dict[str, JSONValue] = {}
        total = 2
        for key, value, size in rows:
            if key not in chosen:
                continue
            cost = _entry_cost(key, size) + (1 if snapshot else 0)
            if total + cost > max_bytes:
                break
            snapshot[key] = value
            total += cost
        return snapshot

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
