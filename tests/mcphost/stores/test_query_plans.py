"""No sequential scan of a big table in any plan of the operations a busy host runs (PostgreSQL).

A database is generated (`bench/_generate.py`, the same rows `bench.pg_scale` measures) big enough that
the planner prefers a sequential scan wherever no index fits: 100k transcript and event-log rows, 10k
runs and audit rows. Each store method runs for real while the `Database.hooks` statement hook captures
the exact SQL and parameters it sends; each captured statement is then planned with
`EXPLAIN (FORMAT JSON)` and its plan may not hold a `Seq Scan` node on `transcript`, `events`, `runs`,
`audit` or `conversations` (small tables, e.g. an empty `approvals`, may be scanned: that is the cheap
plan there). A page of a time window of runs reads the page, not the window (`EXPLAIN ANALYZE`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
import sqlalchemy as sa

from bench._databases import Workspace
from bench._generate import Plan, driver_dsn, generate
from bench._host import bench_host, host_run, message
from bench._pgconn import connect_pg
from bench.pg_scale import OPERATIONS, Loaded, admit_new, positions
from mcphost.models import RunStatus
from mcphost.stores import Stores, open_stores
from mcphost.stores._sql import scan_whole_tables
from mcphost.stores.engine import POSTGRES_SESSION_SETTINGS, Database
from mcphost.stores.retention import ROW_KINDS, RetentionStore
from mcphost.stores.runs import RunStart

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(600)]

SCALE = 1 / 500
BIG_TABLES = frozenset({"transcript", "events", "runs", "audit", "conversations"})


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def seq_scans(plan: list[dict[str, Any]]) -> list[str]:
    """The big tables a JSON plan reads with a sequential scan."""
    return [
        node["Relation Name"]
        for top in plan
        for node in _nodes(top["Plan"])
        if node["Node Type"] == "Seq Scan" and node.get("Relation Name") in BIG_TABLES
    ]


@contextmanager
def statements_sent(db: Database) -> Generator[list[tuple[str, Any]], None, None]:
    """The (statement, parameters) pairs `db` sends while the block runs, in order."""
    seen: list[tuple[str, Any]] = []

    def capture(_c: object, _cur: object, statement: str, parameters: Any, *_: object) -> None:
        seen.append((statement, parameters))

    with db.hooks.added("before_cursor_execute", capture):
        yield seen


def _retention(kind: str, *, dry_run: bool) -> Callable[[Loaded], Awaitable[object]]:
    async def collect(d: Loaded) -> None:
        store = RetentionStore(d.stores.db, d.stores.artifacts.blobs)
        await store.collect(kind, d.plan.start + 3 * 86_400.0, dry_run=dry_run)

    return collect


async def _held_sessions(d: Loaded) -> None:
    await RetentionStore(d.stores.db, d.stores.artifacts.blobs).held_sessions()


async def _run_folders(d: Loaded) -> None:
    await RetentionStore(d.stores.db, d.stores.artifacts.blobs).removable_run_folders(
        [d.plan.run_id(1), d.plan.run_id(2)], time.time()
    )


CHECKED: list[tuple[str, Callable[[Loaded], Awaitable[object]]]] = [
    *OPERATIONS,
    ("transcript head", lambda d: d.stores.transcript.head("conv-long")),
    ("transcript for_run", lambda d: d.stores.transcript.for_run(d.plan.run_id(3))),
    ("events for_run", lambda d: d.stores.events.for_run(d.plan.run_id(3))),
    ("retention held_sessions", _held_sessions),
    ("retention removable_run_folders", _run_folders),
    *[(f"retention {kind} dry run", _retention(kind, dry_run=True)) for kind in ROW_KINDS],
    *[(f"retention {kind}", _retention(kind, dry_run=False)) for kind in ROW_KINDS],
]


async def _plans_of(
    stores: Stores, d: Loaded, conn: Any, op: Callable[[Loaded], Awaitable[object]]
) -> list[tuple[str, list[dict[str, Any]]]]:
    with statements_sent(stores.db) as seen:
        await op(d)
    assert seen, "the operation sent no statement"
    out: list[tuple[str, list[dict[str, Any]]]] = []
    for statement, parameters in seen:
        if not statement.lstrip().upper().startswith(("SELECT", "WITH", "INSERT", "UPDATE", "DELETE")):
            continue
        plan = await conn.fetchval("EXPLAIN (FORMAT JSON) " + statement, *(parameters or ()))
        out.append((statement, json.loads(plan)))
    return out


async def test_no_operation_scans_a_big_table(shared_postgres: str, tmp_path: Path) -> None:
    plan = Plan.at(SCALE)
    await generate(shared_postgres, plan)
    conn = await connect_pg(driver_dsn(shared_postgres))
    failures: list[str] = []
    try:
        async with open_stores(shared_postgres, tmp_path / "data") as stores:
            loaded = await positions(shared_postgres, stores, plan)
            for label, op in CHECKED:
                for statement, planned in await _plans_of(stores, loaded, conn, op):
                    if scanned := seq_scans(planned):
                        failures.append(f"{label}: Seq Scan on {', '.join(scanned)} in\n    {statement}")
    finally:
        await conn.close()
    assert not failures, "\n".join(failures)


async def test_a_time_window_of_runs_reads_its_page_not_the_window(
    shared_postgres: str, tmp_path: Path
) -> None:
    """The window's bounds are `created_seq`'s; `created_at` only filters. Planned on its own index, the
    page read every run of the window and sorted them (12.5k rows for a day at 5M runs)."""
    small = Plan.at(SCALE)
    plan = Plan(small.scale, small.conversations, 1_000, 1_000, 200_000, small.start)  # runs only
    await generate(shared_postgres, plan)
    since = plan.start + 100 * 86_400.0
    window = (since, since + 86_400.0)  # 500 of the 200k runs
    conn = await connect_pg(driver_dsn(shared_postgres))
    try:
        async with open_stores(shared_postgres, tmp_path / "data") as stores:
            with statements_sent(stores.db) as seen:
                page = await stores.runs.list(since=window[0], until=window[1], limit=50)
            assert len(page.items) == 50
            assert page.has_more
            statement, parameters = seen[-1]
            assert "ORDER BY runs.created_seq DESC" in statement, statement
            analyzed = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, *parameters)
    finally:
        await conn.close()
    read = [
        node["Actual Rows"]
        for top in json.loads(analyzed)
        for node in _nodes(top["Plan"])
        if node.get("Relation Name") == "runs"
    ]
    assert read, analyzed
    assert max(read) <= 51, json.dumps(json.loads(analyzed), indent=1)


def test_seq_scans_are_found_at_any_depth() -> None:
    plan = [
        {
            "Plan": {
                "Node Type": "Limit",
                "Plans": [
                    {"Node Type": "Index Scan", "Relation Name": "runs"},
                    {"Node Type": "Hash", "Plans": [{"Node Type": "Seq Scan", "Relation Name": "events"}]},
                    {"Node Type": "Seq Scan", "Relation Name": "approvals"},
                ],
            }
        }
    ]
    assert seq_scans(plan) == ["events"]


async def test_the_thread_is_no_key_of_the_transcript_search_index(stores: Stores) -> None:
    """Nearly every transcript row has thread "": as a GIN key its entry lists the whole table, and a
    search in a long conversation decoded it all (27 ms against 0.3 ms at 500k rows, warm)."""
    if stores.db.dialect != "postgresql":
        pytest.skip("the GIN index is PostgreSQL's; SQLite scopes FTS5 with a token")
    async with stores.db.read() as session:
        definition = await session.scalar(
            sa.text("SELECT pg_get_indexdef('ix_transcript_search_vector'::regclass)")
        )
    assert str(definition).endswith("USING gin (conversation_id, search_vector)"), definition


async def test_an_admission_that_starts_its_run_checks_the_turn_once(
    shared_postgres: str, tmp_path: Path
) -> None:
    """The turn check (no run of the conversation queued or running) is read by three `CASE`s of the
    admission's statement; PostgreSQL pulled its subquery into each of them (three index probes per
    admission) until `OFFSET 0` kept it whole (`stores/_admit.py`)."""
    plan = Plan.at(SCALE)
    await generate(shared_postgres, plan)
    conn = await connect_pg(driver_dsn(shared_postgres))
    try:
        async with open_stores(shared_postgres, tmp_path / "data") as stores:
            loaded = await positions(shared_postgres, stores, plan)
            with statements_sent(stores.db) as seen:
                await admit_new(loaded, start=RunStart(host_id="host-plans"))
            (statement, parameters), *_ = [(s, p) for s, p in seen if s.lstrip().startswith("WITH existing")]
            planned = json.loads(await conn.fetchval("EXPLAIN (FORMAT JSON) " + statement, *parameters))
    finally:
        await conn.close()
    probes = [
        node for top in planned for node in _nodes(top["Plan"]) if str(node.get("Alias")).startswith("turn")
    ]
    assert len(probes) == 1, json.dumps(planned, indent=1)


async def test_a_fresh_database_admits_on_its_indexes(shared_postgres: str, tmp_path: Path) -> None:
    """A fresh database's statistics say `transcript` is empty (migration 0004 analyzes it), so the
    admission's read of the thread's newest items was planned as a sequential scan, and its prepared plan
    kept until autovacuum analyzed the table again: each admission read the whole transcript (0.1 ms at
    800 rows, growing with every run). The host's connections refuse sequential scans where an index
    serves (`engine.POSTGRES_SESSION_SETTINGS`); planned on one of them, an echo run's admission reads
    indexes only."""
    ws = Workspace("postgres", shared_postgres, tmp_path / "data")
    async with bench_host(ws) as host:
        await host_run(host, message("hello", "conv-fresh"))  # the transcript holds rows
        with statements_sent(host.stores.db) as seen:
            await host_run(host, message("hello", "conv-fresh"))
        (statement, parameters), *_ = [(s, p) for s, p in seen if s.lstrip().startswith("WITH existing")]
        async with host.stores.db.read() as session:
            raw = await (await session.connection()).get_raw_connection()
            driver: Any = raw.driver_connection
            # The host's connections decode JSON: the plan comes back as a list.
            explained: Any = await driver.fetchval("EXPLAIN (FORMAT JSON) " + statement, *parameters)
    planned = cast(
        "list[dict[str, Any]]", explained if isinstance(explained, list) else json.loads(explained)
    )
    read = {node.get("Relation Name") for top in planned for node in _nodes(top["Plan"])}
    assert "transcript" in read, json.dumps(planned, indent=1)
    assert seq_scans(planned) == [], json.dumps(planned, indent=1)


async def test_a_whole_table_report_scans_the_table(shared_postgres: str, tmp_path: Path) -> None:
    """Usage totals aggregate every finished model call. Refused a sequential scan (the host's connections
    are, `engine.POSTGRES_SESSION_SETTINGS`), PostgreSQL read the table in index order: 1.57 against 0.23 s
    over 1M calls grouped by agent. The report's transaction lifts the refusal
    (`_sql.scan_whole_tables`): its statements, replayed in one transaction on a connection set as the
    host's, plan a scan of the table, and the same report's statement alone on that connection does not."""
    conn = await connect_pg(driver_dsn(shared_postgres))
    try:
        await conn.execute(
            "INSERT INTO model_calls SELECT 'call_' || i, 'run_' || (i / 3), 'agent_' || (i % 20),"
            " 'actor_' || (i % 500), 'conv_' || (i % 3000), 'm' || (i % 4), 'up', NULL, 'chat', 'chat', false,"
            " 1, CASE WHEN i % 50 = 0 THEN 'failed' ELSE 'ok' END, 200, NULL, 100, 50, 0, 0.001 * (i % 7),"
            " 0, 0, 10, 5, 1.7e9 + i * 10, to_char(to_timestamp(1.7e9 + i * 10), 'YYYY-MM-DD')"
            " FROM generate_series(1, 50000) AS i"
        )
        await conn.execute("ANALYZE model_calls")
        for name, value in POSTGRES_SESSION_SETTINGS.items():  # set as the host's connections are
            await conn.execute(f"SET {name} = {value}")
        async with open_stores(shared_postgres, tmp_path / "data") as stores:
            with statements_sent(stores.db) as sent:
                totals = await stores.usage.totals("agent")
            async with stores.db.read() as session:  # the lift ends with its transaction
                await scan_whole_tables(session, stores.db.dialect)
                lifted = await session.scalar(sa.text("SHOW enable_seqscan"))
            async with stores.db.read() as session:
                after = await session.scalar(sa.text("SHOW enable_seqscan"))
        assert (len(totals), sum(t.calls for t in totals)) == (20, 50_000)
        assert (lifted, after) == ("on", "off")
        (at, (report, parameters)), *_ = [(i, sp) for i, sp in enumerate(sent) if "model_calls" in sp[0]]
        async with conn.transaction():
            for statement, params in sent[:at]:
                if statement.lstrip().upper().startswith("SET"):
                    await conn.execute(statement, *(params or ()))
            planned = json.loads(await conn.fetchval("EXPLAIN (FORMAT JSON) " + report, *parameters))
        refused = json.loads(await conn.fetchval("EXPLAIN (FORMAT JSON) " + report, *parameters))
    finally:
        await conn.close()

    def scanned(plan: list[dict[str, Any]]) -> bool:
        return any(
            node["Node Type"] == "Seq Scan" and node.get("Relation Name") == "model_calls"
            for top in plan
            for node in _nodes(top["Plan"])
        )

    assert scanned(planned), json.dumps(planned, indent=1)
    assert not scanned(refused), json.dumps(refused, indent=1)


async def test_a_fresh_database_ends_runs_by_their_id(shared_postgres: str, tmp_path: Path) -> None:
    """A run's end (`results._ENDED`, in its last batch's statement) and a move of its status
    (`runs._move`) find the row by `run_id`. With the status check as an index condition, a fresh
    database's statistics (`runs` looks empty) had them planned on `(status, created_seq)`, and the
    prepared plan then read every running run of every host to end one."""
    ws = Workspace("postgres", shared_postgres, tmp_path / "data")
    async with bench_host(ws) as host:
        await host_run(host, message("hello", "conv-end"))
        with statements_sent(host.stores.db) as seen:
            run_id = await host_run(host, message("hello", "conv-end"))
            await host.orchestrator.wait(run_id)
            await host.stores.runs.finish(run_id, RunStatus.FAILED)  # ended already: a move that finds none
        updates = [(s, p) for s, p in seen if "UPDATE RUNS SET STATUS" in s.upper().replace('"', "")]
        async with host.stores.db.read() as session:
            raw = await (await session.connection()).get_raw_connection()
            driver: Any = raw.driver_connection
            plans: list[tuple[str, Any]] = [
                (s, await driver.fetchval("EXPLAIN (FORMAT JSON) " + s, *p)) for s, p in updates
            ]
    ends = [s for s, _ in plans if "ended AS (UPDATE runs" in s]
    assert ends, [s for s, _ in plans]
    assert len(plans) > len(ends), [s for s, _ in plans]  # and a move
    for statement, explained in plans:
        planned = cast(
            "list[dict[str, Any]]", explained if isinstance(explained, list) else json.loads(explained)
        )
        used = {
            node.get("Index Name")
            for top in planned
            for node in _nodes(top["Plan"])
            if node.get("Relation Name") == "runs" and node["Node Type"] != "ModifyTable"
        }
        assert used == {"uq_runs_run_id"}, (statement, json.dumps(planned, indent=1))
