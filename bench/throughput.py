"""throughput: completed echo runs per second at concurrency 1, 8 and 64, and memory per active run.

Throughput. Each round gives each side the same wall time with `c` workers, each run in its own
conversation (runs of one conversation are serialized by the host, by design): the subject ingests
events into the host and follows each to `run.completed`; the baseline drives the same echo plugin
directly over stdio with `c` runs in flight on one process. Runs started before the time is up are
waited for and counted. Samples are rounds' runs/s; the
notes give per-run latency at p50/p99 for both sides and the CPU time this process spent per run
(`host_cpu_ms_per_run`: the host's own work, all threads; the plugin process is not counted on either
side), which bounds throughput when the host is CPU-bound. Target: ≥ 200 runs/s on SQLite at c = 64.

Memory. In a fresh child process (`bench._memory`), so earlier benchmarks' heap does not hide or inflate
anything: after a warm-up, N runs of the hold runner are held open at once and the RSS growth of the
host process, divided by N, is the host's memory per active run (the plugin's growth is noted
separately). The baseline is the same N runs held by the direct stdio driver.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import anyio

from bench._alternate import alternate
from bench._config import BenchConfig
from bench._databases import DialectName, workspace
from bench._host import bench_host, direct_run, host_run, message
from bench._stats import Row, Stat, judge, percentile
from bench._stdio import StdioDriver

NAME = "throughput"
TARGET_RUNS_PER_S = 200.0
TARGET_CONCURRENCY = 64


@dataclass
class Tally:
    """What one side did across its measured rounds."""

    latencies: list[float] = field(default_factory=list[float])
    runs: int = 0
    cpu_s: float = 0.0

    def clear(self) -> None:
        self.latencies.clear()
        self.runs = 0
        self.cpu_s = 0.0

    def cpu_ms_per_run(self) -> float:
        return 1000 * self.cpu_s / max(self.runs, 1)


async def pushed(
    seconds: float, concurrency: int, one: Callable[[int], Awaitable[object]], tally: Tally
) -> float:
    """`concurrency` workers call `one(i)` (i = 0, 1, …) until `seconds` have passed; the runs they
    started still finish. Returns completed runs per second; adds latencies and this process's CPU
    time (every thread: the event loop and the database driver's) to `tally`."""
    counter = itertools.count()
    latencies: list[float] = []
    start, cpu_start = time.perf_counter(), time.process_time()
    deadline = start + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            i = next(counter)
            begun = time.perf_counter_ns()
            await one(i)
            latencies.append((time.perf_counter_ns() - begun) / 1e6)

    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    elapsed = time.perf_counter() - start
    tally.cpu_s += time.process_time() - cpu_start
    tally.runs += len(latencies)
    tally.latencies.extend(latencies)
    return len(latencies) / elapsed


async def run(cfg: BenchConfig) -> list[Row]:
    rows: list[Row] = []
    sizes = cfg.sizes
    for dialect in cfg.dialects:
        max_c = max(sizes.concurrencies)
        async with (
            workspace(dialect, cfg.tmp_root) as ws,
            bench_host(ws, max_concurrent_runs=max(64, max_c)) as host,
            StdioDriver.open() as driver,
        ):
            batch = itertools.count()
            for concurrency in sizes.concurrencies:
                hosted, direct = Tally(), Tally()

                async def subject(
                    c: int = concurrency, t: Tally = hosted, batches: Iterator[int] = batch
                ) -> list[float]:
                    b = next(batches)

                    async def one(i: int) -> None:
                        await host_run(host, message("hello", f"b{b}-r{i}"))

                    return [await pushed(sizes.throughput_round_s, c, one, t)]

                async def baseline(
                    c: int = concurrency, t: Tally = direct, batches: Iterator[int] = batch
                ) -> list[float]:
                    b = next(batches)

                    async def one(i: int) -> None:
                        await direct_run(driver, "hello", f"b{b}-r{i}")

                    return [await pushed(sizes.throughput_round_s, c, one, t)]

                if concurrency == sizes.concurrencies[0]:  # warm up once per host
                    await baseline()
                    await subject()
                    hosted.clear()
                    direct.clear()
                samples = await alternate(
                    baseline, subject, rounds=sizes.throughput_rounds, warmup=0, min_rounds=1
                )
                subject_stat = Stat.of(samples.subject, "runs/s", higher_is_better=True)
                judged = dialect == "sqlite" and concurrency == TARGET_CONCURRENCY
                rows.append(
                    Row(
                        benchmark=NAME,
                        case=f"{dialect}, c={concurrency}",
                        baseline_label="echo over stdio, no host",
                        subject_label="via host",
                        baseline=Stat.of(samples.baseline, "runs/s", higher_is_better=True),
                        subject=subject_stat,
                        higher_is_better=True,
                        target=f"≥ {TARGET_RUNS_PER_S:g} runs/s" if judged else None,
                        verdict=judge(subject_stat.p50 >= TARGET_RUNS_PER_S) if judged else "n/a",
                        extra={
                            "host_latency_p50_ms": percentile(hosted.latencies, 50),
                            "host_latency_p99_ms": percentile(hosted.latencies, 99),
                            "direct_latency_p50_ms": percentile(direct.latencies, 50),
                            "direct_latency_p99_ms": percentile(direct.latencies, 99),
                            "host_cpu_ms_per_run": hosted.cpu_ms_per_run(),
                            "direct_cpu_ms_per_run": direct.cpu_ms_per_run(),
                        },
                    )
                )
        if sizes.memory_all_dialects or dialect == cfg.dialects[0]:
            rows.append(await _memory_row(dialect, cfg))
    return rows


async def _memory_row(dialect: DialectName, cfg: BenchConfig) -> Row:
    n = cfg.sizes.memory_active_runs
    async with workspace(dialect, cfg.tmp_root) as ws:
        direct = await _measure_memory("direct", n, ws.database_url, str(ws.data_dir))
        hosted = await _measure_memory("host", n, ws.database_url, str(ws.data_dir))
    return Row(
        benchmark=NAME,
        case=f"{dialect}, memory, {n} active runs",
        baseline_label="direct driver, per run",
        subject_label="host process, per run",
        baseline=Stat(p50=direct["per_run_kib"], tail=direct["per_run_kib"], n=1, unit="KiB"),
        subject=Stat(p50=hosted["per_run_kib"], tail=hosted["per_run_kib"], n=1, unit="KiB"),
        extra={
            "host_rss_before_mib": hosted["rss_before_kib"] / 1024,
            "plugin_per_run_kib_via_host": hosted["plugin_per_run_kib"],
            "plugin_per_run_kib_direct": direct["plugin_per_run_kib"],
        },
    )


async def _measure_memory(side: str, n: int, database_url: str, data_dir: str) -> dict[str, float]:
    argv = [sys.executable, "-m", "bench._memory", side, str(n), database_url, data_dir]
    result = await anyio.run_process(argv, check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"bench._memory {side} failed (exit {result.returncode}): {result.stderr.decode()[-2000:]}"
        )
    return json.loads(result.stdout.decode().strip().splitlines()[-1])
