"""bench/peers/soak: endurance — memory over many runs, latency over one long conversation (issue 12).

`uv run python -m bench.peers.soak [--quick | --tiny] [--part {all,memory,turns}] [--no-peer]
[--sqlite-only]`. The same servers and echo work as `bench.peers` (`_servers.py`): `mcphost serve` with
the bundled echo runner, on SQLite and, when a server is configured, PostgreSQL; LangGraph's in-memory
server with its one-node graph.

Measured per database, the two sides taking turns so that both see the same machine:
- **memory**: `runs` runs (full 10,000), each in a new conversation / thread, `concurrency` in flight,
  in blocks of `block` runs alternating mcphost, LangGraph; the RSS of each server's process tree
  (`_proctree`) after every block. Growth = RSS after the last block - RSS after the first (the first
  block is the warm-up: caches, pools, the plugin's first run). Target: < 20 MiB over 10,000 runs.
- **one long conversation**: `turns` turns (full 1,000) one after another in a single conversation
  (mcphost) / thread (LangGraph), turn by turn alternating the sides. Growth = p50 latency of the last
  tenth of the turns / p50 of the first tenth (after `TURN_WARMUP` turns) - 1. Target: < 20 %.

`--part memory` or `--part turns` measures one of the two alone (the full memory part takes about 90
minutes, the 1,000 turns about 6). Failed runs and turns are counted and their first `KEPT_ERRORS`
messages are kept, in the row of the part they failed in (`*_failed_runs` / `*_failed_turns`,
`*_first_errors`), as `bench.peers` does; they never stop the measurement.

Reported, never asserted (`tests/bench/test_soak.py` runs it at the smallest size to prove it works).
"""

from __future__ import annotations

import dataclasses
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

import aiohttp
import anyio

from bench._databases import DialectName, dialects, workspace
from bench._stats import Row, Stat, judge, percentile
from bench.peers import _command, _proctree
from bench.peers._servers import (
    ClientError,
    RunOne,
    Server,
    client,
    langgraph_server,
    langgraph_turn,
    mcphost_run,
    mcphost_server,
    peer_available,
)

NAME = "soak"
RESULTS = Path(__file__).parent / "soak-results.json"
TURN_WARMUP = 5
"""Turns of the long conversation not counted (the first run of a conversation creates it)."""
MEMORY_TARGET_MIB = 20.0
GROWTH_TARGET = 0.20
KEPT_ERRORS = 3
"""How many failure messages of each part a side keeps for its row."""

Part = Literal["all", "memory", "turns"]
"""What to measure: both parts, the memory over many runs only, or the one long conversation only."""


@dataclass(frozen=True)
class SoakSizes:
    runs: int
    """Runs of the memory measurement, per side (each in a new conversation)."""
    block: int
    """Runs per block; RSS is sampled after each block, the sides alternate block by block."""
    concurrency: int
    turns: int
    """Turns of the long conversation, per side."""


PRESETS = {
    "full": SoakSizes(runs=10_000, block=1_000, concurrency=8, turns=1_000),
    "quick": SoakSizes(runs=2_000, block=400, concurrency=8, turns=300),
    "tiny": SoakSizes(runs=40, block=20, concurrency=4, turns=30),
}


@dataclass
class SoakConfig:
    sizes: SoakSizes
    dialects: tuple[DialectName, ...]
    peer: bool = True
    part: Part = "all"
    tmp_root: Path | None = None
    skipped: list[str] = field(default_factory=list[str])


@dataclass
class _Failures:
    """Failed runs (or turns): how many, and the first `KEPT_ERRORS` messages."""

    count: int = 0
    first: list[str] = field(default_factory=list[str])

    def add(self, exc: Exception) -> None:
        self.count += 1
        if len(self.first) < KEPT_ERRORS:
            self.first.append(str(exc)[:300])

    def notes(self, key: str, what: str) -> dict[str, float | str]:
        """`{key}_failed_{what}` and, when any failed, `{key}_first_errors` (joined by ` | `)."""
        notes: dict[str, float | str] = {f"{key}_failed_{what}": float(self.count)}
        if self.first:
            notes[f"{key}_first_errors"] = " | ".join(self.first)
        return notes


@dataclass
class SoakSide:
    """One side of the soak (mcphost or the peer): its server, how it runs a turn, its memory per block."""

    label: str
    server: Server
    run_one: RunOne
    client: aiohttp.ClientSession
    new_id: Callable[[], str]
    rss_mib: list[float] = field(default_factory=list[float])
    """The tree's RSS after each block."""
    turn_ms: list[float] = field(default_factory=list[float])
    failed_runs: _Failures = field(default_factory=_Failures)
    failed_turns: _Failures = field(default_factory=_Failures)

    async def block(self, runs: int, concurrency: int) -> None:
        """`runs` runs, each in a new conversation, `concurrency` at a time; then samples the RSS."""
        left = iter(range(runs))

        async def worker() -> None:
            for _ in left:
                try:
                    await self.run_one(self.client, self.server, self.new_id())
                except ClientError as exc:
                    self.failed_runs.add(exc)

        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(worker)
        self.rss_mib.append(_proctree.rss_kib(self.server.pid) / 1024)

    async def turn(self, conversation: str) -> None:
        started = time.perf_counter()
        try:
            await self.run_one(self.client, self.server, conversation)
        except ClientError as exc:
            self.failed_turns.add(exc)
            return
        self.turn_ms.append(1000 * (time.perf_counter() - started))


async def run(cfg: SoakConfig) -> list[Row]:
    peer = cfg.peer
    if peer and (why := peer_available()) is not None:
        cfg.skipped.append(f"soak / LangGraph: {why}")
        peer = False
    elif not peer:
        cfg.skipped.append("soak / LangGraph: not requested (--no-peer)")
    rows: list[Row] = []
    for dialect in cfg.dialects:
        rows.extend(await _dialect(dialect, cfg, cfg.tmp_root, peer=peer))
    return rows


