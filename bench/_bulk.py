"""Fast bulk loading of benchmark data, straight through the database driver.

Owns filling a migrated database with many transcript, event and state rows in one conversation / one
state owner, far faster than the stores' one-row-per-transaction appends: SQLite through the standard
library's `executemany` in one transaction (in a worker thread), PostgreSQL through asyncpg's binary
`COPY`. Columns follow `mcphost.stores.tables`; a benchmark reads the rows back through the stores, so
a drift between the two shows up as a failed read, not as a wrong number.

Every `ANCHOR_EVERY`-th transcript and event row carries `run_id = ANCHOR_RUN`, so a benchmark can fetch
cursors spread across the whole conversation through the public `for_run` reads.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
import anyio.to_thread
from sqlalchemy.engine import make_url

from bench._pgconn import connect_pg
from mcphost.stores.engine import sqlite_path

ANCHOR_RUN = "run_bench_anchor"
BATCH = 50_000
EVENT_TYPES = ("message.received", "tool.call.started", "tool.call.completed", "message.completed")

TRANSCRIPT_COLUMNS = (
    "item_id",
    "conversation_id",
    "thread_id",
    "role",
    "content",
    "contents",
    "artifacts",
    "event_id",
    "run_id",
    "actor_id",
    "created_at",
)
EVENT_COLUMNS = (
    "event_id",
    "event_type",
    "kind",
    "conversation_id",
    "thread_id",
    "run_id",
    "actor_id",
    "source",
    "payload",
    "created_at",
)
STATE_COLUMNS = ("scope", "owner", "key", "value", "size", "updated_at")


def anchor_every(rows: int) -> int:
    """Anchor spacing: about 200 anchors whatever the size."""
    return max(1, rows // 200)


def transcript_rows(conversation: str, n: int, *, prefix: str) -> Iterator[tuple[Any, ...]]:
    every = anchor_every(n)
    now = time.time()
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"message {i} in {conversation}: the quick brown fox jumps over the lazy dog, turn {i // 2}"
        yield (
            f"itm_{prefix}_{i:08d}",
            conversation,
            "",
            role,
            text,
            json.dumps([{"type": "text", "text": text}]),
            "[]",
            None,
            ANCHOR_RUN if i % every == 0 else None,
            "bench-user" if role == "user" else None,
            now - (n - i),
        )


def event_rows(conversation: str, n: int, *, prefix: str) -> Iterator[tuple[Any, ...]]:
    every = anchor_every(n)
    now = time.time()
    for i in range(n):
        event_type = EVENT_TYPES[i % len(EVENT_TYPES)]
        payload = {"i": i, "tool_name": "search", "parameters": {"q": f"query {i}"}}
        yield (
            f"evt_{prefix}_{i:08d}",
            event_type,
            "inbound" if event_type == "message.received" else "telemetry",
            conversation,
            "",
            ANCHOR_RUN if i % every == 0 else None,
            "bench-user",
            "api",
            json.dumps(payload),
            now - (n - i),
        )


def state_key(i: int) -> str:
    return f"k{i:08d}"


def state_owner(owner: Sequence[str]) -> str:
    """The stored form of an owner tuple (as `stores/_keys.py` encodes it; a wrong guess reads as None)."""
    return json.dumps(list(owner), separators=(",", ":"), ensure_ascii=False)


def state_rows(scope: str, owner: Sequence[str], n: int) -> Iterator[tuple[Any, ...]]:
    encoded = state_owner(owner)
    now = time.time()
    for i in range(n):
        value = json.dumps({"n": i, "note": "bench"})
        yield (scope, encoded, state_key(i), value, len(value), now)


def batches(rows: Iterator[tuple[Any, ...]]) -> Iterator[list[tuple[Any, ...]]]:
    batch: list[tuple[Any, ...]] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _sqlite_load(path: str, table: str, columns: Sequence[str], rows: Iterator[tuple[Any, ...]]) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=OFF")
        con.execute("BEGIN IMMEDIATE")
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        for batch in batches(rows):
            con.executemany(sql, batch)
        con.execute("COMMIT")
        con.execute("ANALYZE")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()


async def _postgres_load(
    url: str, table: str, columns: Sequence[str], rows: Iterator[tuple[Any, ...]]
) -> None:
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await connect_pg(dsn)
    try:
        async with conn.transaction():
            for batch in batches(rows):
                await conn.copy_records_to_table(table, records=batch, columns=list(columns))
        await conn.execute(f"ANALYZE {table}")
    finally:
        await conn.close()


async def load(
    database_url: str, table: str, columns: Sequence[str], rows: Iterator[tuple[Any, ...]]
) -> None:
    """Insert `rows` (tuples in `columns` order) into `table` of a migrated database."""
    path = sqlite_path(database_url)
    if path is not None:
        await anyio.to_thread.run_sync(_sqlite_load, str(path), table, columns, rows)
    else:
        await _postgres_load(database_url, table, columns, rows)
