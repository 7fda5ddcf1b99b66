"""Grouped hot writes on a SQLite file: the transactions a loop turn starts commit together, each body in a
savepoint of its own (`_writer.SqliteWriter.run_grouped`)."""

from __future__ import annotations

import contextlib
import contextvars
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession

from mcphost.errors import StorageFullError, StorageUnavailableError
from mcphost.stores import Stores, _writer, open_stores
from mcphost.stores.engine import core
from mcphost.stores.events import event_values, insert_event
from mcphost.stores.tables import EventRow
from tests.mcphost.test_storage_faults import tmpfs

on_a_sqlite_file = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="none")


def _inserting(stores: Stores, event_id: str, *, then: Exception | None = None) -> Any:
    """A write body that stores event `event_id`, then raises `then` (if given), else returns the id."""

    async def body(session: AsyncSession) -> str:
        values = event_values(event_id=event_id, event_type="a.b", kind="system", source="system", payload={})
        await insert_event(session, stores.db.dialect, values)
        if then is not None:
            raise then
        return f"{event_id} as {CALLER.get()}"

    return body


async def _stored(stores: Stores) -> list[str]:
    async with stores.db.read() as session:
        return sorted((await session.execute(select(EventRow.event_id))).scalars().all())


async def _count(stores: Stores) -> int:
    async with stores.db.read() as session:
        return (await session.execute(select(func.count()).select_from(EventRow))).scalar_one()


def _transactions(stores: Stores) -> list[str]:
    """ "begin" and "commit" for every transaction the database's engines begin and commit from now on."""
    seen: list[str] = []

    def begin(_conn: object) -> None:
        seen.append("begin")

    def commit(_conn: object) -> None:
        seen.append("commit")

    stores.db.hooks.add("begin", begin)
    stores.db.hooks.add("commit", commit)
    return seen


async def _together(*calls: Any) -> list[Any]:
    """The outcome of each call (its value, or the exception it raised), all started in one loop turn."""
    outcomes: list[Any] = [None] * len(calls)

    async def one(i: int) -> None:
        try:
            outcomes[i] = await calls[i]()
        except Exception as exc:
            outcomes[i] = exc

    async with anyio.create_task_group() as tg:
        for i in range(len(calls)):
            tg.start_soon(one, i)
    return outcomes


@on_a_sqlite_file
async def test_the_writes_one_loop_turn_starts_commit_in_one_transaction_each_with_its_own_result(
    stores: Stores,
) -> None:
    await stores.db.run_write(_inserting(stores, "opens-the-connection"))
    seen = _transactions(stores)

    def call(i: int) -> Any:
        async def write() -> str:
            CALLER.set(f"caller-{i}")  # each body runs with its own caller's context variables
            return await stores.db.run_write(_inserting(stores, f"e{i}"))

        return write

    outcomes = await _together(*(call(i) for i in range(8)))
    assert outcomes == [f"e{i} as caller-{i}" for i in range(8)]
    assert seen == ["begin", "commit"]
    assert await _stored(stores) == sorted(["opens-the-connection", *(f"e{i}" for i in range(8))])


@on_a_sqlite_file
async def test_a_group_stays_open_while_each_loop_turn_brings_another_writer(stores: Stores) -> None:
    # Writers that start one loop turn after another (as the runs of a busy host do) join one group for
    # as long as each turn brings someone new, up to `GROUP_TURNS` turns.
    await stores.db.run_write(_inserting(stores, "opens-the-connection"))
    seen = _transactions(stores)

    def call(i: int) -> Any:
        async def write() -> str:
            for _ in range(i):  # writer i starts i loop turns after the first
                await anyio.lowlevel.checkpoint()
            return await stores.db.run_write(_inserting(stores, f"turn-{i}"))

        return write

    await _together(*(call(i) for i in range(_writer.GROUP_TURNS - 1)))
    assert seen == ["begin", "commit"]
    assert len(await _stored(stores)) == _writer.GROUP_TURNS


