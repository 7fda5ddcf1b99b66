"""pg-scale: the reads and writes of a busy host on a generated PostgreSQL database, against 10k rows.

Two fresh PostgreSQL databases, migrated, then filled by `_generate.py` through `COPY`: *small* at 10k
transcript rows (scale 1/5000: 10k event-log rows, 1k runs, 1k audit rows, 200 conversations) and *big*
at `--scale` (1 = 1M conversations, 50M transcript, 50M event-log, 5M runs, 5M audit rows). Every
operation goes through the store method the product calls, alternating call by call (ABBA):

- `history_page` of `conv-long` (1/20 of all transcript rows): the newest page, a page in the middle
  and the oldest page; and the newest page of an ordinary conversation (50 items at scale 1);
- `history_search` in one ordinary conversation and in `conv-long` (a word of the thread's newest item);
- `events_page` of `conv-long`: newest, and deep filtered by two types;
- `GET /v1/runs` (`RunStore.list`): unfiltered, by conversation, by status (common and rare), by agent,
  by creating key, a one-day `since`/`until` window, and the second page of a filter;
- `GET /v1/conversations` (`ConversationStore.list`): unfiltered, by actor, by agent;
- admission of a new event (`RunStore.admit` with its inbound event-log row, a new conversation);
- the retention pass (`RetentionStore.collect`) of the event log, the transcript and audit: rounds that
  each delete the next oldest `RETENTION_ROWS` rows, reported in rows/s.

Target: each big p50 within 2x the small one (rows/s for retention: at least half). The table sizes (heap
with TOAST, and indexes) of the big database are printed with the bytes per million rows.

    MCPHOST_BENCH_POSTGRES_URL=postgresql+asyncpg://postgres@127.0.0.1:5432/postgres \\
      uv run python -m bench.pg_scale [--scale 0.1] [--quick]

`--quick` is scale 1/500 (100k transcript rows) with fewer calls; `tests/bench/test_pg_scale.py` runs it
at 20k rows in CI.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import anyio

from bench._alternate import Samples, interleave
from bench._databases import postgres_server_url, workspace
from bench._generate import (
    LONG,
    SMALL_SCALE,
    Plan,
    actor_of,
    conversation_id,
    driver_dsn,
    generate,
    table_sizes,
)
from bench._pgconn import connect_pg
from bench._report import RESULTS, load_average, publish
from bench._stats import Row, Stat, fmt, judge
from mcphost.models import Run, RunGrant, RunStatus, new_id
from mcphost.stores import Stores, open_stores
from mcphost.stores.events import event_values
from mcphost.stores.retention import RetentionStore
from mcphost.stores.runs import RunStart

NAME = "pg-scale"
TARGET_RATIO = 2.0
QUICK_SCALE = 1 / 500
WARMUP_CALLS = 3
RETENTION_ROUNDS = 4
RETENTION_ROWS = {"events": 1000, "transcript": 1000, "audit": 100}
ORDINARY = conversation_id(7)
PAGE = 50


@dataclass
class Loaded:
    """One generated database: its stores, its plan and the positions the operations start from."""

    stores: Stores
    plan: Plan
    middle: str
    oldest: str
    events_middle: str
    ordinary_word: str
    long_word: str
    window: tuple[float, float]
    second_page: str
    admitted: int = 0


async def positions(url: str, stores: Stores, plan: Plan) -> Loaded:
    conn = await connect_pg(driver_dsn(url))
    try:

        async def seq_at(table: str, offset: int, order: str) -> int:
            return int(
                await conn.fetchval(
                    f"SELECT seq FROM {table} WHERE conversation_id = $1 AND thread_id = '' "
                    f"ORDER BY seq {order} OFFSET $2 LIMIT 1",
                    LONG,
                    offset,
                )
            )

        long_rows = plan.transcript // 20
        middle = await seq_at("transcript", long_rows // 2, "DESC")
        oldest = await seq_at("transcript", PAGE, "ASC")
        events_middle = await seq_at("events", plan.events // 40, "DESC")

        async def newest_word(conversation: str) -> str:
            content = await conn.fetchval(
                "SELECT content FROM transcript WHERE conversation_id = $1 AND thread_id = '' "
                "ORDER BY seq DESC LIMIT 1",
                conversation,
            )
            return str(content).split(" about ")[1].split(" ")[0]

        ordinary_word, long_word = await newest_word(ORDINARY), await newest_word(LONG)
    finally:
        await conn.close()
    first = await stores.runs.list(status=RunStatus.COMPLETED, limit=PAGE)
    assert first.next_cursor is not None, "the generated runs are unreadable through RunStore.list"
    day = plan.start + 200 * 86_400.0
    cursors = stores.cursors
    return Loaded(
        stores,
        plan,
        cursors.encode("transcript", middle),
        cursors.encode("transcript", oldest),
        cursors.encode("events", events_middle),
        ordinary_word,
        long_word,
        (day, day + 86_400.0),
        first.next_cursor,
    )


Operation = Callable[[Loaded], Awaitable[object]]


async def _admit(d: Loaded) -> None:
    await admit_new(d)


async def admit_new(d: Loaded, *, start: RunStart | None = None) -> None:
    """Admit a new event in a new conversation (its event-log row with it); with `start`, the run starts
    at once."""
    d.admitted += 1
    run_id, conversation, now = new_id("run"), f"conv-new-{d.admitted}", time.time()
    run = Run(
        run_id=run_id,
        event_id=new_id("evt"),
        event_type="message.received",
        agent_id="agent-1",
        runner_id="plugin:mcphost/echo/default",
        conversation_id=conversation,
        thread_id=None,
        status=RunStatus.QUEUED,
        created_at=now,
        deadline_at=now + 300,
    )
    grant = RunGrant(
        run_id=run_id,
        runner_id=run.runner_id,
        plugin="mcphost/echo",
        binding_id="default",
        conversation_id=conversation,
        thread_id=None,
        actor_id="actor-new",
        subject_type=None,
        subject_id=None,
        bot_id=None,
        workspace_id=None,
        tools=frozenset({"history_page"}),
        deadline_at=run.deadline_at,
        token_hash=run_id,
    )
    inbound = event_values(
        event_id=run.event_id,
        event_type=run.event_type,
        kind="inbound",
        source="api",
        payload={"text": "hello"},
        conversation_id=conversation,
        actor_id="actor-new",
    )
    _, created = await d.stores.runs.admit(
        run, grant=grant, concurrency="enqueue", inbound=inbound, start=start
    )
    assert created


def _runs(**filters: object) -> Operation:
    async def op(d: Loaded) -> None:
        await d.stores.runs.list(limit=PAGE, **filters)  # pyright: ignore[reportArgumentType]

    return op


async def _runs_window(d: Loaded) -> None:
    await d.stores.runs.list(since=d.window[0], until=d.window[1], limit=PAGE)


async def _runs_second_page(d: Loaded) -> None:
    await d.stores.runs.list(status=RunStatus.COMPLETED, cursor=d.second_page, limit=PAGE)


OPERATIONS: list[tuple[str, Operation]] = [
    ("history_page conv-long newest", lambda d: d.stores.transcript.page(LONG, limit=PAGE)),
    ("history_page conv-long middle", lambda d: d.stores.transcript.page(LONG, before=d.middle, limit=PAGE)),
    ("history_page conv-long oldest", lambda d: d.stores.transcript.page(LONG, before=d.oldest, limit=PAGE)),
    ("history_page one conversation", lambda d: d.stores.transcript.page(ORDINARY, limit=PAGE)),
    (
        "history_search one conversation",
        lambda d: d.stores.transcript.search(ORDINARY, query=d.ordinary_word),
    ),
    ("history_search conv-long", lambda d: d.stores.transcript.search(LONG, query=d.long_word)),
    ("events_page conv-long newest", lambda d: d.stores.events.page(LONG, limit=PAGE)),
    (
        "events_page conv-long deep, 2 types",
        lambda d: d.stores.events.page(
            LONG, before=d.events_middle, limit=PAGE, event_types=["tool.call.started", "message.completed"]
        ),
    ),
    ("runs list", _runs()),
    ("runs list conversation_id", _runs(conversation_id=ORDINARY)),
    ("runs list status=completed", _runs(status=RunStatus.COMPLETED)),
    ("runs list status=queued", _runs(status=RunStatus.QUEUED)),
    ("runs list agent_id", _runs(agent_id="agent-3")),
    ("runs list created_by", _runs(created_by="key-2")),
    ("runs list since+until (1 day)", _runs_window),
    ("runs list page 2", _runs_second_page),
    ("conversations list", lambda d: d.stores.conversations.list(limit=PAGE)),
    (
        "conversations list actor_id",
        lambda d: d.stores.conversations.list(actor_id=actor_of(ORDINARY), limit=PAGE),
    ),
    ("conversations list agent_id", lambda d: d.stores.conversations.list(agent_id="agent-3", limit=PAGE)),
    ("admit a new event", _admit),
]


async def _measure(small: Loaded, big: Loaded, calls: int) -> list[Row]:
    rows: list[Row] = []
    for label, op in OPERATIONS:

        def bound(d: Loaded, fn: Operation = op) -> Callable[[], Awaitable[object]]:
            return lambda: fn(d)

        await interleave(bound(small), bound(big), WARMUP_CALLS, Samples([], [], 0))
        samples = Samples([], [], 0)
        await interleave(bound(small), bound(big), calls, samples)
        row = Row(
            benchmark=NAME,
            case=label,
            baseline_label=_count(small.plan.transcript),
            subject_label=_count(big.plan.transcript),
            baseline=Stat.of(samples.baseline, "ms"),
            subject=Stat.of(samples.subject, "ms"),
            target=f"big ≤ {TARGET_RATIO:g}x small",
        )
        rows.append(replace(row, verdict=judge(row.ratio is not None and row.ratio <= TARGET_RATIO)))
    return rows


async def _retention_rates(d: Loaded, kind: str) -> list[float]:
    """Rows/s of `RETENTION_ROUNDS` collections of `kind`, each of the next oldest rows."""
    per_round = RETENTION_ROWS[kind]
    total = {"events": d.plan.events, "transcript": d.plan.transcript, "audit": d.plan.runs}[kind]
    rates: list[float] = []
    for k in range(1, RETENTION_ROUNDS + 1):
        # `created_at` grows by SPAN/total per row (audit: per run, whose `ended_at` is 2 s later).
        cutoff = d.plan.created_at(total, k * per_round) + (2.0 if kind == "audit" else 0.0)
        started = time.perf_counter()
        collected = await RetentionStore(d.stores.db, d.stores.artifacts.blobs).collect(kind, cutoff)
        elapsed = time.perf_counter() - started
        if collected.rows == 0:
            raise RuntimeError(f"retention of {kind} deleted nothing at round {k}: the generator drifted")
        rates.append(collected.rows / elapsed)
    return rates


async def _retention(small: Loaded, big: Loaded) -> list[Row]:
    rows: list[Row] = []
    for kind in RETENTION_ROWS:
        base = await _retention_rates(small, kind)
        subject = await _retention_rates(big, kind)
        row = Row(
            benchmark=NAME,
            case=f"retention {kind} ({RETENTION_ROWS[kind]} rows a pass)",
            baseline_label=_count(small.plan.transcript),
            subject_label=_count(big.plan.transcript),
            baseline=Stat.of(base, "rows/s", higher_is_better=True),
            subject=Stat.of(subject, "rows/s", higher_is_better=True),
            higher_is_better=True,
            target=f"big ≥ small / {TARGET_RATIO:g}",
        )
        rows.append(replace(row, verdict=judge(row.ratio is not None and row.ratio >= 1 / TARGET_RATIO)))
    return rows


def _progress(label: str) -> Callable[[str], None]:
    def report(line: str) -> None:
        print(f"pg-scale: generating {label}: {line}", file=sys.stderr, flush=True)

    return report


def _count(n: int) -> str:
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size:
            return f"{n / size:g}{unit}"
    return str(n)


def sizes_note(sizes: dict[str, tuple[int, int, int]]) -> dict[str, str]:
    """Per table: rows, heap and index MiB, and MB per million rows."""
    out: dict[str, str] = {}
    for table, (rows, heap, index) in sizes.items():
        per_million = (heap + index) / max(rows, 1) * 1_000_000 / 1e6
        out[table] = (
            f"{rows:,} rows, heap {heap / 2**20:,.0f} MiB + indexes {index / 2**20:,.0f} MiB"
            f" = {per_million:,.0f} MB per million rows"
        )
    return out


async def run(scale: float, calls: int, tmp_root: Path | None = None) -> tuple[list[Row], dict[str, object]]:
    """Generate both databases, measure, and return the rows and the generation details."""
    details: dict[str, object] = {}
    async with AsyncExitStack() as stack:
        loaded: list[Loaded] = []
        for label, at in (("small", SMALL_SCALE), ("big", scale)):
            ws = await stack.enter_async_context(workspace("postgres", tmp_root))
            async with open_stores(ws.database_url, ws.data_dir):
                pass  # migrated
            plan = Plan.at(at)
            started = time.perf_counter()
            seconds = await generate(ws.database_url, plan, progress=_progress(label))
            details[f"generate_{label}_total_s"] = round(time.perf_counter() - started, 1)
            details[f"generate_{label}_s"] = {step: round(s, 1) for step, s in seconds.items()}
            if label == "big":
                details["sizes_big"] = sizes_note(await table_sizes(ws.database_url))
            stores = await stack.enter_async_context(open_stores(ws.database_url, ws.data_dir))
            loaded.append(await positions(ws.database_url, stores, plan))
        small, big = loaded
        rows = await _measure(small, big, calls)
        rows.extend(await _retention(small, big))
    return rows, details


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.pg_scale", description="A busy host's operations at scale, on PostgreSQL."
    )
    parser.add_argument(
        "--scale", type=float, default=None, help="1 = 50M transcript rows (default 1/10; --quick 1/500)"
    )
    parser.add_argument("--quick", action="store_true", help="scale 1/500 and fewer calls")
    parser.add_argument("--calls", type=int, default=None, help="timed calls per side per operation")
    parser.add_argument("--output", type=Path, default=RESULTS.with_name("pg_scale_results.json"))
    args = parser.parse_args(argv)
    if postgres_server_url() is None:
        print("pg-scale needs MCPHOST_BENCH_POSTGRES_URL (or MCPHOST_TEST_POSTGRES_URL)", file=sys.stderr)
        return 2
    scale = args.scale if args.scale is not None else QUICK_SCALE if args.quick else 0.1
    calls = args.calls or (20 if args.quick else 60)
    load_before = load_average()
    started = time.perf_counter()
    rows, details = anyio.run(run, scale, calls, backend="asyncio")
    details = {"scale": scale, **details}
    publish(
        rows,
        module="bench.pg_scale",
        argv=argv,
        preset=f"scale {fmt(scale)}",
        dialects=("postgres",),
        skipped=[
            "history_search across an actor's conversations: the product has no such operation "
            "(TranscriptStore.search is scoped to one thread)"
        ],
        load_before=load_before,
        elapsed_s=time.perf_counter() - started,
        path=args.output,
        details=details,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
