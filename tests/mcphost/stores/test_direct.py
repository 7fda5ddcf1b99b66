"""The direct path (`_direct`): prebuilt Core statements through sqlite3 on the SQLite writer thread and
through asyncpg on PostgreSQL give what SQLAlchemy's `Connection.execute` gives, raise what it raises
(a dropped PostgreSQL connection included), and fall back to it when a plan could not reproduce it
exactly."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any, cast

import anyio
import greenlet
import pytest
from sqlalchemy import Row, bindparam, func, select
from sqlalchemy.exc import DBAPIError, IntegrityError, StatementError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.util import greenlet_spawn

from mcphost.errors import StorageUnavailableError
from mcphost.models import RunStatus
from mcphost.stores import Stores, _direct, runs
from mcphost.stores._direct import AsyncpgConnection
from mcphost.stores._sql import advisory_key, among, lock_in_transaction
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


_LOCKED = ("test-lock", "conv-locked")


async def _holder(stores: Stores, key: int) -> int | None:
    """The server process that holds the advisory lock `key` in this test's database (None: nobody), as
    another connection sees it. Advisory locks belong to a database: a test of another worker, on its own
    database, may hold the same key at the same time."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF  # a bigint key is shown as two oids: its high and low halves
    async with stores.db.engine.connect() as other:
        rows = await other.exec_driver_sql(
            "SELECT classid::bigint, objid::bigint, pid FROM pg_locks"
            " WHERE locktype = 'advisory' AND objsubid = 1 AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        for row in rows:
            high, low, pid = cast("tuple[int, int, int]", tuple(row))
            if (high << 32) | low == unsigned:
                return pid
    return None


async def _locked_write(
    stores: Stores,
    seen: list[tuple[str, Any]],
    name: str,
    hold_s: float = 0.0,
    began: anyio.Event | None = None,
) -> None:
    """A write with `lock=_LOCKED` whose body takes the lock as every locking body does, and notes: its
    server process, whether the `BEGIN` took the lock, the lock statements it sent, and when it ran."""
    key = advisory_key(*_LOCKED)
    sent: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    async def body(session: AsyncSession) -> None:
        conn: Any = await core(session)
        pid = (await conn.execute(select(func.pg_backend_pid()))).scalar()
        with stores.db.hooks.added("before_cursor_execute", count):
            await lock_in_transaction(session, "postgresql", *_LOCKED)
        seen.append((f"{name} locked", None))
        if began is not None:
            began.set()
        seen.append((f"{name} pid", pid))
        seen.append((f"{name} holder", await _holder(stores, key)))
        seen.append((f"{name} begin-locked", conn.holds_lock(key)))
        seen.append((f"{name} lock-statements", [s for s in sent if "pg_advisory_xact_lock" in s]))
        await anyio.sleep(hold_s)
        seen.append((f"{name} ends", None))

    await stores.db.run_write(body, lock=_LOCKED)


async def _warm_pool(stores: Stores, connections: int = 4) -> None:
    """`connections` in the pool that are no longer new to it: each checkout of them is pinged."""
    async with AsyncExitStack() as stack:
        for _ in range(connections):
            await (await stack.enter_async_context(stores.db.engine.connect())).execute(select(1))


def _noted(seen: list[tuple[str, Any]], name: str) -> dict[str, Any]:
    return {label.removeprefix(f"{name} "): value for label, value in seen if label.startswith(f"{name} ")}


@pytest.mark.postgres
async def test_a_locked_write_takes_its_lock_in_its_begin_and_not_again(stores: Stores) -> None:
    """`run_write(..., lock=)` on a pooled connection: the ping's `BEGIN` takes the advisory lock in the
    same query (`_checkout.locked_transaction`), the body's `lock_in_transaction` sends nothing, and the
    lock is held by the writing connection while its body runs, and released with its transaction."""
    if stores.db.dialect != "postgresql":
        pytest.skip("advisory locks are PostgreSQL's")
    await admitted(stores)  # the pool's connection is no longer new: its next checkout is pinged
    seen: list[tuple[str, Any]] = []
    await _locked_write(stores, seen, "w")
    noted = _noted(seen, "w")
    assert noted["begin-locked"] is True
    assert noted["holder"] == noted["pid"]
    assert noted["lock-statements"] == []
    assert await _holder(stores, advisory_key(*_LOCKED)) is None  # released at COMMIT


@pytest.mark.postgres
async def test_a_locked_write_on_a_new_connection_takes_the_lock_in_its_body(stores: Stores) -> None:
    """A connection new to the pool is not pinged, so its transaction begins without the lock: the
    body's `lock_in_transaction` takes it, as before."""
    if stores.db.dialect != "postgresql":
        pytest.skip("advisory locks are PostgreSQL's")
    await stores.db.engine.dispose()
    seen: list[tuple[str, Any]] = []
    await _locked_write(stores, seen, "w")
    noted = _noted(seen, "w")
    assert noted["begin-locked"] is False
    assert noted["holder"] == noted["pid"]
    assert len(noted["lock-statements"]) == 1


@pytest.mark.postgres
async def test_locked_writes_on_one_key_take_turns(stores: Stores) -> None:
    """Two writes locking one key, each on a pooled connection: the second's `BEGIN` waits for the
    first's `COMMIT`, so its body runs only after the first's ended."""
    if stores.db.dialect != "postgresql":
        pytest.skip("advisory locks are PostgreSQL's")
    await _warm_pool(stores)
    seen: list[tuple[str, Any]] = []
    locked = anyio.Event()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_locked_write, stores, seen, "first", 0.3, locked)
            await locked.wait()
            tg.start_soon(_locked_write, stores, seen, "second")
    order = [label for label, _ in seen if label.rpartition(" ")[2] in ("locked", "ends")]
    assert order == ["first locked", "first ends", "second locked", "second ends"]
    second = _noted(seen, "second")
    assert second["begin-locked"] is True  # it waited in its `BEGIN`
    assert second["holder"] == second["pid"]


