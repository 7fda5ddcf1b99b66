"""Opaque cursors and keyset pages.

Owns the cursor format and its key (`CursorCodec`), `Page[T]`, limit and `after` validation, and the
keyset window every paged read uses. Does not own what is paged (the stores do) or where the secret comes
from (`open_stores`: `[host] cursor_secret`, else one generated into the database on first start).

A cursor is the URL-safe base64 (no padding) of an 8-byte keyed BLAKE2b MAC of the compact JSON
`{"k": kind, "v": value}` followed by that JSON enciphered (XOR with a keyed BLAKE2b stream seeded by the
MAC, so equal positions give equal cursors). Both keys derive from a per-installation secret, so a cursor
cannot be forged or edited (anything but a cursor this installation issued is a 400), and it cannot be
read: positions are installation-wide sequences, and their gaps would tell a run how much was written
in other conversations between two of its own items. The kind tag keeps a
transcript cursor out of events paging. A verified cursor is still only a position: every paged query
is scoped by the caller's conversation or owner after the MAC check, and the facts tools check that a
cursor points into the run's own thread, so even a leaked cursor moves only within data the caller may
read. Positions past the 64-bit range and keys with NUL or lone surrogates are malformed.

One whose encoding would begin with `-` begins with `.` before it (`_NOT_AN_OPTION`, outside the
base64 alphabet): a command line takes an argument that begins with `-` for an option, so
`mcphost runs --cursor -Bm2…` failed one page in 64.

Paging (`Window`): `before=c` → newest-first, strictly older than c; `after=c` → oldest-first, strictly
newer than c; neither → newest-first from the end. A page fetches `limit + 1` rows to learn `has_more`.
`next_cursor` continues in the same direction and is set only when `has_more`; `prev_cursor` points the
other way (the first item's cursor) and is set only for a page anchored on a cursor that has items.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Select
from sqlalchemy.orm import QueryableAttribute

from mcphost.errors import InvalidArgumentError
from mcphost.protocol import INT64_MAX, is_json_object, text_problem

_NOT_AN_OPTION = "."
"""Put before a cursor whose encoding begins with `-` (see the module docstring)."""

T = TypeVar("T")
RowT = TypeVar("RowT")
SelectT = TypeVar("SelectT", bound=Select[*tuple[Any, ...]])

CursorKind = Literal[
    "events",
    "transcript",
    "runs",
    "state",
    "storage",
    "deliveries",
    "approvals",
    "schedules",
    "conversations",
]

_MAC_LEN = 8
_KEY_CONTEXT = b"mcphost.cursor.v3\x00"
_STREAM_CONTEXT = b"mcphost.cursor.stream\x00"
_BLOCK = 64
MIN_SECRET_LENGTH = 16
MAX_PAGE_LIMIT = 100
MAX_RUN_SEQ = 2**31 - 1
"""The largest per-run sequence (results, audit): those columns are 32-bit integers on PostgreSQL."""


class Page(BaseModel, Generic[T]):
    """One page of a keyset-paged read."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    items: list[T]
    next_cursor: str | None
    """Continue in the same direction with this; None when there is nothing more."""
    prev_cursor: str | None
    """Go the other way with this (before ↔ after); None for pages not anchored on a cursor."""
    has_more: bool


