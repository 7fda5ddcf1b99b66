"""Opaque cursors and keyset pages.

Owns the cursor format, `Page[T]`, limit validation, and the keyset window every paged read uses. Does
not own what is paged (the stores do).

A cursor is the URL-safe base64 (no padding) of a 6-byte BLAKE2b checksum followed by compact JSON
`{"k": kind, "v": value}`. The kind tag keeps a transcript cursor out of events paging; the checksum
makes an edited or truncated cursor fail loudly instead of silently paging from somewhere else. It is
not a security boundary (the key is not secret): every paged query is scoped by the caller's
conversation or owner anyway, so a forged cursor can only move within data the caller may read.

Paging (`Window`): `before=c` → newest-first, strictly older than c; `after=c` → oldest-first, strictly
newer than c; neither → newest-first from the end. A page fetches `limit + 1` rows to learn `has_more`.
`next_cursor` continues in the same direction and is set only when `has_more`; `prev_cursor` points the
other way (the first item's cursor) and is set only for a page anchored on a cursor that has items.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Select
from sqlalchemy.orm import QueryableAttribute

from mcphost.errors import InvalidArgumentError
from mcphost.protocol import INT64_MAX, text_problem

T = TypeVar("T")
RowT = TypeVar("RowT")
SelectT = TypeVar("SelectT", bound=Select[*tuple[Any, ...]])

CursorKind = Literal["events", "transcript", "runs", "state", "storage"]

_CHECK_KEY = b"mcphost.cursor.v1"
_CHECK_LEN = 6
MAX_PAGE_LIMIT = 100
MAX_RUN_SEQ = 2**31 - 1
"""The largest per-run sequence (results, audit): those columns are 32-bit integers on PostgreSQL."""


class Page(BaseModel, Generic[T]):
    """One page of a keyset-paged read."""

    model_config = ConfigDict(frozen=True)

    items: list[T]
    next_cursor: str | None
    """Continue in the same direction with this; None when there is nothing more."""
    prev_cursor: str | None
    """Go the other way with this (before ↔ after); None for pages not anchored on a cursor."""
    has_more: bool


def _checksum(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, key=_CHECK_KEY, digest_size=_CHECK_LEN).digest()


def encode_cursor(kind: CursorKind, value: int | str) -> str:
    """An opaque cursor for position `value` of `kind`."""
    raw = json.dumps({"k": kind, "v": value}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(_checksum(raw) + raw).decode().rstrip("=")


def _decode(cursor: str, kind: CursorKind) -> object:
    what = f"{kind} cursor"
    try:
        blob = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        blob = b""
    check, raw = blob[:_CHECK_LEN], blob[_CHECK_LEN:]
    if not raw or check != _checksum(raw):
        raise InvalidArgumentError(
            f"Malformed {what} {cursor[:80]!r}: pass a cursor exactly as a previous page returned it."
        )
    try:
        data: object = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict) or data.get("k") != kind:
        found = data.get("k") if isinstance(data, dict) else None
        raise InvalidArgumentError(
            f"Cursor {cursor[:80]!r} belongs to {found!r} paging, not {kind!r}; "
            "use a cursor returned by the same kind of page."
        )
    return data.get("v")


def decode_seq(cursor: str, kind: CursorKind) -> int:
    """The sequence number a cursor of `kind` points at."""
    value = _decode(cursor, kind)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= INT64_MAX:
        raise InvalidArgumentError(f"Malformed {kind} cursor {cursor[:80]!r}: it carries no position.")
    return value


def decode_key(cursor: str, kind: CursorKind) -> str:
    """The key a key-ordered cursor of `kind` points at."""
    value = _decode(cursor, kind)
    if not isinstance(value, str) or text_problem(value) is not None:
        raise InvalidArgumentError(f"Malformed {kind} cursor {cursor[:80]!r}: it carries no key.")
    return value


def check_after(after: int, maximum: int = INT64_MAX) -> int:
    """`after` when it is within 0..maximum (the range of the sequence column it is compared with)."""
    if isinstance(after, bool) or not 0 <= after <= maximum:
        raise InvalidArgumentError(f"after must be between 0 and {maximum}; got {after!r}.")
    return after


def check_limit(limit: int, maximum: int = MAX_PAGE_LIMIT) -> int:
    """`limit` when it is within 1..maximum."""
    if isinstance(limit, bool) or not 1 <= limit <= maximum:
        raise InvalidArgumentError(f"limit must be between 1 and {maximum}; got {limit!r}.")
    return limit


@dataclass(frozen=True)
class Window:
    """A decoded keyset window over an integer sequence column."""

    kind: CursorKind
    before: int | None
    after: int | None
    limit: int

    @classmethod
    def of(cls, kind: CursorKind, before: str | None, after: str | None, limit: int) -> Window:
        if before is not None and after is not None:
            raise InvalidArgumentError("Pass before or after, not both.")
        return cls(
            kind=kind,
            before=None if before is None else decode_seq(before, kind),
            after=None if after is None else decode_seq(after, kind),
            limit=check_limit(limit),
        )

    @property
    def newest_first(self) -> bool:
        return self.after is None

    def apply(self, stmt: SelectT, seq: QueryableAttribute[int]) -> SelectT:
        """`stmt` restricted to this window, ordered, fetching limit + 1 rows."""
        if self.before is not None:
            stmt = stmt.where(seq < self.before)
        if self.after is not None:
            stmt = stmt.where(seq > self.after)
        order = seq.desc() if self.newest_first else seq.asc()
        return stmt.order_by(order).limit(self.limit + 1)

    def page(self, rows: Sequence[RowT], seq_of: Callable[[RowT], int], item: Callable[[RowT], T]) -> Page[T]:
        """The page for rows fetched through `apply` (limit + 1 of them at most)."""
        has_more = len(rows) > self.limit
        kept = rows[: self.limit]
        anchored = self.before is not None or self.after is not None
        return Page[T](
            items=[item(row) for row in kept],
            next_cursor=encode_cursor(self.kind, seq_of(kept[-1])) if has_more else None,
            prev_cursor=encode_cursor(self.kind, seq_of(kept[0])) if anchored and kept else None,
            has_more=has_more,
        )
