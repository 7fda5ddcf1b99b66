"""run-overhead: one run through the host versus the same echo plugin driven directly over stdio.

Subject: `orchestrator.submit(event)` → follow `orchestrator.results(run_id)` until `run.completed`
(admission, grant, event log, transcript, state snapshot, result validation, persistence, publication,
the run's end) with the bundled echo plugin. Baseline: the same `python -m mcphost_runners.echo` code in its
own process, driven by `bench._stdio.StdioDriver` (a `runner/run` request with an equivalent context,
results collected until the response). One run per side per round, alternating, at concurrency 1.

Reported: both sides' p50/p99, the ratio, and the host overhead per run as the paired difference
(subject - baseline of the same round) at p50 and p99; also how many database transactions and
statements one run costs (counted with SQLAlchemy engine events) and the host process's CPU time per run. Target: overhead p50 ≤ 5 ms on SQLite.

A second row per database explains the first: one store write (`state.set`, an upsert in its own
transaction) through the stores' SQLAlchemy async session, versus the same upsert sent through the bare
driver (stdlib `sqlite3` in one worker-thread hop; asyncpg directly). The difference is the fixed cost
each of a run's transactions pays.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
from sqlalchemy.engine import make_url

from bench._alternate import alternate, repeat, timed_ms
from bench._bulk import state_owner
from bench._config import BenchConfig
from bench._databases import DialectName, workspace
from bench._host import bench_host, direct_run, host_run, message
from bench._pgconn import connect_pg
from bench._stats import Row, Stat, judge, percentile
from bench._stdio import StdioDriver
from mcphost.app import Host
from mcphost.stores.engine import sqlite_path

NAME = "run-overhead"
TARGET_P50_MS = 5.0
CONVERSATIONS = 8
FLOOR_OWNER = ("plugin:bench/floor/default", "floor", "conv-floor", "")
_UPSERT_COLUMNS = "scope, owner, key, value, size, updated_at"


class _Counter:
    """Transactions and statements on one engine while `on`. Listeners stay attached for the engine's
    life: removing one while a run's background writes iterate the listener list breaks those writes."""

    def __init__(self) -> None:
        self.on = True
        self.transactions = 0
        self.statements = 0
        self.cpu_s = 0.0

    def begin(self, *_: object) -> None:
        if self.on:
            self.transactions += 1

    def statement(self, *_: object) -> None:
        if self.on:
            self.statements += 1


async def run(cfg: BenchConfig) -> list[Row]:
    rows: list[Row] = []
    for dialect in cfg.dialects:
        rows.extend(await _dialect(dialect, cfg))
    return rows


async def _dialect(dialect: DialectName, cfg: BenchConfig) -> list[Row]:
    sizes = cfg.sizes
    async with (
        workspace(dialect, cfg.tmp_root) as ws,
        bench_host(ws) as host,
        StdioDriver.open() as driver,
    ):
        counter = itertools.count()

        def conversation() -> str:
            return f"conv-{next(counter) % CONVERSATIONS}"

        async def subject() -> list[float]:
            event_ = message("hello", conversation())
            start = time.perf_counter_ns()
            run_id = await host_run(host, event_)
            elapsed = (time.perf_counter_ns() - start) / 1e6
            # The run closes (status, grant) right after its last result is delivered: let that
            # finish outside the timed window, so it does not land in the next sample.
            await host.orchestrator.wait(run_id)
            return [elapsed]

        async def baseline() -> list[float]:
            conv = conversation()
            return [await timed_ms(lambda: direct_run(driver, "hello", conv))]

        samples = await alternate(
            baseline,
            subject,
            rounds=sizes.overhead_runs,
            warmup=sizes.overhead_warmup,
            budget_s=sizes.overhead_budget_s,
        )
        counts = await _count_statements(host, sizes.overhead_counted)
        floor = await _store_write_floor(host, ws.database_url, cfg)

    overhead = [s - b for s, b in zip(samples.subject, samples.baseline, strict=True)]
    o50, o99 = percentile(overhead, 50), percentile(overhead, 99)
    judged = dialect == "sqlite"
    run_row = Row(
        benchmark=NAME,
        case=f"{dialect}, c=1",
        baseline_label="echo over stdio, no host",
        subject_label="ingest → run.completed via host",
        baseline=Stat.of(samples.baseline, "ms"),
        subject=Stat.of(samples.subject, "ms"),
        target=f"overhead p50 ≤ {TARGET_P50_MS:g} ms" if judged else None,
        verdict=judge(o50 <= TARGET_P50_MS) if judged else "n/a",
        extra={
            "overhead_p50_ms": o50,
            "overhead_p99_ms": o99,
            "transactions_per_run": counts.transactions / sizes.overhead_counted,
            "statements_per_run": counts.statements / sizes.overhead_counted,
            "host_cpu_ms_per_run": 1000 * counts.cpu_s / sizes.overhead_counted,
        },
    )
    return [run_row, floor]


