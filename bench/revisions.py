"""revisions: this tree's `mcphost serve` against another git revision's, side by side, runs alternating.

`uv run python -m bench.revisions REV [--dialect sqlite|postgres] [--concurrency 1,16] [--blocks 8]
[--runs 150]` checks REV out into a temporary git worktree and starts two servers with the peer
benchmark's settings and echo plugin (`bench.peers._servers`): the baseline runs REV's code (the same
interpreter and packages, REV's tree first on `PYTHONPATH`), the subject this tree's. Each has a fresh
database of its own. Per concurrency, after a warm-up block on each, blocks of `--runs` runs
(`POST /v1/events?stream=true` to its end, the same aiohttp client) alternate between them, forward then
backward (ABBA), so a shared machine's drift hits both alike. Per block: the server's process tree CPU
per run (`/proc`: the server and its plugin), runs/s and the latency p50, and on PostgreSQL the CPU per
run of the backends connected to that side's database (the pool is fixed, so they live through the
blocks; what exited backends and autovacuum used is left out, as it cannot be told apart per database);
a row's figures are the medians over the blocks.

A change's effect on a noisy machine: two `bench.peers` runs back to back moved by ±30 % here with
nothing changed, while the blocks of one side-by-side run agree within ±10 %. Reported, never asserted
(`tests/bench/test_revisions.py` runs it at its smallest size).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Generator, Sequence
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import anyio
from sqlalchemy.engine import make_url

from bench._databases import DialectName, postgres_server_url, workspace
from bench._report import RESULTS, load_average, publish
from bench._stats import Row, Stat
from bench.peers._proctree import cpu_s, postgres_cpu_s
from bench.peers._servers import Server, client, mcphost_run, mcphost_server

NAME = "revisions"
ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def worktree(revision: str) -> Generator[Path, None, None]:
    """`revision` checked out into a temporary git worktree of this repository, removed on exit."""
    folder = Path(tempfile.mkdtemp(prefix="mcphost-rev-"))
    tree = folder / "tree"
    git = ["git", "-C", str(ROOT)]
    added = subprocess.run(
        [*git, "worktree", "add", "--detach", str(tree), revision],
        capture_output=True,
        text=True,
        check=False,
    )
    if added.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise SystemExit(f"revisions: cannot check out {revision!r}: {added.stderr.strip()}")
    try:
        yield tree
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(tree)], capture_output=True, check=False)
        shutil.rmtree(folder, ignore_errors=True)


def short_name(revision: str) -> str:
    """`revision` as git's short commit id (the name itself when git cannot resolve it)."""
    found = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", revision],
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip() or revision


@dataclass
class Side:
    """One server's blocks: CPU ms per run, runs/s and latency p50 ms, one entry per block."""

    server: Server
    label: str
    database: str | None = None
    """Its PostgreSQL database's name (None: SQLite)."""
    cpu_ms: list[float] = field(default_factory=list[float])
    postgres_ms: list[float] = field(default_factory=list[float])
    runs_per_s: list[float] = field(default_factory=list[float])
    p50_ms: list[float] = field(default_factory=list[float])


async def _block(session: aiohttp.ClientSession, side: Side, concurrency: int, runs: int, tag: str) -> None:
    left = [runs]
    latencies: list[float] = []

    async def worker(w: int) -> None:
        i = 0
        while left[0] > 0:
            left[0] -= 1
            started = time.perf_counter()
            await mcphost_run(session, side.server, f"{tag}-{w}-{i % 4}")
            latencies.append(time.perf_counter() - started)
            i += 1

    database = side.database
    postgres_before = postgres_cpu_s(database, reaped=False) if database else 0.0
    cpu_before, started = cpu_s(side.server.pid), time.perf_counter()
    async with anyio.create_task_group() as tg:
        for w in range(concurrency):
            tg.start_soon(worker, w)
    elapsed, cpu = time.perf_counter() - started, cpu_s(side.server.pid) - cpu_before
    if database:
        side.postgres_ms.append(1000 * (postgres_cpu_s(database, reaped=False) - postgres_before) / runs)
    side.cpu_ms.append(1000 * cpu / runs)
    side.runs_per_s.append(runs / elapsed)
    side.p50_ms.append(1000 * statistics.median(latencies))


