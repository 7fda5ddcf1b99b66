"""runtimes: an echo run on a runtime daemon versus a local echo run, in one `mcphost serve`, and runs/s
with 1, 2 and 4 runtime daemons.

One real `mcphost serve` process per database, with two agents on the bundled echo runner: `local` (its
runs are child-process runs of the host, as today) and `remote` (`[agents.runtime] labels`: its runs are
queued and executed by `mcphost runtime` daemons, real processes that register with tokens added to the
database first). Every run is `POST /v1/events?wait=true` from this process over loopback HTTP, each in
its own conversation, answered once the run has ended (status `completed` checked).

Overhead (c = 1). Blocks of runs of the local and the remote agent alternate (ABBA), one daemon
connected throughout. Reported: both sides' latency p50/p99 and the difference of the p50s (target
≤ +3 ms), and CPU per run read from `/proc` after each block (once what a run leaves behind has had
`SETTLE_S` to finish, the same wait on both sides): the serve process (`host_cpu_ms_per_run`, the
second row: one sample per block; target: remote - local ≤ +1 ms at p50), the host's plugin processes,
the daemon and the daemon's plugin processes. The host's CPU while idle with the daemon connected
(heartbeats, the claim long poll) is measured before and noted per second.

Throughput. With 1, 2 and 4 daemons connected (each with `c` slots, so slots never bound it), rounds of
`c` concurrent workers posting runs for a fixed time alternate between the local and the remote agent;
samples are rounds' runs/s, notes the latencies and CPU per run of the host and the runtimes.

CPU time is the sum over a process's threads of `/proc/<pid>/task/<tid>/schedstat` (nanoseconds), or
`/proc/<pid>/stat` (clock ticks) for a block during which a thread came or went. Linux only; elsewhere
the benchmark is skipped with the reason.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx2

from bench._alternate import alternate
from bench._config import BenchConfig
from bench._databases import DialectName, workspace
from bench._host import ECHO_COMMAND, ECHO_RUNNER
from bench._stats import Row, Stat, judge, percentile
from bench.throughput import Tally, pushed
from mcphost.app import open_database
from mcphost.config import load_settings

NAME = "runtimes"
TARGET_OVERHEAD_MS = 3.0
TARGET_CPU_MS = 1.0
LABELS = {"pool": "bench"}
SETTLE_S = 0.1
"""After a block, what its runs left behind (a daemon's next claim, a run's close) finishes before CPU is read."""
REPO = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# -- CPU of processes, from /proc ----------------------------------------------------------------------


def proc_available() -> bool:
    return os.path.isdir("/proc/self/task")


def _threads(pid: int) -> tuple[frozenset[int], int]:
    """The thread ids of `pid` and the sum of their CPU time in ns (`schedstat`)."""
    tids: set[int] = set()
    total = 0
    for entry in os.scandir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{entry.name}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        tids.add(int(entry.name))
    return frozenset(tids), total


def _ticks_ns(pid: int) -> int:
    """utime + stime of `pid` (every thread, exited ones too) in ns, at clock-tick resolution."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // CLK_TCK


def children(pids: Sequence[int]) -> list[int]:
    """Every descendant of `pids` (the plugin processes a host or a daemon started)."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = list(pids)
    while todo:
        kids = parents.get(todo.pop(), [])
        found.extend(kids)
        todo.extend(kids)
    return found


@dataclass(frozen=True)
class _Reading:
    threads: frozenset[int]
    schedstat_ns: int
    ticks_ns: int


def _read(pid: int) -> _Reading | None:
    try:
        tids, ns = _threads(pid)
        return _Reading(tids, ns, _ticks_ns(pid))
    except (OSError, ValueError, IndexError):
        return None


def _spent_ns(before: _Reading | None, after: _Reading | None) -> int:
    if before is None or after is None:
        return 0
    if before.threads == after.threads:
        return after.schedstat_ns - before.schedstat_ns
    return after.ticks_ns - before.ticks_ns


GROUPS = ("host", "host_plugins", "runtimes", "runtime_plugins")


@dataclass
class CpuClock:
    """CPU time of the serve process, its plugins, the daemons and their plugins, read together."""

    host: int
    daemons: list[int] = field(default_factory=list[int])

    def pids(self) -> dict[str, list[int]]:
        return {
            "host": [self.host],
            "host_plugins": children([self.host]),
            "runtimes": list(self.daemons),
            "runtime_plugins": children(self.daemons),
        }

    def read(self) -> dict[str, dict[int, _Reading | None]]:
        return {group: {pid: _read(pid) for pid in pids} for group, pids in self.pids().items()}

    @staticmethod
    def spent(
        before: dict[str, dict[int, _Reading | None]], after: dict[str, dict[int, _Reading | None]]
    ) -> dict[str, float]:
        """Seconds of CPU per group between two readings (processes present in both)."""
        out: dict[str, float] = {}
        for group in GROUPS:
            total = 0
            for pid, reading in after[group].items():
                if pid in before[group]:
                    total += _spent_ns(before[group][pid], reading)
            out[group] = total / 1e9
        return out


@dataclass
class CpuTally:
    """CPU per group and runs of one side, over its blocks; per-block host CPU per run."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0.0))
    runs: int = 0
    host_per_run_ms: list[float] = field(default_factory=list[float])

    def add(self, spent: dict[str, float], runs: int) -> None:
        for group, value in spent.items():
            self.seconds[group] += value
        self.runs += runs
        self.host_per_run_ms.append(1000 * spent["host"] / max(runs, 1))

    def ms_per_run(self, group: str) -> float:
        return 1000 * self.seconds[group] / max(self.runs, 1)