async def _dialect(dialect: DialectName, cfg: SoakConfig, root: Path | None, *, peer: bool) -> list[Row]:
    sizes = cfg.sizes
    async with AsyncExitStack() as stack:
        ws = await stack.enter_async_context(workspace(dialect, root))
        folder = ws.data_dir.parent / "servers"
        sides = [
            SoakSide(
                "mcphost serve",
                await stack.enter_async_context(mcphost_server(ws, folder)),
                mcphost_run,
                await stack.enter_async_context(client(sizes.concurrency)),
                lambda: f"soak-{uuid.uuid4().hex}",
            )
        ]
        if peer:
            sides.insert(
                0,
                SoakSide(
                    "LangGraph inmem",
                    await stack.enter_async_context(langgraph_server(folder)),
                    langgraph_turn,
                    await stack.enter_async_context(client(sizes.concurrency)),
                    lambda: str(uuid.uuid4()),
                ),
            )
        rows: list[Row] = []
        if cfg.part in ("all", "memory"):
            blocks = max(sizes.runs // sizes.block, 2)
            for i in range(blocks):
                for side in sides if i % 2 == 0 else reversed(sides):
                    await side.block(sizes.block, sizes.concurrency)
            rows.append(_memory_row(dialect, sides, sizes.block))
        if cfg.part in ("all", "turns"):
            conversations = {side.label: side.new_id() for side in sides}
            for i in range(sizes.turns + TURN_WARMUP):
                for side in sides if i % 2 == 0 else reversed(sides):
                    await side.turn(conversations[side.label])
            rows.append(thread_row(dialect, sides, sizes.turns))
        return rows


def _memory_row(dialect: DialectName, sides: list[SoakSide], block: int) -> Row:
    growth = {side.label: side.rss_mib[-1] - side.rss_mib[0] for side in sides}
    mine, theirs = sides[-1], sides[0] if len(sides) > 1 else None
    extra: dict[str, float | str] = {}
    for side in sides:
        key = "mcphost" if side is mine else "langgraph"
        extra[f"{key}_rss_mib_per_block"] = " ".join(f"{x:.1f}" for x in side.rss_mib)
        extra |= side.failed_runs.notes(key, "runs")
    ok = growth[mine.label] < MEMORY_TARGET_MIB and mine.failed_runs.count == 0
    return Row(
        benchmark=NAME,
        case=f"{dialect}: RSS growth over {block * (len(mine.rss_mib) - 1):,} runs after {block:,} to warm up",
        baseline_label=theirs.label if theirs else "—",
        subject_label=mine.label,
        baseline=None if theirs is None else Stat(growth[theirs.label], growth[theirs.label], 1, "MiB"),
        subject=Stat(growth[mine.label], growth[mine.label], 1, "MiB"),
        target=f"< {MEMORY_TARGET_MIB:.0f} MiB",
        verdict=judge(ok),
        extra=extra,
    )


def _growth(turn_ms: Sequence[float]) -> tuple[float, float, float]:
    """p50 of the first and of the last tenth of the counted turns, and the relative growth."""
    counted = list(turn_ms[TURN_WARMUP:])
    tenth = max(len(counted) // 10, 1)
    first, last = percentile(counted[:tenth], 50), percentile(counted[-tenth:], 50)
    return first, last, last / first - 1


def thread_row(dialect: DialectName, sides: list[SoakSide], turns: int) -> Row:
    mine, theirs = sides[-1], sides[0] if len(sides) > 1 else None
    extra: dict[str, float | str] = {}
    stats: dict[str, Stat] = {}
    for side in sides:
        key = "mcphost" if side is mine else "langgraph"
        first, last, growth = _growth(side.turn_ms)
        extra |= {
            f"{key}_first_tenth_p50_ms": first,
            f"{key}_last_tenth_p50_ms": last,
            f"{key}_latency_p99_ms": percentile(side.turn_ms, 99),
            **side.failed_turns.notes(key, "turns"),
        }
        stats[side.label] = Stat(100 * growth, 100 * growth, len(side.turn_ms), "%")
    ok = stats[mine.label].p50 < 100 * GROWTH_TARGET and mine.failed_turns.count == 0
    return Row(
        benchmark=NAME,
        case=f"{dialect}: latency growth over {turns:,} turns of one conversation (last tenth vs first, p50)",
        baseline_label=theirs.label if theirs else "—",
        subject_label=mine.label,
        baseline=stats[theirs.label] if theirs else None,
        subject=stats[mine.label],
        target=f"< {100 * GROWTH_TARGET:.0f} %",
        verdict=judge(ok),
        extra=extra,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = _command.parser(
        "python -m bench.peers.soak",
        "Memory over many runs and latency over one long conversation, mcphost vs LangGraph.",
        quick="2,000 runs and 300 turns per side",
        results=RESULTS,
    )
    parser.add_argument(
        "--part",
        choices=get_args(Part),
        default="all",
        help="measure both parts (default), only the memory over many runs, or only the long conversation",
    )
    args = parser.parse_args(argv)
    preset = _command.preset(args)
    cfg = SoakConfig(
        sizes=PRESETS[preset],
        dialects=tuple(dialects(args.sqlite_only)),
        peer=not args.no_peer,
        part=args.part,
    )
    return _command.measure(
        run,
        cfg,
        module="bench.peers.soak",
        argv=argv,
        preset=preset,
        output=args.output,
        details={"sizes": dataclasses.asdict(cfg.sizes), "part": cfg.part},
    )


if __name__ == "__main__":
    sys.exit(main())