async def _count_statements(host: Host, runs: int) -> _Counter:
    """Transactions, statements and CPU time (this process, all threads) of `runs` sequential runs,
    each let to close completely.

    Each run is counted until `orchestrator.wait` returns (its close written; this process answers that
    from memory, without a read), so a slow machine cannot cut a close off the count.
    """
    counts = _Counter()
    counts.on = False
    hooks = host.stores.db.hooks  # every engine's, the writer thread's too; safe while the host serves
    hooks.add("begin", counts.begin)
    hooks.add("before_cursor_execute", counts.statement)
    for i in range(runs):
        counts.on = True
        cpu_start = time.process_time()
        run_id = await host_run(host, message("hello", f"conv-count-{i}"))
        run = await host.orchestrator.wait(run_id)  # its close: answered from memory, no read
        counts.cpu_s += time.process_time() - cpu_start
        counts.on = False
        if not run.status.is_terminal:
            raise RuntimeError(f"run {run_id} is still {run.status} after wait()")
    return counts


async def _store_write_floor(host: Host, database_url: str, cfg: BenchConfig) -> Row:
    keys = itertools.count()
    state = host.stores.state

    async def store_write() -> None:
        await state.set("conversation", FLOOR_OWNER, f"s{next(keys) % 64}", {"n": 1})

    async with _bare_upsert(database_url) as bare_write:
        calls = max(10, cfg.sizes.overhead_runs // 2)
        samples = await alternate(
            repeat(bare_write, calls), repeat(store_write, calls), rounds=4, warmup=1, min_rounds=1
        )
    dialect = "sqlite" if sqlite_path(database_url) is not None else "postgres"
    bare = "sqlite3, one thread hop" if dialect == "sqlite" else "asyncpg, bare"
    return Row(
        benchmark=NAME,
        case=f"{dialect}, one store write (state upsert)",
        baseline_label=bare,
        subject_label="stores.state.set (SQLAlchemy async)",
        baseline=Stat.of(samples.baseline, "ms"),
        subject=Stat.of(samples.subject, "ms"),
    )


@asynccontextmanager
async def _bare_upsert(database_url: str) -> AsyncGenerator[Callable[[], Awaitable[None]], None]:
    """The same upsert `state.set` issues, through the bare driver, one transaction per call."""
    keys = itertools.count()
    owner = state_owner(FLOOR_OWNER)
    path = sqlite_path(database_url)

    def values() -> tuple[Any, ...]:
        value = json.dumps({"n": 1})
        return ("conversation", owner, f"b{next(keys) % 64}", value, len(value), time.time())

    if path is not None:
        con = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        con.execute("PRAGMA busy_timeout=30000")
        con.execute("PRAGMA synchronous=NORMAL")
        sql = (
            f"INSERT INTO state ({_UPSERT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (scope, owner, key) "
            "DO UPDATE SET value = excluded.value, size = excluded.size, updated_at = excluded.updated_at"
        )

        def write_sync(params: tuple[Any, ...]) -> None:
            con.execute("BEGIN IMMEDIATE")
            con.execute(sql, params)
            con.execute("COMMIT")

        async def write_sqlite() -> None:
            await anyio.to_thread.run_sync(write_sync, values())

        try:
            yield write_sqlite
        finally:
            con.close()
        return

    dsn = make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await connect_pg(dsn)
    sql = (
        f"INSERT INTO state ({_UPSERT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (scope, owner, key) "
        "DO UPDATE SET value = excluded.value, size = excluded.size, updated_at = excluded.updated_at"
    )

    async def write_postgres() -> None:
        await conn.execute(sql, *values())

    try:
        yield write_postgres
    finally:
        await conn.close()
