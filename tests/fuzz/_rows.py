"""A digest of every stored row, to prove that a refused request or call changed nothing.

One SHA-256 over every row of every table, in a stable order. Columns that move on their own are left out:
the host's heartbeat (`hosts.heartbeat_at`); `exclude` drops whole tables (the audit log, which records
refused tool calls by design).
"""

from __future__ import annotations

import hashlib

from sqlalchemy import select

from mcphost.stores import Stores
from mcphost.stores.tables import Base

_MOVING = {("hosts", "heartbeat_at")}


async def fingerprint(stores: Stores, *, exclude: frozenset[str] = frozenset()) -> dict[str, str]:
    """Per table, a digest of its rows (sorted by their text, so the read order does not matter)."""
    out: dict[str, str] = {}
    async with stores.db.read() as session:
        for table in Base.metadata.sorted_tables:
            if table.name in exclude:
                continue
            columns = [c for c in table.columns if (table.name, c.name) not in _MOVING]
            rows = (await session.execute(select(*columns))).all()
            digest = hashlib.sha256()
            for line in sorted(repr(tuple(row)) for row in rows):
                digest.update(line.encode("utf-8", "surrogatepass"))
            out[table.name] = f"{len(rows)}:{digest.hexdigest()[:16]}"
    return out


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The tables whose rows differ."""
    return sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
