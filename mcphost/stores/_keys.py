"""Keys and owners of the keyed stores (`state`, `storage`).

Owns key validation, the one-string encoding of an owner tuple, and the key-ordered keyset window
(prefix + cursor) both stores page with.

Invariants:
- Keys match `[A-Za-z0-9._:-]{1,200}` (PROTOCOL §7); prefixes match the same alphabet, possibly empty.
- An owner tuple (e.g. `RunGrant.state_scope_id("conversation")`) is stored as its compact JSON array:
  deterministic, and unambiguous whatever characters the ids hold.
- Keys compare in byte order on both dialects (the column is "C"-collated on PostgreSQL), so a prefix
  is the half-open range [prefix, prefix with its last character incremented) and uses the index.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import TypeVar

from sqlalchemy.orm import QueryableAttribute

from mcphost.errors import InvalidArgumentError
from mcphost.protocol import STATE_KEY_PATTERN
from mcphost.stores._cursor import CursorCodec, CursorKind, Page, SelectT, check_limit

T = TypeVar("T")
RowT = TypeVar("RowT")

_KEY = re.compile(STATE_KEY_PATTERN)
_PREFIX = re.compile(r"^[A-Za-z0-9._:-]{0,200}$")


def check_key(key: str) -> str:
    """`key` when it matches the key pattern."""
    if not isinstance(key, str) or not _KEY.match(key):  # pyright: ignore[reportUnnecessaryIsInstance]  # may come from JSON
        raise InvalidArgumentError(
            f"Invalid key {key!r}: use 1-200 characters from A-Z a-z 0-9 . _ : -",
            details={"field": "key"},
        )
    return key


def encode_owner(owner: Sequence[str]) -> str:
    """The stored form of an owner tuple."""
    if not owner or not all(isinstance(part, str) for part in owner):  # pyright: ignore[reportUnnecessaryIsInstance]  # as check_key
        raise ValueError(f"an owner is a non-empty tuple of strings; got {owner!r}")
    return json.dumps(list(owner), separators=(",", ":"), ensure_ascii=False)


def key_page_query(
    stmt: SelectT,
    key_col: QueryableAttribute[str],
    *,
    codec: CursorCodec,
    kind: CursorKind,
    prefix: str | None,
    cursor: str | None,
    limit: int,
) -> SelectT:
    """`stmt` restricted to keys after `cursor` that start with `prefix`, in key order, limit + 1."""
    check_limit(limit)
    if prefix:
        if not _PREFIX.match(prefix):
            raise InvalidArgumentError(
                f"Invalid prefix {prefix!r}: use at most 200 characters from A-Z a-z 0-9 . _ : -",
                details={"field": "prefix"},
            )
        stmt = stmt.where(key_col >= prefix, key_col < prefix[:-1] + chr(ord(prefix[-1]) + 1))
    if cursor is not None:
        stmt = stmt.where(key_col > codec.decode_key(cursor, kind))
    return stmt.order_by(key_col.asc()).limit(limit + 1)


def key_page(
    rows: Sequence[RowT],
    *,
    codec: CursorCodec,
    kind: CursorKind,
    limit: int,
    key_of: Callable[[RowT], str],
    item: Callable[[RowT], T],
) -> Page[T]:
    """The page for rows fetched through `key_page_query`."""
    has_more = len(rows) > limit
    kept = rows[:limit]
    return Page[T](
        items=[item(row) for row in kept],
        next_cursor=codec.encode(kind, key_of(kept[-1])) if has_more else None,
        prev_cursor=None,
        has_more=has_more,
    )
