"""scaleout: 1, 2 and 4 `mcphost serve` processes on one PostgreSQL database, the client round-robin.

`uv run python -m bench.scaleout [--quick | --tiny] [--processes 1,2,4] [--concurrency 64]` (needs
`MCPHOST_BENCH_POSTGRES_URL` or `MCPHOST_TEST_POSTGRES_URL`). Every process is started up front, each
with its own echo plugin (`bench.peers._servers.mcphost_server`, the peer benchmark's settings), on one
fresh database; a measuring round drives the first N of them with `concurrency` workers, run i going to
process i mod N (each run a new conversation, `POST /v1/events?stream=true` to its end, the same aiohttp
client as `bench.peers`). The configurations take turns round by round, forward then backward (ABBA), so
the machine's drift and the database's growth hit each alike; idle processes cost nothing meanwhile.

Per configuration, over its rounds (median of the rounds), from `/proc`:
- runs/s in all, per process, and per core used;
- the cores used: CPU seconds per wall second of the serve processes (each one's tree: the server and
  its plugin), of the PostgreSQL backends serving the benchmark's database (found by their process title,
  which names the database), of the client (this process), and their sum;
- the machine's busy cores (`/proc/stat`) and what of that was neither of the above (other work on a
  shared machine, PostgreSQL's shared background processes);
- what limits it, said plainly (`limit`): the cores when the machine was busy on nearly all of them,
  else the database when its backends took a core's worth, else the client, else the processes' own
  serialisation (latency-bound).

Reported, never asserted: there is no target on a machine of this size (`tests/bench/test_scaleout.py`
runs it at its smallest size to prove it works).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import anyio
from sqlalchemy.engine import make_url

from bench._databases import postgres_server_url, workspace
from bench._report import load_average, publish
from bench._stats import Row, Stat, fmt, percentile
from bench.peers import _proctree
from bench.peers._servers import ClientError, Server, client, mcphost_run, mcphost_server
from bench.startup import scratch_folder
from bench.throughput import Tally, pushed

NAME = "scaleout"
RESULTS = Path(__file__).with_name("scaleout_results.json")
WARMUP_RUNS = 5
MACHINE_BUSY = 0.9
"""Busy share of the machine's cores above which the cores are what limits."""
BACKENDS_BUSY = 0.8
"""Cores' worth of database backends above which the database is what limits."""
CLIENT_BUSY = 0.8
"""Cores' worth of client CPU above which the client is what limits."""


@dataclass(frozen=True)
class ScaleoutSizes:
    processes: tuple[int, ...]
    concurrency: int
    round_s: float
    rounds: int
    """Measured rounds per configuration (each round visits every configuration once)."""


PRESETS = {
    "full": ScaleoutSizes((1, 2, 4), concurrency=64, round_s=5.0, rounds=4),
    "quick": ScaleoutSizes((1, 2, 4), concurrency=64, round_s=2.0, rounds=2),
    "tiny": ScaleoutSizes((1, 2), concurrency=4, round_s=0.3, rounds=1),
}


def _ticks(fields: list[str]) -> int:
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of /proc/PID/stat)


def backend_cpu(database: str) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend connected to `database` (by its process title,
    `postgres: USER DATABASE HOST(PORT) STATE`), for a server on this machine."""
    found: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if not title.startswith("postgres: ") or f" {database} " not in title:
                continue
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        found[int(entry.name)] = _ticks(raw[raw.rindex(")") + 2 :].split()) * _proctree.TICK_S
    return found


def machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine so far (all cores; `/proc/stat` minus idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) * _proctree.TICK_S


@dataclass
class _Reading:
    wall: float
    serve: list[float]
    backends: dict[int, float]
    client: float
    machine: float


@dataclass
class Config:
    """N processes, and what their rounds measured."""

    servers: list[Server]
    rates: list[float] = field(default_factory=list[float])
    cores: dict[str, list[float]] = field(default_factory=dict[str, list[float]])
    tally: Tally = field(default_factory=Tally)
    failed: int = 0
    errors: list[str] = field(default_factory=list[str])

    @property
    def n(self) -> int:
        return len(self.servers)

    def _read(self, database: str) -> _Reading:
        return _Reading(
            time.perf_counter(),
            [_proctree.cpu_s(s.pid) for s in self.servers],
            backend_cpu(database),
            time.process_time(),
            machine_busy_s(),
        )

    async def round(
        self, session: aiohttp.ClientSession, database: str, concurrency: int, seconds: float, batch: str
    ) -> None:
        servers = itertools.cycle(self.servers)
        failed = 0

        async def one(i: int) -> None:
            nonlocal failed
            try:
                await mcphost_run(session, next(servers), f"{batch}-r{i}")
            except ClientError as exc:
                failed += 1
                self.errors.append(str(exc)[:300])

        runs_before = self.tally.runs
        before = self._read(database)
        rate = await pushed(seconds, concurrency, one, self.tally)
        after = self._read(database)
        runs = self.tally.runs - runs_before
        self.failed += failed
        self.rates.append(rate * (runs - failed) / max(runs, 1))
        wall = after.wall - before.wall
        serve = sum(after.serve) - sum(before.serve)
        backends = sum(v - before.backends.get(pid, 0.0) for pid, v in after.backends.items())
        client_s = after.client - before.client
        machine = after.machine - before.machine
        for key, seconds_used in (
            ("serve", serve),
            ("postgres", backends),
            ("client", client_s),
            ("ours", serve + backends + client_s),
            ("machine", machine),
            ("others", max(machine - serve - backends - client_s, 0.0)),
        ):
            self.cores.setdefault(key, []).append(seconds_used / wall)

    def median(self, key: str) -> float:
        return percentile(self.cores[key], 50)


def limit(config: Config, cores: int) -> str:
    """What limits `config`'s runs/s, in words with its numbers."""
    busy, pg, cl = config.median("machine"), config.median("postgres"), config.median("client")
    ours, serve = config.median("ours"), config.median("serve")
    numbers = (
        f"machine busy {fmt(busy)} of {cores} cores; serve processes {fmt(serve)}, PostgreSQL backends "
        f"{fmt(pg)}, client {fmt(cl)} cores; other work {fmt(config.median('others'))}"
    )
    if busy >= MACHINE_BUSY * cores:
        return f"the cores: {numbers}"
    if pg >= BACKENDS_BUSY:
        return f"the database: {numbers}"
    if cl >= CLIENT_BUSY:
        return f"the client: {numbers}"
    return f"neither cores nor database nor client is saturated (latency-bound, {fmt(ours)} cores used): {numbers}"


