"""The direct path (`_direct`): prebuilt Core statements through sqlite3 on the SQLite writer thread and
through asyncpg on PostgreSQL give what SQLAlchemy's `Connection.execute` gives, raise what it raises
(a dropped PostgreSQL connection included), and fall back to it when a plan could not reproduce it
exactly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest
from sqlalchemy import Row, bindparam, func, select
from sqlalchemy.exc import DBAPIError, IntegrityError, StatementError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.util import greenlet_spawn

from mcphost.errors import StorageUnavailableError
from mcphost.models import RunStatus
from mcphost.stores import Stores, runs
from mcphost.stores._direct import AsyncpgConnection
from mcphost.stores.engine import core
from mcphost.stores.tables import RunRow, table_of
from tests.mcphost.stores.factories import admitted


async def _via_sqlalchemy(conn: Any, statement: Any, params: dict[str, Any]) -> Any:
    """`statement` run by SQLAlchemy itself on the connection under `conn` (either facade)."""
    if isinstance(conn, AsyncpgConnection):
        return await greenlet_spawn(conn.sync_connection.execute, statement, params)
    return conn.sync_connection.execute(statement, params)


async def _on_writer(stores: Stores, body: Any) -> Any:
    async def run(session: AsyncSession) -> Any:
        conn: Any = await core(session)
        return await body(conn)

    return await stores.db.run_write(run)


async def test_rows_are_what_sqlalchemy_reads_json_decoded_and_by_name(stores: Stores) -> None:
    run = await admitted(stores)
    error = {"code": "runner.error", "message": "boom", "retryable": False, "details": {"n": [1, 2.5, None]}}

    async def body(conn: Any) -> tuple[Any, Any, Any]:
        moved = await conn.execute(
            runs._move_statement(True, ("error",), stores.db.dialect),  # pyright: ignore[reportPrivateUsage]
            {
                "v_error": error,
                "v_status": RunStatus.FAILED.value,
                "v_ended_at": 123.5,
                "w_run_id": run.run_id,
                "w_status": run.status.value,
                "n_channel": "test",
                "n_wake": "x",
            },
        )
        direct = (await conn.execute(runs._BY_RUN, {"w_run_id": run.run_id})).one()  # pyright: ignore[reportPrivateUsage]
        via_sqlalchemy = (await _via_sqlalchemy(conn, runs._BY_RUN, {"w_run_id": run.run_id})).one()  # pyright: ignore[reportPrivateUsage]
        return moved.one(), direct, via_sqlalchemy

    moved, direct, via_sqlalchemy = await _on_writer(stores, body)
    assert not isinstance(direct, Row)  # the direct path served it
    assert isinstance(via_sqlalchemy, Row)
    expected = tuple(cast(Sequence[Any], via_sqlalchemy))
    assert tuple(direct) == expected
    assert tuple(moved)[: len(expected)] == expected  # on PostgreSQL it also returns its pg_notify
    assert direct.error == error
    assert direct.status == "failed"
    assert direct.ended_at == 123.5
    assert direct.revoked_at == 123.5  # the same bind twice in one statement


async def test_literal_values_of_a_statement_are_bound_and_scalars_read(stores: Stores) -> None:
    run = await admitted(stores)
    assert await stores.runs.try_start(run.run_id, host_id="h") is not None

    async def body(conn: Any) -> tuple[Any, Any]:
        turn = {"w_conversation": "conv-1", "w_created_seq": 0}
        running = await conn.execute(runs._TURN_TAKEN, turn)  # pyright: ignore[reportPrivateUsage]
        nothing = await conn.execute(runs._TURN_TAKEN, turn | {"w_conversation": "conv-other"})  # pyright: ignore[reportPrivateUsage]
        return running.scalars().all(), nothing.first()

    running, nothing = await _on_writer(stores, body)
    assert running == [run.run_id]  # status = 'running' and LIMIT 1 came from the statement itself
    assert nothing is None


async def test_a_constraint_violation_is_sqlalchemys_integrity_error_and_rolls_back(stores: Stores) -> None:
    run = await admitted(stores)
    values = {c: getattr(run, c, None) for c in ("run_id", "event_id", "event_type")}

    async def body(conn: Any) -> None:
        await conn.execute(runs._INSERT, values | {"status": "queued"})  # pyright: ignore[reportPrivateUsage]

    violation = "NOT NULL constraint failed" if stores.db.dialect == "sqlite" else "NotNullViolationError"
    with pytest.raises(IntegrityError, match=violation):
        await _on_writer(stores, body)
    assert (await stores.runs.get(run.run_id)).status == run.status

    async def after(conn: Any) -> Any:  # the writer's connection is still good for the next transaction
        return (await conn.execute(runs._BY_RUN, {"w_run_id": run.run_id})).one().run_id  # pyright: ignore[reportPrivateUsage]

    assert await _on_writer(stores, after) == run.run_id


async def test_a_missing_parameter_is_sqlalchemys_error(stores: Stores) -> None:
    async def body(conn: Any) -> None:
        await conn.execute(runs._BY_RUN, {})  # pyright: ignore[reportPrivateUsage]

    with pytest.raises(StorageUnavailableError) as raised:  # as any SQLAlchemy error of a store
        await _on_writer(stores, body)
    assert isinstance(raised.value.__cause__, StatementError)
    assert "A value is required for bind parameter 'w_run_id'" in str(raised.value.__cause__)


async def test_a_statement_with_expanding_parameters_runs_through_sqlalchemy(stores: Stores) -> None:
    first, second = await admitted(stores, "conv-a"), await admitted(stores, "conv-b")
    table = table_of(RunRow)
    statement = select(table.c.run_id).where(table.c.run_id.in_(bindparam("ids", expanding=True)))

    async def body(conn: Any) -> Any:
        return await conn.execute(statement, {"ids": [first.run_id, second.run_id, "nope"]})

    result = await _on_writer(stores, body)
    assert sorted(result.scalars().all()) == sorted([first.run_id, second.run_id])


@pytest.mark.postgres
async def test_a_dropped_postgres_connection_is_invalidated_as_sqlalchemy_does(stores: Stores) -> None:
    if stores.db.dialect != "postgresql":
        pytest.skip("a dropped connection is PostgreSQL's")
    run = await admitted(stores)

    async def body(conn: Any) -> None:
        pid = (await conn.execute(select(func.pg_backend_pid()))).scalar()
        async with stores.db.engine.connect() as other:
            await other.execute(select(func.pg_terminate_backend(pid)))
        await conn.execute(runs._BY_RUN, {"w_run_id": run.run_id})  # pyright: ignore[reportPrivateUsage]

    with pytest.raises(StorageUnavailableError) as raised:
        await _on_writer(stores, body)
    cause = raised.value.__cause__
    assert isinstance(cause, DBAPIError)
    assert cause.connection_invalidated  # what `@idempotent` retries on
    assert (await stores.runs.get(run.run_id)).run_id == run.run_id  # the pool replaced the connection


@pytest.mark.parametrize("expanding", [False, True], ids=["plan", "through-sqlalchemy"])
async def test_run_statement_commits_its_one_statement_and_returns_its_rows(
    stores: Stores, expanding: bool
) -> None:
    """`Database.run_statement`: a plan autocommits outside any transaction on PostgreSQL; a statement
    no plan reproduces (an expanding parameter) is run by SQLAlchemy and committed. Either way the rows
    come back fetched, the change is visible to every other connection, and the checkout goes back to
    the pool clean (the next statement on it runs and commits too)."""
    first, second = await admitted(stores, "conv-a"), await admitted(stores, "conv-b")
    table = table_of(RunRow)
    target = (
        table.c.run_id.in_(bindparam("ids", expanding=True))
        if expanding
        else table.c.run_id == bindparam("ids")
    )
    statement = table.update().where(target).values(runner_id=bindparam("runner")).returning(table.c.run_id)
    ids: Any = [first.run_id, "nope"] if expanding else first.run_id
    result = await stores.db.run_statement(statement, {"ids": ids, "runner": "moved"})
    assert result.scalars().all() == [first.run_id]
    assert (await stores.runs.get(first.run_id)).runner_id == "moved"
    assert (await stores.runs.get(second.run_id)).runner_id == second.runner_id

    ids = [second.run_id] if expanding else second.run_id
    result = await stores.db.run_statement(statement, {"ids": ids, "runner": "again"})
    assert result.scalars().all() == [second.run_id]
    assert (await stores.runs.get(second.run_id)).runner_id == "again"


async def test_a_failed_run_statement_stores_nothing_and_leaves_the_pool_usable(stores: Stores) -> None:
    run = await admitted(stores)
    table = table_of(RunRow)
    clash = (
        table.update()
        .where(table.c.run_id.in_(bindparam("ids", expanding=True)))
        .values(event_id=bindparam("event"), attempt=bindparam("attempt"), runner_id="changed")
    )
    other = await admitted(stores, "conv-b")
    with pytest.raises(IntegrityError):  # (event_id, attempt) is unique; the stores catch it as it is
        await stores.db.run_statement(
            clash, {"ids": [run.run_id], "event": other.event_id, "attempt": other.attempt}
        )
    assert (await stores.runs.get(run.run_id)).runner_id == run.runner_id
    result = await stores.db.run_statement(clash, {"ids": [run.run_id], "event": "fresh", "attempt": 1})
    assert result.rowcount == 1
    assert (await stores.runs.get(run.run_id)).runner_id == "changed"
