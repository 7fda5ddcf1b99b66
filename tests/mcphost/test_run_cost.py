"""What a run costs the database: the transactions of one echo run, on both stores.

A design invariant, counted, never timed (docs/architecture.md, "What a run costs the database"): an
echo run is `admit` (which also starts it) and one transaction per result batch (its results together
with the transcript, event-log and state rows they cause), the last of which also ends the run (the
runner's `run.completed` settles it: `closing.ending_gate`); a reader following the run on
the process that executes it reads nothing from the store. How the runner's results fall into batches
depends on when its lines arrive: the echo runner's, sent back to back, go out in one write and are
one batch (`mcphost_runners._plugin_server`), and everything else is exact. Transactions are attributed to the run by its ids in their statements' parameters, so
the host's background loops (sweepers, liveness) do not count. On a SQLite file each of them runs on
the writer's connection (`Database.run_write`), none through aiosqlite, whose every statement is a
round trip to its thread.
"""

from __future__ import annotations

import re
import threading
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import asyncpg  # pyright: ignore[reportMissingTypeStubs]
import asyncpg.connection  # pyright: ignore[reportMissingTypeStubs]
import greenlet
import pytest
from sqlalchemy import Connection, bindparam, make_url, select

from mcphost.app import Host, open_host
from mcphost.models import AgentEventEnvelope
from mcphost.orchestrator import _tuning as orchestrator_module
from mcphost.stores import engine, wakeups
from mcphost.stores.tables import RunRow
from tests.mcphost.hostkit import host_settings, message

RUN_BUDGET = 2
"""Transactions of a non-streamed echo run (three results): admit, and one batch that ends the run
(three before: its end was a transaction of its own). The plugin writes
results sent back to back in one write (`mcphost_runners._plugin_server`), which the host reads and
hands to the journal as one batch (five transactions before: a batch per line the host woke for)."""


@dataclass
class _Transaction:
    engine: object = None
    """The engine whose connection began it: on a SQLite file, the writer's (`Database.sync_engines`)."""
    thread: int = field(default_factory=threading.get_ident)
    """The thread that began it: on a SQLite file the event loop's, unless the writer thread took it."""
    statements: list[str] = field(default_factory=list[str])
    parameters: list[str] = field(default_factory=list[str])
    values: list[object] = field(default_factory=list[object])
    """Each statement's parameters as given to the driver."""
    autocommit: bool = False
    """One statement outside `BEGIN`/`COMMIT` (`Database.run_statement`), its own transaction."""

    def mentions(self, *ids: str) -> bool:
        return any(i in p for p in self.parameters for i in ids)

    def has(self, sql: str) -> bool:
        return any(sql in s for s in self.statements)

    def writes(self, table: str) -> bool:
        """Whether it inserts rows into `table`: in a statement of its own, or, in PostgreSQL's one
        statement of a batch (`results._APPEND_WITH_EFFECTS`), through a non-empty first array of the
        part that inserts into it."""
        for sql, values in zip(self.statements, self.values, strict=True):
            part = re.search(rf"INSERT INTO {table} \(.*?\) SELECT .*? FROM unnest\(CAST\(\$(\d+) AS", sql)
            if part is not None and isinstance(values, tuple):
                if cast("tuple[Any, ...]", values)[int(part.group(1)) - 1]:
                    return True
            elif f"INSERT INTO {table} " in sql:
                return True
        return False


@dataclass
class _Recorder:
    """Every transaction begun on the engine, with its statements, per connection."""

    transactions: list[_Transaction] = field(default_factory=list[_Transaction])
    _open: dict[int, _Transaction] = field(default_factory=dict[int, _Transaction])

    def begin(self, conn: Any) -> None:
        tx = _Transaction(engine=conn.engine)
        self.transactions.append(tx)
        self._open[id(conn)] = tx

    def end(self, conn: object) -> None:
        self._open.pop(id(conn), None)

    def statement(self, conn: object, _cursor: object, sql: str, parameters: object, *_: object) -> None:
        if sql.startswith(("BEGIN", "PRAGMA")):
            return
        tx = self._open.get(id(conn))
        if tx is None:  # outside a transaction: a statement that commits by itself (PostgreSQL)
            tx = _Transaction(autocommit=True)
            self.transactions.append(tx)
        tx.statements.append(" ".join(sql.split()))
        tx.parameters.append(repr(parameters))
        tx.values.append(parameters)