@pytest.mark.postgres
async def test_a_locked_write_whose_pooled_connection_was_dropped_runs_on_a_new_one(stores: Stores) -> None:
    """The locked `BEGIN` is the checkout's ping: a pooled connection the server dropped fails it, and
    the pool replaces the connection before the body runs (no error reaches the caller)."""
    if stores.db.dialect != "postgresql":
        pytest.skip("a dropped connection is PostgreSQL's")
    await admitted(stores)
    async with stores.db.engine.connect() as other:
        await other.exec_driver_sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    seen: list[tuple[str, Any]] = []
    await _locked_write(stores, seen, "w")
    noted = _noted(seen, "w")
    assert noted["holder"] == noted["pid"]
    assert noted["lock-statements"] == [] or noted["begin-locked"] is False


@pytest.mark.postgres
async def test_a_locked_begin_that_times_out_is_storage_unavailable_and_the_pool_recovers(
    stores: Stores,
) -> None:
    """A server's `lock_timeout` cuts the locked `BEGIN` short while another connection holds the lock:
    the write fails as `StorageUnavailableError` (a 503, not a 500), nothing of its body ran, and the
    next write, once the lock is free, runs on a working connection."""
    if stores.db.dialect != "postgresql":
        pytest.skip("advisory locks are PostgreSQL's")
    async with stores.db.engine.connect() as admin:
        name = (await admin.execute(select(func.current_database()))).scalar_one()
        await admin.exec_driver_sql(f"ALTER DATABASE \"{name}\" SET lock_timeout = '200ms'")
        await admin.commit()
    await stores.db.engine.dispose()  # the pool's connections take the setting
    await _warm_pool(stores)
    key = advisory_key(*_LOCKED)
    ran: list[str] = []

    async def body(_session: AsyncSession) -> None:
        ran.append("body")

    async with stores.db.engine.connect() as holder:
        await holder.execute(select(func.pg_advisory_xact_lock(key)))
        with pytest.raises(StorageUnavailableError):
            await stores.db.run_write(body, lock=_LOCKED)
        assert ran == []
        await holder.rollback()
    seen: list[tuple[str, Any]] = []
    await _locked_write(stores, seen, "after")
    assert _noted(seen, "after")["holder"] == _noted(seen, "after")["pid"]