@dataclass(frozen=True)
class CursorCodec:
    """Issues and verifies this installation's cursors with a key derived from its secret."""

    key: bytes
    stream_key: bytes

    @classmethod
    def of(cls, secret: str) -> CursorCodec:
        """The codec for `secret` (at least MIN_SECRET_LENGTH characters)."""
        if len(secret) < MIN_SECRET_LENGTH:
            raise ValueError(f"a cursor secret needs at least {MIN_SECRET_LENGTH} characters")
        encoded = secret.encode("utf-8", "surrogatepass")
        return cls(
            key=hashlib.sha256(_KEY_CONTEXT + encoded).digest(),
            stream_key=hashlib.sha256(_STREAM_CONTEXT + encoded).digest(),
        )

    def _mac(self, raw: bytes) -> bytes:
        return hashlib.blake2b(raw, key=self.key, digest_size=_MAC_LEN).digest()

    def _cipher(self, mac: bytes, data: bytes) -> bytes:
        """`data` XOR the keystream seeded by `mac` (its own inverse)."""
        blocks = (len(data) + _BLOCK - 1) // _BLOCK
        stream = b"".join(
            hashlib.blake2b(mac + i.to_bytes(4, "big"), key=self.stream_key, digest_size=_BLOCK).digest()
            for i in range(blocks)
        )
        return bytes(a ^ b for a, b in zip(data, stream, strict=False))

    def encode(self, kind: CursorKind, value: int | str) -> str:
        """An opaque cursor for position `value` of `kind`."""
        raw = json.dumps({"k": kind, "v": value}, separators=(",", ":")).encode()
        mac = self._mac(raw)
        encoded = base64.urlsafe_b64encode(mac + self._cipher(mac, raw)).decode().rstrip("=")
        return _NOT_AN_OPTION + encoded if encoded.startswith("-") else encoded

    def _decode(self, cursor: str, kind: CursorKind) -> object:
        what = f"{kind} cursor"
        body = cursor.removeprefix(_NOT_AN_OPTION)
        try:
            blob = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except (binascii.Error, ValueError):
            blob = b""
        mac = blob[:_MAC_LEN]
        raw = self._cipher(mac, blob[_MAC_LEN:])
        if not raw or not hmac.compare_digest(mac, self._mac(raw)):
            raise InvalidArgumentError(
                f"Malformed {what} {_shown(cursor)}: pass a cursor exactly as a previous page of this host "
                "returned it."
            )
        try:
            data: object = json.loads(raw)
        except ValueError:
            data = None
        if not is_json_object(data) or data.get("k") != kind:
            found = data.get("k") if is_json_object(data) else None
            raise InvalidArgumentError(
                f"Cursor {_shown(cursor)} belongs to {found!r} paging, not {kind!r}; "
                "use a cursor returned by the same kind of page."
            )
        return data.get("v")

    def decode_seq(self, cursor: str, kind: CursorKind) -> int:
        """The sequence number a cursor of `kind` points at."""
        value = self._decode(cursor, kind)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= INT64_MAX:
            raise InvalidArgumentError(f"Malformed {kind} cursor {_shown(cursor)}: it carries no position.")
        return value

    def decode_key(self, cursor: str, kind: CursorKind) -> str:
        """The key a key-ordered cursor of `kind` points at."""
        value = self._decode(cursor, kind)
        if not isinstance(value, str) or text_problem(value) is not None:
            raise InvalidArgumentError(f"Malformed {kind} cursor {_shown(cursor)}: it carries no key.")
        return value

    def window(self, kind: CursorKind, before: str | None, after: str | None, limit: int) -> Window:
        """The keyset window of a page read (`before` and `after` are cursors; at most one of them)."""
        if before is not None and after is not None:
            raise InvalidArgumentError("Pass before or after, not both.")
        return Window(
            codec=self,
            kind=kind,
            before=None if before is None else self.decode_seq(before, kind),
            after=None if after is None else self.decode_seq(after, kind),
            limit=check_limit(limit),
        )


def _shown(cursor: str) -> str:
    return repr(cursor[:80]).encode("ascii", "backslashreplace").decode()


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
    """A decoded keyset window over an integer sequence column (`CursorCodec.window` makes one)."""

    codec: CursorCodec
    kind: CursorKind
    before: int | None
    after: int | None
    limit: int

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
            next_cursor=self.codec.encode(self.kind, seq_of(kept[-1])) if has_more else None,
            prev_cursor=self.codec.encode(self.kind, seq_of(kept[0])) if anchored and kept else None,
            has_more=has_more,
        )