@on_a_sqlite_file
async def test_a_full_group_is_closed_and_the_next_writer_starts_another(stores: Stores) -> None:
    await stores.db.run_write(_inserting(stores, "opens-the-connection"))
    seen = _transactions(stores)
    many = _writer.GROUP_MEMBERS + 3
    outcomes = await _together(
        *(lambda i=i: stores.db.run_write(_inserting(stores, f"w{i:03}")) for i in range(many))
    )
    assert outcomes == [f"w{i:03} as none" for i in range(many)]
    assert seen == ["begin", "commit"] * 2
    assert len(await _stored(stores)) == many + 1


@on_a_sqlite_file
async def test_a_grouped_body_that_raises_loses_its_own_writes_and_no_one_elses(stores: Stores) -> None:
    await stores.db.run_write(_inserting(stores, "opens-the-connection"))
    seen = _transactions(stores)
    outcomes = await _together(
        lambda: stores.db.run_write(_inserting(stores, "first")),
        lambda: stores.db.run_write(_inserting(stores, "changed-its-mind", then=ValueError("no"))),
        lambda: stores.db.run_write(_inserting(stores, "last")),
    )
    assert outcomes[0] == "first as none"
    assert isinstance(outcomes[1], ValueError)
    assert outcomes[2] == "last as none"
    assert seen == ["begin", "commit"]
    assert await _stored(stores) == ["first", "last", "opens-the-connection"]


@on_a_sqlite_file
async def test_a_group_whose_commit_fails_fails_every_member_and_keeps_nothing(stores: Stores) -> None:
    await stores.db.run_write(_inserting(stores, "opens-the-connection"))

    def fail(_conn: object) -> None:  # as SQLAlchemy raises a COMMIT that sqlite3 refused
        raise OperationalError("COMMIT", None, sqlite3.OperationalError("disk I/O error"))

    with stores.db.hooks.added("commit", fail):
        outcomes = await _together(
            *(lambda i=i: stores.db.run_write(_inserting(stores, f"lost-{i}")) for i in range(4))
        )
    assert all(isinstance(o, StorageUnavailableError) for o in outcomes), outcomes
    assert len({id(o) for o in outcomes}) == 4  # each caller raises an error of its own
    assert await _stored(stores) == ["opens-the-connection"]
    assert await stores.db.run_write(_inserting(stores, "after")) == "after as none"  # the writer goes on
    assert await _count(stores) == 2


@on_a_sqlite_file
async def test_when_sqlite_rolls_the_whole_transaction_back_every_member_fails(stores: Stores) -> None:
    # After some errors (a full disk, an I/O error, no memory) SQLite rolls back the whole transaction,
    # not only the statement: members that ran before it lost their writes too, and must not be told
    # otherwise.
    await stores.db.run_write(_inserting(stores, "opens-the-connection"))

    async def rolled_back_by_sqlite(session: AsyncSession) -> None:
        connection: Any = await core(session)
        connection.sync_connection.connection.dbapi_connection.execute("ROLLBACK")
        raise sqlite3.OperationalError("database or disk is full")

    outcomes = await _together(
        lambda: stores.db.run_write(_inserting(stores, "ran-before")),
        lambda: stores.db.run_write(rolled_back_by_sqlite),
        lambda: stores.db.run_write(_inserting(stores, "after")),
    )
    assert all(isinstance(o, Exception) for o in outcomes), outcomes
    assert await _stored(stores) == ["opens-the-connection"]
    assert await stores.db.run_write(_inserting(stores, "later")) == "later as none"