async def test_a_turn_check_searches_the_index_by_conversation_and_status(stores: Stores) -> None:
    """However many runs of a conversation have ended, whether one goes first is one search of the
    `(conversation_id, status, created_seq)` index by both: an `OR` of the two statuses alone made SQLite
    read every run of the conversation, and an `OR` of two equalities makes PostgreSQL 15 scan the index
    once per status and merge a bitmap. The checks are prebuilt plans (an `IN` of parameters, expanded by
    SQLAlchemy at each execution, had none) whose SQL lists the statuses, explained on SQLite with their
    parameters bound as they run (PostgreSQL's planner needs a big table to pick that index:
    test_query_plans.py)."""
    values = {"w_conversation": "conv-1", "w_created_seq": 7}
    async with stores.db.read() as session:
        conn = await session.connection()
        checks = (
            (runs._TURN_TAKEN, ("w_conversation", "w_created_seq")),  # pyright: ignore[reportPrivateUsage]
            (runs._CONVERSATION_ACTIVE, ("w_conversation",)),  # pyright: ignore[reportPrivateUsage]
        )
        for check, keys in checks:
            plan = _direct.plan(check, keys, conn.dialect, many=False)
            assert plan is not None, f"no prebuilt plan for {check}"
            assert "turn.status IN ('running', 'queued')" in plan.sql, plan.sql
            if stores.db.dialect != "sqlite":
                continue
            args = _direct._positional(plan, values)  # pyright: ignore[reportPrivateUsage]
            rows = (await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {plan.sql}", args)).all()
            assert [row[-1] for row in rows] == [
                "SEARCH turn USING INDEX ix_runs_conversation_id_status_created_seq (conversation_id=? AND status=?)"
            ], rows


@pytest.mark.parametrize("value", ["running'); DROP TABLE runs; --", "Queued", "", "a b", "run\x00ning"])
def test_among_takes_only_the_codes_own_constants(value: str) -> None:
    """`among` writes its values into the SQL, so it refuses anything but a lowercase word."""
    with pytest.raises(ValueError, match="constants of the code"):
        among(table_of(RunRow).c.status, ("running", value))


_TRICKY_TEXT = [
    "plain",
    "it's \\ a 'quote' and a backslash \\'",
    "$m$ the tag, $m0$ and $m1$ too; $$ and $ alone",
    "ends in the tag's start $m",
    "ends in $m0",
    "é 😀 \u2028 \t\n\r",
    "",
    "'); DROP TABLE runs; --",
]


@pytest.mark.postgres
async def test_a_held_statement_goes_with_the_commit_and_stores_its_values_exactly(stores: Stores) -> None:
    """`hold_for_commit`: the statement waits for the `COMMIT` and goes with it, its values written as
    literals that read back exactly, whatever quotes, tags or text they hold."""
    if stores.db.dialect != "postgresql":
        pytest.skip("holding a statement for the COMMIT is PostgreSQL's (one round trip)")
    run = await admitted(stores)
    context: dict[str, Any] = {
        "texts": _TRICKY_TEXT,
        "n": [1, -(2**63), 2.5, None, True],
        _TRICKY_TEXT[2]: "k",
    }

    async def body(session: AsyncSession) -> bool:
        conn: Any = await core(session)
        params = {"w_run_id": run.run_id, "v_context": context, "v_warm": _TRICKY_TEXT[1]}
        held = conn.hold_for_commit(runs._SET_CONTEXT, params)  # pyright: ignore[reportPrivateUsage]
        assert not conn.hold_for_commit(runs._SET_CONTEXT, params)  # pyright: ignore[reportPrivateUsage]  # one at a time
        stored = (await conn.execute(select(RunRow.context).where(RunRow.run_id == run.run_id))).scalar()
        assert stored is None  # not sent yet
        return held

    assert await stores.db.run_write(body)
    async with stores.db.read() as session:
        row = (
            await session.execute(
                select(RunRow.context, RunRow.warm_session_id).where(RunRow.run_id == run.run_id)
            )
        ).one()
    assert row.context == context
    assert row.warm_session_id == _TRICKY_TEXT[1]


@pytest.mark.parametrize("text", _TRICKY_TEXT)
def test_an_inlined_string_ends_only_at_its_closing_tag(text: str) -> None:
    literal = _direct.inline("$1", [text])
    assert literal is not None
    tag = literal[: literal.index("$", 1) + 1]
    assert literal == f"{tag}{text}{tag}"
    assert literal.find(tag, len(tag)) == len(tag) + len(text)  # where PostgreSQL ends it


def test_a_value_of_another_type_is_not_inlined() -> None:
    assert (
        _direct.inline("SELECT $1::VARCHAR, $2::INTEGER", ["a", 2]) == "SELECT $m$a$m$::VARCHAR, 2::INTEGER"
    )
    assert _direct.inline("SELECT $1::FLOAT", [2.5]) is None
    assert _direct.inline("SELECT $1::BOOLEAN", [True]) is None
    assert _direct.inline("SELECT $2", ["only one"]) is None


@pytest.mark.postgres
async def test_a_held_statement_that_fails_rolls_the_transaction_back_and_the_pool_stays_usable(
    stores: Stores,
) -> None:
    """The statement fails on the server (PostgreSQL text holds no NUL): the `COMMIT` in the same query
    never runs, the body's other writes are rolled back, the error is SQLAlchemy's without the values,
    and the connection goes back to the pool clean."""
    if stores.db.dialect != "postgresql":
        pytest.skip("holding a statement for the COMMIT is PostgreSQL's (one round trip)")
    run = await admitted(stores)
    table = table_of(RunRow)
    secret = "SECRET-USER-TEXT"

    async def body(session: AsyncSession) -> None:
        conn: Any = await core(session)
        await conn.execute(table.update().where(table.c.run_id == run.run_id).values(runner_id="changed"))
        params = {"w_run_id": run.run_id, "v_context": {"t": secret}, "v_warm": "nul\x00here"}
        assert conn.hold_for_commit(runs._SET_CONTEXT, params)  # pyright: ignore[reportPrivateUsage]

    with pytest.raises((StorageUnavailableError, DBAPIError)) as raised:
        await stores.db.run_write(body)
    assert secret not in str(raised.value)
    assert secret not in str(raised.value.__cause__)
    stored = await stores.runs.get(run.run_id)
    assert stored.runner_id == run.runner_id  # the update before it was rolled back
    for _ in range(3):  # every pooled connection is usable: none was left in an aborted transaction
        async with stores.db.write() as session:
            await session.execute(
                table.update().where(table.c.run_id == run.run_id).values(runner_id="again")
            )
    assert (await stores.runs.get(run.run_id)).runner_id == "again"


@pytest.mark.postgres
async def test_a_held_statement_on_a_dropped_connection_is_invalidated_and_nothing_is_stored(
    stores: Stores,
) -> None:
    if stores.db.dialect != "postgresql":
        pytest.skip("holding a statement for the COMMIT is PostgreSQL's (one round trip)")
    run = await admitted(stores)

    async def body(session: AsyncSession) -> None:
        conn: Any = await core(session)
        pid = (await conn.execute(select(func.pg_backend_pid()))).scalar()
        params = {"w_run_id": run.run_id, "v_context": {"k": 1}, "v_warm": None}
        assert conn.hold_for_commit(runs._SET_CONTEXT, params)  # pyright: ignore[reportPrivateUsage]
        async with stores.db.engine.connect() as other:
            await other.execute(select(func.pg_terminate_backend(pid)))

    with pytest.raises(StorageUnavailableError) as raised:
        await stores.db.run_write(body)
    cause = raised.value.__cause__
    assert isinstance(cause, DBAPIError)
    assert cause.connection_invalidated  # what `@idempotent` retries on
    async with stores.db.read() as session:
        context = (await session.execute(select(RunRow.context).where(RunRow.run_id == run.run_id))).scalar()
    assert context is None


async def test_a_statement_is_held_only_where_a_commit_sends_it(stores: Stores) -> None:
    """SQLite's writer and a PostgreSQL session outside `run_write` execute it at once."""
    run = await admitted(stores)

    async def body(session: AsyncSession) -> None:
        conn: Any = await core(session)
        params = {"w_run_id": run.run_id, "v_context": {"k": 2}, "v_warm": None}
        if isinstance(conn, AsyncpgConnection):
            assert conn.hold_for_commit(runs._SET_CONTEXT, params)  # pyright: ignore[reportPrivateUsage]
        else:
            await conn.execute(runs._SET_CONTEXT, params)  # pyright: ignore[reportPrivateUsage]

    await stores.db.run_write(body)
    async with stores.db.write() as session:
        conn: Any = await core(session)
        if isinstance(conn, AsyncpgConnection):
            params = {"w_run_id": run.run_id, "v_context": {"k": 3}, "v_warm": None}
            assert not conn.hold_for_commit(runs._SET_CONTEXT, params)  # pyright: ignore[reportPrivateUsage]
            await conn.execute(runs._SET_CONTEXT, params)  # pyright: ignore[reportPrivateUsage]
    async with stores.db.read() as session:
        context = (await session.execute(select(RunRow.context).where(RunRow.run_id == run.run_id))).scalar()
    assert context == ({"k": 3} if stores.db.dialect == "postgresql" else {"k": 2})


_PID = select(func.pg_backend_pid().label("pid"))


@pytest.mark.postgres
async def test_a_write_on_a_warm_pool_switches_no_greenlet(stores: Stores) -> None:
    """With an idle live connection in the pool, a write's checkout (its ping the `BEGIN`), its prebuilt
    statements, its `COMMIT` and its return to the pool all run on the event loop (`_checkout`), and so
    does a lone autocommit statement: no greenlet is switched to. SQLAlchemy's `begin` and `commit`
    listeners still see the transaction, the `commit` after the `COMMIT` went."""
    if stores.db.dialect != "postgresql":
        pytest.skip("greenlets carry SQLAlchemy's asyncpg I/O; SQLite's writer has none")
    await _warm_pool(stores)
    switches: list[str] = []
    events: list[str] = []

    async def body(session: AsyncSession) -> int:
        conn: Any = await core(session)
        return (await conn.execute(_PID, {})).scalar_one()

    def begin(_conn: object) -> None:
        events.append("begin")

    def commit(_conn: object) -> None:
        events.append("commit")

    previous = greenlet.settrace(lambda event, _args: switches.append(event))
    try:
        with stores.db.hooks.added("begin", begin), stores.db.hooks.added("commit", commit):
            pid = await stores.db.run_write(body)
            alone = (await stores.db.run_statement(_PID, {})).scalar_one()
    finally:
        greenlet.settrace(previous)
    assert switches == []
    assert events == ["begin", "commit"]
    assert isinstance(pid, int)
    assert isinstance(alone, int)
    pool: Any = stores.db.engine.sync_engine.pool
    assert pool.checkedout() == 0  # both went back


@pytest.mark.postgres
async def test_a_write_whose_connection_drops_before_its_commit_fails_and_the_pool_recovers(
    stores: Stores,
) -> None:
    """The `COMMIT` sent on the loop finds its connection gone (the server ended the backend after the
    body's statements): the write fails as `StorageUnavailableError`, nothing it wrote is kept, the
    connection is invalidated (not handed out again) and the next write runs."""
    if stores.db.dialect != "postgresql":
        pytest.skip("a dropped connection is PostgreSQL's")
    await _warm_pool(stores)
    run = await admitted(stores)
    before = await stores.runs.get(run.run_id)

    async def body(session: AsyncSession) -> None:
        conn: Any = await core(session)
        pid = (await conn.execute(_PID, {})).scalar_one()
        await conn.execute(
            runs._move_statement(True, (), stores.db.dialect),  # pyright: ignore[reportPrivateUsage]
            {
                "v_status": RunStatus.CANCELLED.value,
                "v_ended_at": 9.0,
                "w_run_id": run.run_id,
                "w_status": run.status.value,
                "n_channel": "test",
                "n_wake": "x",
            },
        )
        async with stores.db.engine.connect() as admin:
            await admin.execute(select(func.pg_terminate_backend(pid)))
            with anyio.fail_after(10):  # the server ends the backend after answering
                while (  # noqa: ASYNC110  (the server's backend, not a task of this loop)
                    await admin.exec_driver_sql(f"SELECT 1 FROM pg_stat_activity WHERE pid = {int(pid)}")
                ).first() is not None:
                    await anyio.sleep(0.01)

    with pytest.raises(StorageUnavailableError):
        await stores.db.run_write(body)
    assert await stores.runs.get(run.run_id) == before
    pool: Any = stores.db.engine.sync_engine.pool
    assert pool.checkedout() == 0
    assert await stores.db.run_write(_pid_of) > 0


async def _pid_of(session: AsyncSession) -> int:
    conn: Any = await core(session)
    return (await conn.execute(_PID, {})).scalar_one()