async def run(sizes: ScaleoutSizes, tmp_root: Path | None = None) -> list[Row]:
    cores = os.cpu_count() or 1
    async with AsyncExitStack() as stack:
        folder = await stack.enter_async_context(scratch_folder(tmp_root, "mcphost-bench-scaleout-"))
        ws = await stack.enter_async_context(workspace("postgres", tmp_root))
        database = make_url(ws.database_url).database or ""
        servers = [
            await stack.enter_async_context(mcphost_server(ws, folder)) for _ in range(max(sizes.processes))
        ]
        session = await stack.enter_async_context(client(sizes.concurrency))
        for i in range(WARMUP_RUNS):
            for server in servers:
                await mcphost_run(session, server, f"warm-{i}-{server.pid}")
        configs = [Config(servers[:n]) for n in sizes.processes]
        batches = itertools.count()
        for r in range(sizes.rounds):
            for config in configs if r % 2 == 0 else reversed(configs):
                await config.round(session, database, sizes.concurrency, sizes.round_s, f"so{next(batches)}")
    return _rows(configs, sizes, cores)


def _rows(configs: list[Config], sizes: ScaleoutSizes, cores: int) -> list[Row]:
    one = Stat.of(configs[0].rates, "runs/s", higher_is_better=True)
    rows: list[Row] = []
    for config in configs:
        rate = Stat.of(config.rates, "runs/s", higher_is_better=True)
        ours = config.median("ours")
        extra: dict[str, float | str] = {
            "runs_per_s_per_process": rate.p50 / config.n,
            "runs_per_s_per_core_used": rate.p50 / ours if ours else 0.0,
            "cores_used": ours,
            "serve_cores": config.median("serve"),
            "postgres_backend_cores": config.median("postgres"),
            "client_cores": config.median("client"),
            "machine_busy_cores": config.median("machine"),
            "other_work_cores": config.median("others"),
            "latency_p50_ms": percentile(config.tally.latencies, 50),
            "failed_runs": float(config.failed),
            "limit": limit(config, cores),
        }
        if config.errors:
            extra["first_error"] = config.errors[0]
        rows.append(
            Row(
                benchmark=NAME,
                case=f"postgres, c={sizes.concurrency}: {config.n} process{'es' if config.n > 1 else ''}",
                baseline_label="1 process" if config.n > 1 else "—",
                subject_label=f"{config.n} round-robin on {cores} cores",
                baseline=one if config.n > 1 else None,
                subject=rate,
                higher_is_better=True,
                extra=extra,
            )
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scaleout",
        description="N `mcphost serve` processes on one PostgreSQL database, the client round-robin.",
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="2 s rounds, 2 per configuration")
    size.add_argument(
        "--tiny", action="store_true", help="smoke-test sizes: proves it runs, measures nothing"
    )
    parser.add_argument("--processes", default=None, help="comma-separated process counts (default 1,2,4)")
    parser.add_argument("--concurrency", type=int, default=None, help="runs in flight (default 64)")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"JSON results (default: {RESULTS})")
    args = parser.parse_args(argv)
    if postgres_server_url() is None:
        print("scaleout needs MCPHOST_BENCH_POSTGRES_URL (or MCPHOST_TEST_POSTGRES_URL)", file=sys.stderr)
        return 2
    preset = "tiny" if args.tiny else "quick" if args.quick else "full"
    sizes = PRESETS[preset]
    if args.processes:
        try:
            counts = tuple(sorted({int(x) for x in args.processes.split(",")}))
        except ValueError:
            counts = ()
        if not counts or counts[0] < 1:
            parser.error("--processes takes positive counts, e.g. 1,2,4")
        sizes = ScaleoutSizes(counts, sizes.concurrency, sizes.round_s, sizes.rounds)
    if args.concurrency is not None:
        if args.concurrency < 1:
            parser.error("--concurrency must be at least 1")
        sizes = ScaleoutSizes(sizes.processes, args.concurrency, sizes.round_s, sizes.rounds)
    load_before = load_average()
    started = time.perf_counter()
    rows = anyio.run(run, sizes, backend="asyncio")
    publish(
        rows,
        module="bench.scaleout",
        argv=argv,
        preset=preset,
        dialects=("postgres",),
        skipped=[],
        load_before=load_before,
        elapsed_s=time.perf_counter() - started,
        path=args.output,
        details={"sizes": sizes.__dict__, "cores": os.cpu_count()},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