@on_a_sqlite_file
async def test_a_body_that_ends_the_groups_transaction_itself_fails_the_whole_group(
    stores: Stores,
) -> None:
    # A write body never commits or rolls back: one that does (a bug) must not have the members after it
    # write outside any transaction. Its savepoint is gone with the transaction, so its release fails.
    await stores.db.run_write(_inserting(stores, "opens-the-connection"))

    async def commits_itself(session: AsyncSession) -> str:
        connection: Any = await core(session)
        connection.sync_connection.connection.dbapi_connection.execute("ROLLBACK")
        return "done"

    outcomes = await _together(
        lambda: stores.db.run_write(_inserting(stores, "ran-before")),
        lambda: stores.db.run_write(commits_itself),
        lambda: stores.db.run_write(_inserting(stores, "after")),
    )
    assert all(isinstance(o, StorageUnavailableError) for o in outcomes), outcomes
    assert all("no such savepoint" in str(o.__cause__) for o in outcomes)
    assert await _stored(stores) == ["opens-the-connection"]


@on_a_sqlite_file
async def test_a_member_cancelled_after_it_joined_is_written_and_stopped_after_the_commit(
    stores: Stores,
) -> None:
    await stores.db.run_write(_inserting(stores, "opens-the-connection"))
    finished: list[str] = []

    async def member(name: str) -> None:
        await stores.db.run_write(_inserting(stores, name))
        finished.append(name)
        await anyio.lowlevel.checkpoint()  # the cancellation lands here
        finished.append(f"{name} went on")

    async with anyio.create_task_group() as tg:
        tg.start_soon(member, "leader")
        tg.start_soon(member, "joined")
        await anyio.lowlevel.checkpoint()  # both have started their writes: one leads, one has joined
        tg.cancel_scope.cancel()
    assert sorted(finished) == ["joined", "leader"]
    assert await _stored(stores) == ["joined", "leader", "opens-the-connection"]


@on_a_sqlite_file
async def test_a_caller_cancelled_before_its_write_joins_no_group_and_writes_nothing(stores: Stores) -> None:
    await stores.db.run_write(_inserting(stores, "opens-the-connection"))
    with anyio.CancelScope() as scope:
        scope.cancel()
        await stores.db.run_write(_inserting(stores, "never"))
    assert scope.cancelled_caught
    assert await _stored(stores) == ["opens-the-connection"]


async def test_groups_on_a_full_disk_fail_whole_and_the_writer_recovers(tmp_path: Path) -> None:
    # Concurrent writes on a disk that fills up: a group either commits whole or every member gets
    # `StorageFullError` (whichever body found the disk full), nothing half-written is read back, and
    # once there is room the next groups commit.
    with tmpfs(tmp_path / "small", "4m") as mount:
        url = f"sqlite+aiosqlite:///{mount / 'mcphost.db'}"
        async with open_stores(url, mount / "data") as stores:
            payload = {"text": "x" * 30_000}

            def body_for(event_id: str) -> Any:
                async def body(session: AsyncSession) -> str:
                    values = event_values(
                        event_id=event_id, event_type="a.b", kind="system", source="system", payload=payload
                    )
                    await insert_event(session, stores.db.dialect, values)
                    return event_id

                return body

            await stores.db.run_write(body_for("opens-the-connection"))
            with (mount / "filler").open("wb") as out, contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * 65536)
                    out.flush()
            kept: list[str] = []
            failed = 0
            for round_ in range(20):
                outcomes = await _together(
                    *(lambda i=i, r=round_: stores.db.run_write(body_for(f"r{r}-{i}")) for i in range(8))
                )
                for outcome in outcomes:
                    if isinstance(outcome, str):
                        kept.append(outcome)
                    else:
                        assert isinstance(outcome, StorageFullError), outcome
                        failed += 1
            assert failed > 0  # the disk did fill up
            assert await _stored(stores) == sorted(["opens-the-connection", *kept])
            (mount / "filler").unlink()
            outcomes = await _together(
                *(lambda i=i: stores.db.run_write(body_for(f"after-{i}")) for i in range(8))
            )
            assert outcomes == [f"after-{i}" for i in range(8)]
