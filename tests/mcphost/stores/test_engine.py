"""The database: URL normalization, SQLite settings, concurrent writers, and opening the stores."""

from __future__ import annotations

import contextlib
import itertools
import random
import sqlite3
import sys
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession

import mcphost.stores as stores_package
from mcphost.errors import StorageFullError, StorageUnavailableError
from mcphost.models import new_id
from mcphost.stores import AuditEntry, Database, Stores, _writer, engine, open_stores
from mcphost.stores.engine import normalize_url, sqlite_path
from mcphost.stores.events import event_values, insert_event
from mcphost.stores.tables import EventRow
from tests.mcphost.stores.factories import admitted
from tests.mcphost.test_storage_faults import tmpfs

WRITER = """
import sys, anyio
from pathlib import Path
from mcphost.stores import open_stores

async def main(url: str, data: str) -> None:
    async with open_stores(url, Path(data), migrate=False) as stores:
        async def one(i: int) -> None:
            await stores.events.append(
                event_id=f"child-{i}", event_type="a.b", kind="system", source="system", payload={"i": i}
            )
        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(one, i)

anyio.run(main, sys.argv[1], sys.argv[2])
"""


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///rel/x.db", "sqlite+aiosqlite:///rel/x.db"),
        ("sqlite:////abs/x.db", "sqlite+aiosqlite:////abs/x.db"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        ("postgresql://u:p%40ss@h:5432/db", "postgresql+asyncpg://u:p%40ss@h:5432/db"),
        ("postgres://u@h/db", "postgresql+asyncpg://u@h/db"),
        ("postgresql+psycopg2://u@h/db", "postgresql+asyncpg://u@h/db"),
        ("postgresql+asyncpg://u@h/db", "postgresql+asyncpg://u@h/db"),
    ],
)
def test_urls_are_normalized_to_the_async_drivers(url: str, expected: str) -> None:
    assert normalize_url(url) == expected


def test_other_databases_are_refused_with_the_supported_forms() -> None:
    with pytest.raises(ValueError, match=r"Unsupported database URL scheme 'mysql'.*sqlite:///"):
        normalize_url("mysql://u@h/db")


def test_sqlite_path_is_the_file_of_a_sqlite_url() -> None:
    assert sqlite_path("sqlite:////a/b/c.db") == Path("/a/b/c.db")
    assert sqlite_path("sqlite://") is None
    assert sqlite_path("postgresql://u@h/db") is None


async def test_the_dialect_is_known(stores: Stores, database_url: str) -> None:
    assert stores.db.dialect == ("sqlite" if database_url.startswith("sqlite") else "postgresql")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_sqlite_connections_use_wal_foreign_keys_and_a_busy_timeout(stores: Stores) -> None:
    async with stores.db.read() as session:
        pragmas = [
            (await session.execute(text(f"PRAGMA {name}"))).scalar_one()
            for name in ("journal_mode", "foreign_keys", "busy_timeout", "synchronous")
        ]
    assert pragmas == ["wal", 1, 30000, 1]  # synchronous=NORMAL is 1


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_postgres_connections_refuse_sequential_scans_and_start_outside_a_transaction(
    database_url: str,
) -> None:
    """Each new connection has `engine.POSTGRES_SESSION_SETTINGS` from its startup message and no open
    transaction: a `SET` sent through the adapter's cursor opened one, inside which the host's own `BEGIN`
    then ran (runs whose end was delivered stayed `running` in the database); sent on asyncpg's connection
    as a statement, a connection terminated between the connect and it raised asyncpg's own error, which
    no retry or storage error recognized."""
    db = Database(database_url)
    try:
        async with db.engine.connect() as connection:  # the pool's first: a new connection
            raw = await connection.get_raw_connection()
            driver: Any = raw.driver_connection
            assert not driver.is_in_transaction()
            assert await driver.fetchval("SHOW enable_seqscan") == "off"
        async with db.read() as session:
            assert (await session.execute(text("SHOW enable_seqscan"))).scalar_one() == "off"
    finally:
        await db.dispose()


async def _count_events(stores: Stores) -> int:
    async with stores.db.read() as session:
        return (await session.execute(select(func.count()).select_from(EventRow))).scalar_one()