def _rows(dialect: str, concurrency: int, base: Side, subject: Side) -> list[Row]:
    rows: list[Row] = []
    for case, unit, attribute, higher in (
        ("host CPU per run", "ms", "cpu_ms", False),
        ("runs/s", "runs/s", "runs_per_s", True),
        ("latency p50", "ms", "p50_ms", False),
        ("PostgreSQL CPU per run", "ms", "postgres_ms", False),
    ):
        base_samples: list[float] = getattr(base, attribute)
        if not base_samples:  # SQLite: no server of its own
            continue
        subject_samples: list[float] = getattr(subject, attribute)
        rows.append(
            Row(
                benchmark=NAME,
                case=f"{dialect}, c={concurrency}: {case}",
                baseline_label=base.label,
                subject_label=subject.label,
                baseline=Stat.of(base_samples, unit, higher_is_better=higher),
                subject=Stat.of(subject_samples, unit, higher_is_better=higher),
                higher_is_better=higher,
            )
        )
    return rows


async def run(
    revision: str, dialect: DialectName, concurrencies: Sequence[int], blocks: int, runs: int
) -> list[Row]:
    """Both servers measured side by side at each concurrency; three rows per concurrency (four on
    PostgreSQL)."""
    rows: list[Row] = []
    with worktree(revision) as tree, tempfile.TemporaryDirectory(prefix="mcphost-rev-run-") as scratch:
        folder = Path(scratch)
        async with AsyncExitStack() as stack:
            base_ws = await stack.enter_async_context(workspace(dialect))
            subject_ws = await stack.enter_async_context(workspace(dialect))
            base = await stack.enter_async_context(mcphost_server(base_ws, folder / "base", tree=tree))
            subject = await stack.enter_async_context(mcphost_server(subject_ws, folder / "subject"))
            for concurrency in concurrencies:
                sides = (
                    Side(base, short_name(revision), _database(base_ws.database_url, dialect)),
                    Side(subject, "this tree", _database(subject_ws.database_url, dialect)),
                )
                async with client(concurrency) as session:
                    for side in sides:  # warm-up: plugins started, statements prepared, caches filled
                        await _block(
                            session, Side(side.server, side.label, side.database), concurrency, runs, "warm"
                        )
                    for k in range(blocks):
                        for side in sides if k % 2 == 0 else sides[::-1]:
                            tag = f"c{concurrency}-{k}-{'base' if side is sides[0] else 'subject'}"
                            await _block(session, side, concurrency, runs, tag)
                rows.extend(_rows(dialect, concurrency, *sides))
    return rows


def _database(url: str, dialect: DialectName) -> str | None:
    return make_url(url).database if dialect == "postgres" else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.revisions",
        description="This tree's mcphost serve against another git revision's, side by side.",
    )
    parser.add_argument("revision", help="the baseline: a commit, branch or tag (e.g. HEAD~3)")
    parser.add_argument("--dialect", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument(
        "--concurrency", default="1,16", help="runs in flight, comma-separated (default 1,16)"
    )
    parser.add_argument("--blocks", type=int, default=8, help="measured blocks per side (default 8)")
    parser.add_argument("--runs", type=int, default=150, help="runs per block (default 150)")
    parser.add_argument("--output", type=Path, default=RESULTS.with_name("revisions_results.json"))
    args = parser.parse_args(argv)
    if args.dialect == "postgres" and postgres_server_url() is None:
        print(
            "revisions --dialect postgres needs MCPHOST_BENCH_POSTGRES_URL (or MCPHOST_TEST_POSTGRES_URL)",
            file=sys.stderr,
        )
        return 2
    try:
        concurrencies = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        print(
            f"revisions: --concurrency takes whole numbers, comma-separated; got {args.concurrency!r}",
            file=sys.stderr,
        )
        return 2
    load_before = load_average()
    started = time.perf_counter()
    rows = anyio.run(
        run, args.revision, args.dialect, concurrencies, args.blocks, args.runs, backend="asyncio"
    )
    publish(
        rows,
        module="bench.revisions",
        argv=argv,
        preset=f"{args.blocks} blocks of {args.runs} runs a side, ABBA; baseline {args.revision}",
        dialects=(args.dialect,),
        skipped=[],
        load_before=load_before,
        elapsed_s=time.perf_counter() - started,
        path=args.output,
        details={
            "blocks": args.blocks,
            "runs_per_block": args.runs,
            "concurrency": concurrencies,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