def cpu_notes(cpu: dict[str, CpuTally]) -> dict[str, float | str]:
    """CPU ms per run of the host (both sides), the host's plugins (local) and the runtimes (remote)."""
    return {
        "host_cpu_ms_per_run_local": cpu["local"].ms_per_run("host"),
        "host_cpu_ms_per_run_remote": cpu["remote"].ms_per_run("host"),
        "host_plugin_cpu_ms_per_run_local": cpu["local"].ms_per_run("host_plugins"),
        "runtime_cpu_ms_per_run": cpu["remote"].ms_per_run("runtimes"),
        "runtime_plugin_cpu_ms_per_run": cpu["remote"].ms_per_run("runtime_plugins"),
    }


# -- the host and its runtimes -------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPHOST_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def write_config(folder: Path, database_url: str, *, max_concurrent_runs: int) -> Path:
    path = folder / "mcphost.toml"
    selector = ", ".join(f'{k} = "{v}"' for k, v in LABELS.items())
    path.write_text(
        f'[host]\ndatabase_url = "{database_url}"\ndata_dir = "{folder / "data"}"\nbundled_plugins = false\n'
        f'log_level = "warning"\nmax_concurrent_runs = {max_concurrent_runs}\n'
        f'[[plugins]]\nname = "echo"\ncommand = {json.dumps(ECHO_COMMAND)}\n'
        f'[[agents]]\nid = "local"\nrunner = "{ECHO_RUNNER}"\nmatch = {{ bot_id = "local" }}\n'
        f'[[agents]]\nid = "remote"\nrunner = "{ECHO_RUNNER}"\nmatch = {{ bot_id = "remote" }}\n'
        f"[agents.runtime]\nlabels = {{ {selector} }}\n",
        encoding="utf-8",
    )
    return path


async def add_runtimes(config: Path, names: Sequence[str]) -> dict[str, str]:
    """Register `names` in the host's database (as `mcphost runtimes add` does); their tokens."""
    settings = load_settings(config, environ={})
    async with open_database(settings) as stores:
        return {name: (await stores.runtimes.add(name, dict(LABELS)))[1] for name in names}


class _Process:
    """A child process in a session of its own (so stopping it stops its plugins), stderr to a file."""

    def __init__(self, argv: list[str], log: Path, cwd: Path, env: dict[str, str]) -> None:
        self.log = log
        with log.open("w") as err:
            self.process = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def check(self, what: str) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"{what} exited ({self.process.returncode}):\n{self.log.read_text()[-3000:]}")

    async def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                await anyio.to_thread.run_sync(partial(self.process.wait, timeout=20))
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        await anyio.to_thread.run_sync(self.process.wait)


@asynccontextmanager
async def serve(config: Path) -> AsyncGenerator[tuple[str, _Process], None]:
    """`mcphost serve` on a free loopback port; its URL and process."""
    argv = [sys.executable, "-m", "mcphost.cli", "serve", "--config", str(config), "--listen", "127.0.0.1:0"]
    server = _Process(argv, config.parent / "serve.log", config.parent, _env())
    try:
        with anyio.fail_after(120):
            while "serving on " not in (text := server.log.read_text(errors="replace")):
                server.check("mcphost serve")
                await anyio.sleep(0.05)
        yield text.split("serving on ", 1)[1].split()[0], server
    finally:
        await server.stop()