async def _append_many(stores: Stores, prefix: str, n: int, run_id: str) -> None:
    async def one(i: int) -> None:
        await stores.events.append(
            event_id=f"{prefix}-{i}", event_type="a.b", kind="system", source="system", payload={}
        )
        await stores.state.set("runner", (prefix,), f"k{i}", i)
        # Reads, then writes: a deferred transaction here would hit SQLITE_BUSY with no retry.
        await stores.audit.append(
            AuditEntry(
                run_id=run_id,
                tool=f"{prefix}{i}",
                args_digest="",
                bytes_in=0,
                bytes_out=0,
                outcome="ok",
                duration_ms=0,
            )
        )

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)


async def test_fifty_concurrent_writers_all_succeed(stores: Stores) -> None:
    run = await admitted(stores)
    await _append_many(stores, "w", 50, run.run_id)
    assert await _count_events(stores) == 50
    assert [a.seq for a in await stores.audit.list(run.run_id)] == list(range(1, 51))


async def test_writers_in_two_engines_and_another_process_all_succeed(
    stores: Stores, database_url: str, tmp_path: Path
) -> None:
    # Separate engines do not share the in-process write lock: on SQLite only BEGIN IMMEDIATE and the
    # busy timeout keep them from failing with "database is locked".
    run = await admitted(stores)
    async with (
        open_stores(database_url, tmp_path / "other", migrate=False) as other,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(_append_many, stores, "a", 50, run.run_id)
        tg.start_soon(_append_many, other, "b", 50, run.run_id)
        tg.start_soon(
            anyio.run_process, [sys.executable, "-c", WRITER, database_url, str(tmp_path / "child")]
        )
    assert await _count_events(stores) == 150
    assert [a.seq for a in await stores.audit.list(run.run_id, limit=1000)] == list(range(1, 101))


async def test_writers_cancelled_mid_transaction_leave_no_lock_behind(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cancelling a task inside a statement used to leak its connection with the transaction open
    # (SQLite): the next writer then failed with "database is locked" after the busy timeout.
    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_S", 1.0)
    await stores.db.dispose()  # new connections pick up the short busy timeout
    delays = random.Random(7)

    async def write_forever(prefix: str) -> None:
        for i in itertools.count():
            await stores.events.append(
                event_id=f"{prefix}-{i}", event_type="a.b", kind="system", source="system", payload={}
            )

    for attempt in range(60):
        with anyio.move_on_after(delays.random() * 0.01):
            async with anyio.create_task_group() as tg:
                for k in range(4):
                    tg.start_soon(write_forever, f"c{attempt}-{k}")
        with anyio.fail_after(10):
            await stores.events.append(
                event_id=f"after-{attempt}", event_type="a.b", kind="system", source="system", payload={}
            )
    async with stores.db.read() as session:
        after = select(func.count()).select_from(EventRow).where(EventRow.event_id.like("after-%"))
        assert (await session.execute(after)).scalar_one() == 60


def _on_threads(stores: Stores) -> list[tuple[str, int]]:
    """(statement, thread id) of every statement on any of the database's engines, and ("begin",
    thread id) where a transaction begins (the writer's BEGIN IMMEDIATE goes straight to sqlite3)."""
    seen: list[tuple[str, int]] = []

    def record(_conn: object, _cursor: object, sql: str, *_: object) -> None:
        seen.append((sql.split()[0], threading.get_ident()))

    def begin(_conn: object) -> None:
        seen.append(("begin", threading.get_ident()))

    stores.db.hooks.add("begin", begin)
    stores.db.hooks.add("before_cursor_execute", record)
    return seen


def _audit(run_id: str) -> AuditEntry:
    return AuditEntry(
        run_id=run_id, tool="t", args_digest="", bytes_in=0, bytes_out=0, outcome="ok", duration_ms=0
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_a_hot_path_write_on_a_sqlite_file_runs_whole_on_the_loop_without_a_hop(stores: Stores) -> None:
    # With the write lock free, BEGIN IMMEDIATE, every statement and the commit run on the writer's
    # connection in the caller's thread: no hop to a thread (through aiosqlite each of them is a round
    # trip of its own, and a hand-off to the writer thread costs more than a short transaction).
    run = await admitted(stores)
    seen = _on_threads(stores)
    await stores.audit.append(_audit(run.run_id))
    assert [sql for sql, _ in seen] == ["begin", "SELECT", "INSERT"]
    assert {thread for _, thread in seen} == {threading.get_ident()}


def _hold_write_lock(path: Path, name: str, held: threading.Event, release: threading.Event) -> None:
    """Another connection (as another process would) holding SQLite's write lock until `release`, its
    write (a lease named `name`) committed then."""
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO leases (name, holder, expires_at) VALUES (?, 'test', 0)", (name,))
        held.set()
        release.wait(10)
        other.execute("COMMIT")
    finally:
        other.close()


def _set_after(event: threading.Event, delay: float) -> None:
    time.sleep(delay)
    event.set()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_a_write_that_finds_the_lock_taken_waits_on_the_thread_and_the_loop_runs_on(
    stores: Stores, database_url: str
) -> None:
    # The writer's connection never waits in SQLite's busy handler on the event loop: a transaction that
    # finds the write lock held elsewhere goes to the writer thread, which waits there (busy timeout) and
    # then runs it, while every other task goes on; twice, so the thread gave the connection back as it
    # found it (no busy timeout left on it for the loop).
    run = await admitted(stores)
    path = sqlite_path(database_url)
    assert path is not None
    for round_ in range(2):
        held, release = threading.Event(), threading.Event()
        holder = threading.Thread(target=_hold_write_lock, args=(path, f"held-{round_}", held, release))
        holder.start()
        try:
            await anyio.to_thread.run_sync(held.wait, 10)
            seen = _on_threads(stores)
            ticks = 0

            async def tick() -> None:
                nonlocal ticks
                while True:
                    await anyio.sleep(0.01)
                    ticks += 1

            async with anyio.create_task_group() as tg:
                tg.start_soon(tick)
                tg.start_soon(anyio.to_thread.run_sync, _set_after, release, 0.5)
                with anyio.fail_after(10):
                    await stores.audit.append(_audit(run.run_id))
                tg.cancel_scope.cancel()
        finally:
            release.set()
            holder.join()
        assert ticks >= 20, f"round {round_}: the event loop stalled while the write waited ({ticks} ticks)"
        began = [thread for sql, thread in seen if sql == "begin"]
        assert began
        assert threading.get_ident() not in began  # waited and ran on the writer thread
    assert len(await stores.audit.list(run.run_id)) == 2
    async with stores.db.read() as session:
        assert (
            await session.execute(text("SELECT count(*) FROM leases WHERE name LIKE 'held-%'"))
        ).scalar_one() == 2


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_the_wal_of_writes_on_the_loop_is_checkpointed_and_stays_small(
    stores: Stores, database_url: str
) -> None:
    # The writer's connection does not checkpoint in its commits (that would be on the event loop): the
    # writer thread does, every `CHECKPOINT_EVERY` transactions. Without it the WAL grows by every page
    # written: here ~640 transactions of 8 KiB each, 18 MiB when the checkpoint ran beside the writes.
    path = sqlite_path(database_url)
    assert path is not None
    payload = {"text": "x" * 8192}

    async def body(session: AsyncSession) -> None:
        values = event_values(
            event_id=new_id("wal"), event_type="a.b", kind="system", source="system", payload=payload
        )
        await insert_event(session, stores.db.dialect, values)

    for _ in range(20 * _writer.CHECKPOINT_EVERY):
        await stores.db.run_write(body)
    wal = path.with_name(path.name + "-wal")
    assert wal.stat().st_size < 2 * 1024 * 1024, wal.stat().st_size
    assert await _count_events(stores) == 20 * _writer.CHECKPOINT_EVERY


async def test_a_write_body_that_raises_rolls_back_everything(stores: Stores) -> None:
    async def body(session: AsyncSession) -> None:
        await insert_event(
            session,
            stores.db.dialect,
            event_values(
                event_id="rolled-back", event_type="a.b", kind="system", source="system", payload={}
            ),
        )
        raise ValueError("the body changed its mind")

    with pytest.raises(ValueError, match="changed its mind"):
        await stores.db.run_write(body)
    assert await _count_events(stores) == 0


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_a_write_body_that_awaits_something_else_fails_loudly_and_rolls_back(stores: Stores) -> None:
    # The writer thread has no event loop: a body that waits on anything but its session is a bug.
    class Suspends:
        def __await__(self) -> Generator[None, None, None]:
            yield  # what an await on a real event loop's future does

    async def body(session: AsyncSession) -> None:
        await insert_event(
            session,
            stores.db.dialect,
            event_values(event_id="half-done", event_type="a.b", kind="system", source="system", payload={}),
        )
        await Suspends()

    with pytest.raises(AssertionError, match="awaited something other than its session"):
        await stores.db.run_write(body)
    assert await _count_events(stores) == 0


async def test_a_cancelled_caller_of_run_write_commits_first_and_leaves_no_lock_behind(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_S", 1.0)
    await stores.db.dispose()  # new connections pick up the short busy timeout
    run = await admitted(stores)
    delays = random.Random(11)
    entry = AuditEntry(
        run_id=run.run_id, tool="t", args_digest="", bytes_in=0, bytes_out=0, outcome="ok", duration_ms=0
    )

    async def write_forever() -> None:
        while True:
            await stores.audit.append(entry)

    for _ in range(40):
        with anyio.move_on_after(delays.random() * 0.01):
            async with anyio.create_task_group() as tg:
                for _ in range(4):
                    tg.start_soon(write_forever)
        with anyio.fail_after(10):
            await stores.audit.append(entry)
    # Every row that committed took the next number: no transaction was cut in half.
    seqs = [a.seq for a in await stores.audit.list(run.run_id, limit=1000)]
    assert seqs == list(range(1, len(seqs) + 1))
    assert len(seqs) >= 40


async def test_open_stores_creates_the_data_dir_and_the_sqlite_folder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'deep' / 'er' / 'host.db'}"
    async with open_stores(url, tmp_path / "data" / "dir") as stores:
        assert stores.db.dialect == "sqlite"
        await stores.events.append(event_id="e", event_type="a.b", kind="system", source="system", payload={})
    assert (tmp_path / "deep" / "er" / "host.db").is_file()
    assert (tmp_path / "data" / "dir").is_dir()


async def test_a_database_can_be_disposed_and_reopened(database_url: str, tmp_path: Path) -> None:
    async with open_stores(database_url, tmp_path) as stores:
        await stores.events.append(event_id="e", event_type="a.b", kind="system", source="system", payload={})
    db = Database(database_url)
    try:
        async with db.read() as session:
            assert (await session.execute(select(EventRow.event_id))).scalars().all() == ["e"]
    finally:
        await db.dispose()


async def test_an_unexpected_start_up_error_keeps_its_own_cause(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not a storage fault (open_failure has no words for it): it propagates as raised, cause and all.
    root = ValueError("the real cause")

    async def broken_codec(db: Database, secret: str | None) -> object:
        raise RuntimeError("a bug while opening") from root

    monkeypatch.setattr(stores_package, "cursor_codec", broken_codec)
    with pytest.raises(RuntimeError, match="a bug while opening") as caught:
        async with open_stores(database_url, tmp_path / "data"):
            pass
    assert caught.value.__cause__ is root


async def test_a_hot_write_on_a_full_disk_fails_cleanly_and_the_writer_recovers(tmp_path: Path) -> None:
    # The writer's transactions run on the event loop: SQLite's "database or disk is full" must still
    # leave as `StorageFullError`, store nothing and leave the connection usable once there is room.
    with tmpfs(tmp_path / "small", "4m") as mount:
        url = f"sqlite+aiosqlite:///{mount / 'mcphost.db'}"
        async with open_stores(url, mount / "data") as stores:
            payload = {"text": "x" * 60_000}

            async def body(session: AsyncSession) -> None:
                values = event_values(
                    event_id=new_id("full"), event_type="a.b", kind="system", source="system", payload=payload
                )
                await insert_event(session, stores.db.dialect, values)

            await stores.db.run_write(body)  # the writer's connection is open
            before = await _count_events(stores)
            filler = mount / "filler"
            with filler.open("wb") as out, contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * 65536)
                    out.flush()

            async def until_full() -> None:
                for _ in range(200):  # until the WAL needs a page the disk does not have
                    await stores.db.run_write(body)

            with pytest.raises(StorageFullError):
                await until_full()
            stored = await _count_events(stores)
            assert stored >= before
            filler.unlink()
            await stores.db.run_write(body)
            assert await _count_events(stores) == stored + 1


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_a_write_that_waits_past_the_busy_timeout_is_storage_unavailable_not_a_crash(
    stores: Stores, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "database is locked" from the writer's own BEGIN IMMEDIATE (a listener, which SQLAlchemy does not
    # wrap) left raw and reached the API as a 500; it is the stores' `StorageUnavailableError` (503).
    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_S", 0.3)  # read when the thread's transaction runs
    run = await admitted(stores)
    path = sqlite_path(database_url)
    assert path is not None
    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(path, "held", held, release))
    holder.start()
    try:
        await anyio.to_thread.run_sync(held.wait, 10)
        with pytest.raises(StorageUnavailableError) as raised:
            await stores.audit.append(_audit(run.run_id))
        assert isinstance(raised.value.__cause__, OperationalError)
        assert "database is locked" in str(raised.value.__cause__)
    finally:
        release.set()
        holder.join()
    await stores.audit.append(_audit(run.run_id))  # the writer is fine once the lock is free
    assert len(await stores.audit.list(run.run_id)) == 1
