"""Runner storage: byte values by (area, owner, key), larger than state and never in run contexts.

Owns the `storage` table and its size limit. Does not decide which areas or owners a run may use (the
grant does).

Invariants:
- `area` is one of `STORAGE_AREAS`; `owner` is a tuple of ids stored as one deterministic string
  (`_keys.encode_owner`); keys match `[A-Za-z0-9._:-]{1,200}`.
- A value is at most `MAX_VALUE_BYTES`; every check happens before anything is written.
- `set` is an upsert on the primary key (area, owner, key): race-safe, last writer wins.
- `list` returns sizes and times, never values (a page of 100 values could be a gigabyte).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict
from sqlalchemy import ColumnElement, delete, select

from mcphost.errors import InvalidArgumentError, PayloadTooLargeError
from mcphost.stores._cursor import CursorCodec, Page
from mcphost.stores._keys import check_key, encode_owner, key_page, key_page_query
from mcphost.stores._sql import upsert
from mcphost.stores.engine import Database
from mcphost.stores.tables import StorageRow

MAX_VALUE_BYTES = 10 * 1024 * 1024
STORAGE_AREAS: tuple[str, ...] = ("plugin", "workspace", "binding")


class StorageItem(BaseModel):
    """A stored value's key, size and time (what `list` returns)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    key: str
    size: int
    updated_at: float


class StorageValue(StorageItem):
    """A stored value with its bytes."""

    value: bytes


def _check_area(area: str) -> str:
    if area not in STORAGE_AREAS:
        raise InvalidArgumentError(
            f"Unknown storage area {area!r}; known: {', '.join(STORAGE_AREAS)}.", details={"field": "area"}
        )
    return area


class StorageStore:
    """Get, set, delete and list storage values."""

    def __init__(self, db: Database, cursors: CursorCodec) -> None:
        self._db = db
        self._cursors = cursors

    def _where(self, area: str, owner: Sequence[str]) -> tuple[ColumnElement[bool], ColumnElement[bool]]:
        return (StorageRow.area == _check_area(area), StorageRow.owner == encode_owner(owner))

    async def get(self, area: str, owner: Sequence[str], key: str) -> StorageValue | None:
        """The value at `key`, or None."""
        query = select(StorageRow).where(*self._where(area, owner), StorageRow.key == check_key(key))
        async with self._db.read() as session:
            row = (await session.execute(query)).scalar_one_or_none()
        if row is None:
            return None
        return StorageValue(key=row.key, size=row.size, updated_at=row.updated_at, value=row.value)

    async def set(self, area: str, owner: Sequence[str], key: str, value: bytes) -> StorageItem:
        """Store `value` at `key`, replacing what was there.

        Raises:
            InvalidArgumentError: bad area or key.
            PayloadTooLargeError: the value is over `MAX_VALUE_BYTES`.
        """
        item = StorageItem(key=check_key(key), size=len(value), updated_at=time.time())
        if item.size > MAX_VALUE_BYTES:
            raise PayloadTooLargeError(
                f"Storage value for {key!r} is {item.size} bytes; the limit is {MAX_VALUE_BYTES}. "
                "Store larger data as an artifact.",
                details={"field": "value", "max_bytes": MAX_VALUE_BYTES},
            )
        values = {
            "area": _check_area(area),
            "owner": encode_owner(owner),
            "value": value,
            **item.model_dump(),
        }
        stmt = upsert(
            self._db.dialect, StorageRow, values, ["area", "owner", "key"], ["value", "size", "updated_at"]
        )
        async with self._db.write() as session:
            await session.execute(stmt)
        return item

    async def delete(self, area: str, owner: Sequence[str], key: str) -> bool:
        """Remove `key`; whether it existed."""
        stmt = (
            delete(StorageRow)
            .where(*self._where(area, owner), StorageRow.key == check_key(key))
            .returning(StorageRow.key)
        )
        async with self._db.write() as session:
            return (await session.execute(stmt)).first() is not None

    async def list(
        self,
        area: str,
        owner: Sequence[str],
        *,
        prefix: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[StorageItem]:
        """A page of the owner's keys in key order, optionally only keys starting with `prefix`."""
        query = key_page_query(
            select(StorageRow.key, StorageRow.size, StorageRow.updated_at).where(*self._where(area, owner)),
            StorageRow.key,
            codec=self._cursors,
            kind="storage",
            prefix=prefix,
            cursor=cursor,
            limit=limit,
        )
        async with self._db.read() as session:
            rows = (await session.execute(query)).all()
        return key_page(
            rows,
            codec=self._cursors,
            kind="storage",
            limit=limit,
            key_of=lambda r: r.key,
            item=lambda r: StorageItem(key=r.key, size=r.size, updated_at=r.updated_at),
        )