def start_daemon(config: Path, url: str, name: str, token: str, slots: int) -> _Process:
    workdir = config.parent / name
    workdir.mkdir(exist_ok=True)
    env = _env()
    env["MCPHOST_RUNTIME_TOKEN"] = token
    argv = [
        sys.executable,
        "-m",
        "mcphost.cli",
        "--log-level",
        "warning",
        "runtime",
        "--host",
        url,
        "--config",
        str(config),
        "--workdir",
        str(workdir),
        "--slots",
        str(slots),
    ]
    return _Process(argv, config.parent / f"{name}.log", workdir, env)


async def wait_alive(client: httpx2.AsyncClient, daemon: _Process, name: str) -> None:
    with anyio.fail_after(120):
        while True:
            listed = (await client.get("/v1/runtimes")).json()["runtimes"]
            if any(r["name"] == name and r["alive"] for r in listed):
                return
            daemon.check(f"runtime daemon {name}")
            await anyio.sleep(0.1)


async def post_run(client: httpx2.AsyncClient, bot: str, conversation: str) -> None:
    """One run of agent `bot`, answered once it has ended; it must have completed.

    The event has an id, so the one retry a dropped keep-alive connection gets answers the same run."""
    event = {
        "event_id": f"evt-{conversation}",
        "event_type": "message.received",
        "conversation": {"conversation_id": conversation, "bot_id": bot},
        "actor": {"actor_id": "bench-user"},
        "input": {"text": "hello"},
    }
    params = {"wait": "true", "timeout_s": "120"}
    try:
        answer = await client.post("/v1/events", params=params, json=event)
    except httpx2.TransportError:
        answer = await client.post("/v1/events", params=params, json=event)
    body = answer.json()
    if answer.status_code != 200 or body.get("status") != "completed":
        raise RuntimeError(f"{bot} run did not complete: {answer.status_code} {str(body)[:500]}")


# -- the benchmark -------------------------------------------------------------------------------------


async def run(cfg: BenchConfig) -> list[Row]:
    if not proc_available():
        cfg.skipped.append(f"{NAME}: needs Linux /proc to read the processes' CPU time")
        return []
    rows: list[Row] = []
    for dialect in cfg.dialects:
        rows.extend(await _dialect(dialect, cfg))
    return rows


async def _dialect(dialect: DialectName, cfg: BenchConfig) -> list[Row]:
    sizes = cfg.sizes
    c = sizes.runtimes_concurrency
    counts = sizes.runtimes_daemons
    names = [f"r{i + 1}" for i in range(max(counts))]
    rows: list[Row] = []
    async with workspace(dialect, cfg.tmp_root) as ws:
        folder = ws.data_dir.parent
        config = write_config(folder, ws.database_url, max_concurrent_runs=max(64, 2 * c))
        tokens = await add_runtimes(config, names)
        daemons: list[_Process] = []
        async with serve(config) as (url, server):
            # Idle connections are let go before the server's keep-alive timeout (5 s) can close them.
            limits = httpx2.Limits(
                max_connections=2 * c + 8, max_keepalive_connections=2 * c + 8, keepalive_expiry=2
            )
            async with httpx2.AsyncClient(base_url=url, timeout=180, limits=limits) as client:
                try:
                    clock = CpuClock(server.pid)
                    for n in counts:
                        while len(daemons) < n:
                            name = names[len(daemons)]
                            daemon = start_daemon(config, url, name, tokens[name], c)
                            daemons.append(daemon)
                            clock.daemons.append(daemon.pid)
                            await wait_alive(client, daemon, name)
                        if n == counts[0]:
                            rows.extend(await _overhead(dialect, cfg, client, clock))
                        rows.append(await _throughput(dialect, cfg, client, clock, n))
                finally:
                    for daemon in daemons:
                        await daemon.stop()
    return rows


async def _idle_rate(clock: CpuClock, seconds: float) -> dict[str, float]:
    """CPU ms per second of each group while nothing runs (heartbeats, the claim long polls)."""
    before, started = clock.read(), time.perf_counter()
    await anyio.sleep(seconds)
    spent = CpuClock.spent(before, clock.read())
    elapsed = time.perf_counter() - started
    return {group: 1000 * value / elapsed for group, value in spent.items()}


