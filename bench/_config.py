"""How big each benchmark runs: the full, `--quick` and smoke-test presets, and the run configuration.

Owns every size knob in one place, so the time bounds (`--quick` under 2 minutes, the full run under 15)
are tuned here and nowhere else. Budgets (`*_budget_s`) cap a measuring loop's wall time on a slow
machine; a loop still runs its minimum rounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench._databases import DialectName, dialects

MiB = 1024 * 1024


@dataclass(frozen=True)
class Sizes:
    # run-overhead: one sample per side per round
    overhead_runs: int
    overhead_warmup: int
    overhead_budget_s: float
    overhead_counted: int
    """Runs whose database transactions and statements are counted (each followed by a pause)."""
    # throughput: seconds per side per round at each concurrency, rounds per concurrency
    concurrencies: tuple[int, ...]
    throughput_round_s: float
    throughput_rounds: int
    memory_active_runs: int
    memory_all_dialects: bool
    """Measure memory per active run on every database (else on the first only: it barely differs)."""
    # mcp-call: calls per side per block (at most 45: a run may make bursts of 100 calls), blocks
    mcp_calls: int
    mcp_rounds: int
    # scale
    scale_small_rows: int
    scale_big_rows: int
    scale_small_artifact: int
    scale_big_artifact: int
    scale_state_rows: int
    scale_calls: int
    scale_rounds: int
    # startup
    startup_rounds: int
    # warm: measured rounds (one cold and one warm turn each), after one warm-up turn per side
    warm_rounds: int
    # models: calls per side per round and rounds (non-streamed, then time to first token), concurrent
    # streams per burst and bursts per side
    models_calls: int
    models_rounds: int
    models_streams: int
    models_stream_rounds: int
    # runtimes: runs per block and ABBA rounds of blocks (c = 1), idle seconds measured, then concurrency,
    # daemon counts, seconds per side per round and rounds of the throughput part
    runtimes_block: int
    runtimes_rounds: int
    runtimes_budget_s: float
    runtimes_idle_s: float
    runtimes_concurrency: int
    runtimes_daemons: tuple[int, ...]
    runtimes_round_s: float
    runtimes_tp_rounds: int


FULL = Sizes(
    overhead_runs=300,
    overhead_warmup=20,
    overhead_budget_s=45,
    overhead_counted=10,
    concurrencies=(1, 8, 64),
    throughput_round_s=3.0,
    throughput_rounds=3,
    memory_active_runs=256,
    memory_all_dialects=True,
    mcp_calls=40,
    mcp_rounds=6,
    scale_small_rows=1_000,
    scale_big_rows=1_000_000,
    scale_small_artifact=1 * MiB,
    scale_big_artifact=1024 * MiB,
    scale_state_rows=1_000_000,
    scale_calls=100,
    scale_rounds=10,
    startup_rounds=5,
    warm_rounds=10,
    models_calls=20,
    models_rounds=15,
    models_streams=64,
    models_stream_rounds=6,
    runtimes_block=10,
    runtimes_rounds=40,
    runtimes_budget_s=90,
    runtimes_idle_s=2.0,
    runtimes_concurrency=32,
    runtimes_daemons=(1, 2, 4),
    runtimes_round_s=3.0,
    runtimes_tp_rounds=3,
)

QUICK = Sizes(
    overhead_runs=80,
    overhead_warmup=10,
    overhead_budget_s=4,
    overhead_counted=5,
    concurrencies=(1, 8, 64),
    throughput_round_s=0.5,
    throughput_rounds=1,
    memory_active_runs=64,
    memory_all_dialects=False,
    mcp_calls=30,
    mcp_rounds=1,
    scale_small_rows=1_000,
    scale_big_rows=100_000,
    scale_small_artifact=1 * MiB,
    scale_big_artifact=100 * MiB,
    scale_state_rows=100_000,
    scale_calls=30,
    scale_rounds=3,
    startup_rounds=1,
    warm_rounds=3,
    models_calls=10,
    models_rounds=6,
    models_streams=64,
    models_stream_rounds=2,
    runtimes_block=10,
    runtimes_rounds=12,
    runtimes_budget_s=15,
    runtimes_idle_s=1.0,
    runtimes_concurrency=32,
    runtimes_daemons=(1, 2, 4),
    runtimes_round_s=1.0,
    runtimes_tp_rounds=1,
)

TINY = Sizes(
    overhead_runs=3,
    overhead_warmup=1,
    overhead_budget_s=5,
    overhead_counted=2,
    concurrencies=(1, 4),
    throughput_round_s=0.2,
    throughput_rounds=1,
    memory_active_runs=4,
    memory_all_dialects=False,
    mcp_calls=2,
    mcp_rounds=1,
    scale_small_rows=50,
    scale_big_rows=500,
    scale_small_artifact=64 * 1024,
    scale_big_artifact=256 * 1024,
    scale_state_rows=500,
    scale_calls=3,
    scale_rounds=1,
    startup_rounds=1,
    warm_rounds=1,
    models_calls=2,
    models_rounds=1,
    models_streams=4,
    models_stream_rounds=1,
    runtimes_block=2,
    runtimes_rounds=2,
    runtimes_budget_s=5,
    runtimes_idle_s=0.2,
    runtimes_concurrency=4,
    runtimes_daemons=(1, 2),
    runtimes_round_s=0.3,
    runtimes_tp_rounds=1,
)

PRESETS = {"full": FULL, "quick": QUICK, "tiny": TINY}


@dataclass(frozen=True)
class BenchConfig:
    sizes: Sizes
    preset: str = "full"
    dialects: tuple[DialectName, ...] = field(default_factory=lambda: tuple(dialects()))
    tmp_root: Path | None = None
    """Where temporary databases, blobs and data folders go (default: the system temp folder)."""
    skipped: list[str] = field(default_factory=list[str])
    """Parts a benchmark could not run here, each saying why (printed under the table)."""