@pytest.fixture
async def host(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncGenerator[Host, None]:
    # The cancel poller asks once per interval for all of this process's runs: a cost of the process,
    # not of a run, so it is kept out of the count.
    monkeypatch.setattr(orchestrator_module, "CANCEL_POLL_S", 3600.0)
    async with open_host(host_settings(database_url, tmp_path / "data")) as opened:
        yield opened


async def _echo_run(host: Host, text: str, conversation: str) -> tuple[str, list[str]]:
    return await _echo_run_of(host, message(text, bot="echo", conversation=conversation))


async def _echo_run_of(host: Host, event_: AgentEventEnvelope) -> tuple[str, list[str]]:
    admission = await host.orchestrator.submit(event_)
    run_id = admission.run.run_id
    types = [item.type async for item in host.orchestrator.results(run_id)]
    run = await host.orchestrator.wait(run_id)
    assert run.status.value == "completed", run.error
    return run_id, types


async def _count(host: Host, event_: AgentEventEnvelope) -> tuple[list[_Transaction], list[str]]:
    """The transactions of one run of `event_` (submitted, followed to its end, waited for) and the
    types of its results."""
    recorder = _Recorder()
    hooks = host.stores.db.hooks  # the async engine's and, on a SQLite file, the writer thread's
    with (
        hooks.added("begin", recorder.begin),
        hooks.added("commit", recorder.end),
        hooks.added("rollback", recorder.end),
        hooks.added("before_cursor_execute", recorder.statement),
    ):
        admission = await host.orchestrator.submit(event_)
        run_id = admission.run.run_id
        types = [item.type async for item in host.orchestrator.results(run_id)]
        run = await host.orchestrator.wait(run_id)
    assert run.status.value == "completed", run.error
    return [tx for tx in recorder.transactions if tx.mentions(run_id, event_.event_id)], types


def _check_shape(mine: list[_Transaction], results: int) -> list[_Transaction]:
    """admit (which starts the run), one transaction per result batch, the last with the run's end; the
    batches."""
    admit, *batches = mine
    for sql in ("INSERT INTO runs", "INSERT INTO events", "INSERT INTO transcript", "FROM state"):
        assert admit.has(sql), sql
    postgres = getattr(admit.engine, "name", None) == "postgresql"
    # The run is inserted `running`, never moved there.
    assert not admit.has("UPDATE runs SET status")
    if postgres:
        # PostgreSQL: the conversation's lock (taken by the transaction's `BEGIN`, which is no statement
        # of its own, `_checkout.locked_transaction`; by a statement on a connection new to the pool),
        # then the run inserted `running` with its conversation, event-log and transcript rows and the
        # reads its context needs, then its context.
        assert len(admit.statements) == 2 + admit.has("pg_advisory_xact_lock"), admit.statements
        assert admit.has("UPDATE runs SET context")
    else:
        # SQLite: the reads the run's turn and context need come first, then the run is inserted
        # `running` with its context (`RunStore._insert_started`): no UPDATE of the run at all.
        # Eight statements: the event's runs, the conversation's active run, the input's transcript
        # row, the thread's head, the state snapshot, then the run, its conversation and its event.
        assert not admit.has("UPDATE runs"), admit.statements
        assert admit.statements[-3].startswith("INSERT INTO runs")
        assert "context" in admit.statements[-3]
        assert len(admit.statements) == 8, admit.statements
    # The run's end is written with the batch of the runner's `run.completed`, the last, and only there.
    assert batches[-1].has("UPDATE runs SET status")
    assert not any(tx.has("UPDATE runs SET status") for tx in batches[:-1])
    assert 1 <= len(batches) <= results
    assert all(tx.has("INSERT INTO run_results") for tx in batches)
    # The assistant's transcript row and the state write commit with the results that cause them.
    assert sum(tx.writes("transcript") for tx in batches) == 1
    assert sum(tx.writes("state") for tx in batches) == 1
    # The reader on this process was served from memory: no transaction read the run's results.
    assert not any(tx.has("FROM run_results") for tx in mine)
    if postgres:
        # PostgreSQL: each batch (with its transcript and state rows, the last with the run's end) is one
        # statement that commits by itself, one round trip (`Database.run_statement`).
        assert all(tx.autocommit and len(tx.statements) == 1 for tx in batches), mine
    else:
        assert not any(tx.autocommit for tx in mine)
    return batches


async def test_an_echo_run_takes_at_most_two_transactions(host: Host) -> None:
    await _echo_run(host, "warm up", "conv-warm")  # first-use work (plugin, caches) is not a run's cost
    event_ = message("hello", bot="echo", conversation="conv-count", delivery={"supports_streaming": False})
    mine, types = await _count(host, event_)
    assert types == ["message.completed", "state.updated", "run.completed"]
    _check_shape(mine, len(types))
    assert len(mine) <= RUN_BUDGET
    if host.stores.db.dialect == "sqlite":
        # Each on the writer's connection (`Database.run_write`), none through aiosqlite.
        writer = host.stores.db.sync_engines[1]
        assert {tx.engine for tx in mine} == {writer}


async def test_an_echo_run_on_postgresql_switches_no_greenlet(host: Host) -> None:
    """On PostgreSQL an echo run's transactions (its admission, its batch with the end) check a connection
    out, run their statements, commit and give the connection back all on the event loop
    (`stores/_checkout.py`, `stores/_direct.py`): SQLAlchemy's greenlet is switched to only for I/O its
    synchronous layers would do (a new connection, an ORM call, a rollback). Two of them per transaction
    cost some 50 µs of the host's CPU on the run's critical path."""
    if host.stores.db.dialect != "postgresql":
        pytest.skip("SQLAlchemy's asyncpg I/O goes through greenlets; SQLite's writer has none")
    for i in range(3):  # first-use work, and a pool whose connections are no longer new
        await _echo_run(host, "warm up", f"conv-warm-{i}")
    switches: list[str] = []
    previous = greenlet.settrace(lambda event, _args: switches.append(event))
    try:
        await _echo_run_of(host, message("hello", bot="echo", conversation="conv-greenlets"))
    finally:
        greenlet.settrace(previous)
    assert switches == []


async def test_every_statement_of_an_echo_run_is_a_prebuilt_plan(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's statements go straight to the driver (`stores/_direct.py`), none through SQLAlchemy's own
    execution, which compiles and processes each one again: a statement the plans cannot take (an `IN`
    list, expanded at each execution) cost a twentieth of a served run's CPU before it was rewritten."""
    seen: list[str] = []
    through = Connection._execute_clauseelement  # pyright: ignore[reportPrivateUsage]

    def recorded(self: Connection, statement: Any, distilled: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(f"{' '.join(str(statement).split())} {distilled!r}")
        return through(self, statement, distilled, *args, **kwargs)

    await _echo_run(host, "warm up", "conv-warm")  # first-use work (plugin, caches) is not a run's cost
    monkeypatch.setattr(Connection, "_execute_clauseelement", recorded)
    run_id, _ = await _echo_run_of(host, message("hello", bot="echo", conversation="conv-planned"))
    mine = [s for s in seen if any(i in s for i in (run_id, "conv-planned"))]
    assert mine == [], "\n".join(mine)
    async with host.stores.db.read() as session:  # the recorder sees what SQLAlchemy itself runs
        await session.execute(select(RunRow.status).where(RunRow.run_id == bindparam("r")), {"r": run_id})
    assert any(run_id in s for s in seen), seen


async def test_a_batch_of_results_past_long_batch_bytes_is_written_off_the_event_loop(host: Host) -> None:
    """A batch's results are encoded and written in its transaction: on a SQLite file a small batch runs
    on the event loop, one past `engine.LONG_WRITE_BYTES` (megabytes at most) on the writer thread."""
    if host.stores.db.dialect != "sqlite":
        pytest.skip("where a transaction runs is SQLite's writer's choice")
    await _echo_run(host, "warm up", "conv-warm")
    quiet = {"supports_streaming": False}
    small, _ = await _count(host, message("hello", bot="echo", conversation="conv-small", delivery=quiet))
    text = "x" * (engine.LONG_WRITE_BYTES + 1024)
    big, _ = await _count(host, message(text, bot="echo", conversation="conv-big", delivery=quiet))
    loop = threading.get_ident()
    assert {tx.thread for tx in _check_shape(small, 3)} == {loop}
    off_loop = [tx for tx in _check_shape(big, 3) if tx.thread != loop]
    assert len(off_loop) == 1
    assert off_loop[0].mentions(text)  # the batch with the long message, none other


async def test_a_streamed_echo_run_adds_only_result_batches(host: Host) -> None:
    await _echo_run(host, "warm up", "conv-warm")
    mine, types = await _count(host, message("hello", bot="echo", conversation="conv-stream"))
    assert types == ["message.delta", "message.completed", "state.updated", "run.completed"]
    batches = _check_shape(mine, len(types))
    assert len(mine) == 1 + len(batches)
    assert len(batches) == 1  # the four results came in one write, one batch


async def test_a_reader_of_an_ended_run_reads_every_result_from_the_store(host: Host) -> None:
    run_id, live = await _echo_run(host, "hello", "conv-replay")
    replayed = [item async for item in host.orchestrator.results(run_id)]
    assert [item.type for item in replayed] == live
    assert [item.seq for item in replayed] == [1, 2, 3, 4]
    resumed = [item.seq async for item in host.orchestrator.results(run_id, after=2)]
    assert resumed == [3, 4]


PG_ROUND_TRIPS = 4
"""Round trips between the host and PostgreSQL of a non-streamed echo run's transactions (each `BEGIN`,
statement and `COMMIT` one, but a last statement sent with its `COMMIT`; asyncpg sends a statement's
bind and execute and a batch's rows together): the admission's three, then the one result batch that
ends the run, one statement without `BEGIN` and `COMMIT`.
Not counted: preparing a statement, once per pooled connection (a connection the warm-up run did not
use prepares again), not once per run."""
PG_ADMIT_ROUND_TRIPS = 3
"""Of those, the admission's (which starts the run): `BEGIN` with the conversation's lock (one query,
`_checkout.locked_transaction`), the one statement that admits and starts the run and reads what its
context needs (`stores/_admit.py`), and the context with the `COMMIT` (one query,
`_direct.AsyncpgConnection.hold_for_commit`; a round trip each before). Not counted: preparing a statement, once per pooled connection, not once per run."""
_ROUND_TRIPS = ("query", "prepare", "bind_execute", "bind_execute_many", "bind", "execute")
"""The asyncpg protocol's calls that send a request and wait for its answer."""


class _CountingProtocol:
    """An asyncpg connection's protocol that records each round trip (its method, SQL and arguments)."""

    def __init__(self, protocol: Any, log: list[tuple[int, str, str, str]]) -> None:
        self._protocol = protocol
        self._log = log

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._protocol, name)
        if name not in _ROUND_TRIPS:
            return found

        def counted(*args: Any, **kwargs: Any) -> Any:
            first = args[0] if args else next(iter(kwargs.values()))  # the statement or the query
            if name == "bind_execute_many":  # an iterator of rows: listed once, for both of us
                kwargs["args"] = list(kwargs["args"])
            sql = first if name == "query" else str(getattr(first, "query", ""))
            self._log.append((id(self), name, " ".join(sql.split()), repr((args[1:2], kwargs.get("args")))))
            return found(*args, **kwargs)

        return counted


async def test_an_echo_run_on_postgres_takes_few_round_trips(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    if host.stores.db.dialect != "postgresql":
        pytest.skip("round trips are PostgreSQL's cost (SQLite runs in the process)")
    log: list[tuple[int, str, str, str]] = []
    init: Any = asyncpg.connection.Connection.__init__  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]  # untyped

    def counting(self: Any, protocol: Any, *args: Any, **kwargs: Any) -> None:
        init(self, _CountingProtocol(protocol, log), *args, **kwargs)

    monkeypatch.setattr(asyncpg.connection.Connection, "__init__", counting)
    await host.stores.db.engine.dispose()  # the pool's next connections are counted
    await _echo_run(host, "warm up", "conv-warm")
    event_ = message("hello", bot="echo", conversation="conv-trips", delivery={"supports_streaming": False})
    log.clear()
    run_id, types = await _echo_run_of(host, event_)
    assert types == ["message.completed", "state.updated", "run.completed"]
    transactions: list[list[tuple[str, str, str]]] = []
    open_: dict[int, list[tuple[str, str, str]]] = {}  # per connection, its transaction begun and not ended
    for connection, method, sql, args in log:
        tx = open_.get(connection)
        if tx is None:  # `BEGIN`, or a statement outside a transaction (its own)
            tx = list[tuple[str, str, str]]()
            transactions.append(tx)
            if sql.startswith("BEGIN"):
                open_[connection] = tx
        tx.append((method, sql, args))
        if sql.startswith(("COMMIT", "ROLLBACK")) or sql.endswith("; COMMIT;"):  # alone, or with a statement
            open_.pop(connection, None)
    mine = [tx for tx in transactions if any(run_id in args or event_.event_id in args for _, _, args in tx)]
    trips = sum(method != "prepare" for tx in mine for method, _, _ in tx)  # prepared once per connection
    assert len(mine) <= RUN_BUDGET
    assert trips <= PG_ROUND_TRIPS, "\n".join(sql for tx in mine for _, sql, _ in tx)
    (admission,) = [tx for tx in mine if any("INSERT INTO runs" in sql for _, sql, _ in tx)]
    admit = [sql for method, sql, _ in admission if method != "prepare"]
    assert len(admit) <= PG_ADMIT_ROUND_TRIPS, "\n".join(admit)
    assert admit[0].startswith("BEGIN; SELECT pg_advisory_xact_lock("), admit[0]  # the lock with the BEGIN
    assert not any("pg_advisory_xact_lock($" in sql for sql in admit)  # and not taken again
    assert admit[-1].startswith("UPDATE runs SET context="), admit[-1]  # the context goes with the COMMIT
    assert admit[-1].endswith("; COMMIT;"), admit[-1]


async def test_an_echo_run_on_postgres_wakes_the_other_processes_once(host: Host) -> None:
    """Its last batch and its end are one statement, announced by one notification (`end`, which wakes
    the run's readers as `results` would): every listening process wakes once per run, not twice."""
    if host.stores.db.dialect != "postgresql":
        pytest.skip("wake-ups between processes are PostgreSQL's (NOTIFY)")
    heard: list[str] = []

    def received(*args: Any) -> None:
        heard.append(str(args[-1]))

    # A connection of its own, as another process listens: outside any transaction (a session in one
    # gets its notifications only when it ends), not from the pool (whose checkout begins one).
    url = make_url(host.stores.db.url).set(drivername="postgresql")
    dsn = url.render_as_string(hide_password=False)
    raw = cast(Any, await asyncpg.connect(dsn))  # pyright: ignore[reportUnknownMemberType] -- asyncpg is untyped
    try:
        await raw.add_listener(wakeups.CHANNEL, received)
        event_ = message(
            "hello", bot="echo", conversation="conv-woken", delivery={"supports_streaming": False}
        )
        run_id, _ = await _echo_run_of(host, event_)
        with anyio.fail_after(10):
            # One transaction's notifications arrive together and in order: once its `end` is here, a
            # `results` sent with it would be here too.
            while f"end {run_id}" not in heard:
                await raw.execute("SELECT 1")  # a round trip: what the server has queued is read
                await anyio.sleep(0.01)
        await raw.remove_listener(wakeups.CHANNEL, received)
    finally:
        await raw.close()
    assert [wakeups.parse(payload) for payload in heard if payload.endswith(run_id)] == [("end", run_id)]