async def _overhead(
    dialect: DialectName, cfg: BenchConfig, client: httpx2.AsyncClient, clock: CpuClock
) -> list[Row]:
    sizes = cfg.sizes
    block = sizes.runtimes_block
    conversations = itertools.count()
    cpu = {"local": CpuTally(), "remote": CpuTally()}

    def side(bot: str) -> Any:
        async def measure() -> list[float]:
            latencies: list[float] = []
            before = clock.read()
            for _ in range(block):
                start = time.perf_counter_ns()
                await post_run(client, bot, f"{bot}-{next(conversations)}")
                latencies.append((time.perf_counter_ns() - start) / 1e6)
            await anyio.sleep(SETTLE_S)
            cpu[bot].add(CpuClock.spent(before, clock.read()), block)
            return latencies

        return measure

    await side("local")()  # both sides' first runs start processes and fill caches
    await side("remote")()
    idle = await _idle_rate(clock, sizes.runtimes_idle_s)
    cpu = {"local": CpuTally(), "remote": CpuTally()}
    samples = await alternate(
        side("local"),
        side("remote"),
        rounds=sizes.runtimes_rounds,
        warmup=1,
        budget_s=sizes.runtimes_budget_s,
        min_rounds=2,
    )
    local, remote = Stat.of(samples.baseline, "ms"), Stat.of(samples.subject, "ms")
    overhead = remote.p50 - local.p50
    host_local = Stat.of(cpu["local"].host_per_run_ms, "ms")
    host_remote = Stat.of(cpu["remote"].host_per_run_ms, "ms")
    cpu_delta = host_remote.p50 - host_local.p50
    notes: dict[str, float | str] = {
        "overhead_p50_ms": overhead,
        "overhead_p99_ms": remote.tail - local.tail,
        **cpu_notes(cpu),
        "runtime_cpu_ms_per_run_while_local": cpu["local"].ms_per_run("runtimes"),
        "host_idle_cpu_ms_per_s": idle["host"],
        "runtime_idle_cpu_ms_per_s": idle["runtimes"],
    }
    return [
        Row(
            benchmark=NAME,
            case=f"{dialect}, c=1, run latency",
            baseline_label="local echo agent",
            subject_label="echo agent on 1 runtime",
            baseline=local,
            subject=remote,
            target=f"Δp50 ≤ +{TARGET_OVERHEAD_MS:g} ms",
            verdict=judge(overhead <= TARGET_OVERHEAD_MS),
            extra=notes,
        ),
        Row(
            benchmark=NAME,
            case=f"{dialect}, c=1, host CPU per run",
            baseline_label="local echo agent",
            subject_label="echo agent on 1 runtime",
            baseline=host_local,
            subject=host_remote,
            target=f"Δp50 ≤ +{TARGET_CPU_MS:g} ms",
            verdict=judge(cpu_delta <= TARGET_CPU_MS),
            extra={"host_cpu_delta_p50_ms": cpu_delta, "blocks": float(len(cpu["local"].host_per_run_ms))},
        ),
    ]


async def _throughput(
    dialect: DialectName, cfg: BenchConfig, client: httpx2.AsyncClient, clock: CpuClock, daemons: int
) -> Row:
    sizes = cfg.sizes
    c = sizes.runtimes_concurrency
    batches = itertools.count()
    lat = {"local": Tally(), "remote": Tally()}
    cpu = {"local": CpuTally(), "remote": CpuTally()}

    def side(bot: str) -> Any:
        async def measure() -> list[float]:
            b = next(batches)

            async def one(i: int) -> None:
                await post_run(client, bot, f"{bot}-t{daemons}-{b}-{i}")

            before = clock.read()
            before_runs = lat[bot].runs
            rate = await pushed(sizes.runtimes_round_s, c, one, lat[bot])
            await anyio.sleep(SETTLE_S)
            cpu[bot].add(CpuClock.spent(before, clock.read()), lat[bot].runs - before_runs)
            return [rate]

        return measure

    await side("local")()  # warm-up: every daemon's plugin started, the host's pools filled
    await side("remote")()
    lat = {"local": Tally(), "remote": Tally()}
    cpu = {"local": CpuTally(), "remote": CpuTally()}
    samples = await alternate(
        side("local"), side("remote"), rounds=sizes.runtimes_tp_rounds, warmup=0, min_rounds=1
    )
    return Row(
        benchmark=NAME,
        case=f"{dialect}, {daemons} runtime{'s' if daemons > 1 else ''}, c={c}",
        baseline_label="local echo agent",
        subject_label=f"echo agent on {daemons} runtime{'s' if daemons > 1 else ''}",
        baseline=Stat.of(samples.baseline, "runs/s", higher_is_better=True),
        subject=Stat.of(samples.subject, "runs/s", higher_is_better=True),
        higher_is_better=True,
        extra={
            "local_latency_p50_ms": percentile(lat["local"].latencies, 50),
            "remote_latency_p50_ms": percentile(lat["remote"].latencies, 50),
            "remote_latency_p99_ms": percentile(lat["remote"].latencies, 99),
            **cpu_notes(cpu),
        },
    )
