"""mcphost benchmarks: every number is a ratio against a baseline measured in the same process run.

Run with `uv run python -m bench [NAME...] [--quick]`. Each benchmark module exposes
`async def run(cfg: BenchConfig) -> list[Row]`, measures its baseline and its subject alternately
(`_alternate.py`) and reports p50, the tail and the ratio (`_stats.py`). A part that cannot run here
(a piece of the host it measures is missing) is not an error: it is noted in `cfg.skipped` with why.
Nothing here asserts on time: targets are reported as met or missed, never enforced (tests only prove
the benchmarks run). Results and findings: `bench/README.md`.

Module map: `run_overhead`, `throughput`, `mcp_call`, `scale`, `startup`, `bridge`, `tracing`, `warm`, `models`,
`runtimes` (the benchmarks of `python -m bench`); `knowledge_quality`, `knowledge_scale` (retrieval benchmarks, run on their
own); `pg_scale` (a busy host's operations on a generated PostgreSQL database, run on its own) with
`_generate` (its generator, filling the tables inside PostgreSQL); `scaleout` (1, 2 and 4 `mcphost serve`
processes on one PostgreSQL database, the client round-robin, with the cores each part used; run on its
own); `revisions` (this tree's `mcphost serve` against another git revision's, side by side);
`_config` (sizes), `_databases` (a fresh SQLite file or PostgreSQL database per use), `_host` (the host
under benchmark), `_stdio` (the baseline stdio driver), `_hold_plugin` (a runner that holds runs open),
`_memory` (RSS per active run, in a child process), `_bulk` (fast bulk loading), `_report` (table and
results.json).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Awaitable, Callable
from typing import cast

from bench._config import BenchConfig
from bench._stats import Row

BENCHMARKS: dict[str, str] = {
    "run-overhead": "bench.run_overhead",
    "throughput": "bench.throughput",
    "mcp-call": "bench.mcp_call",
    "scale": "bench.scale",
    "startup": "bench.startup",
    "bridge": "bench.bridge",
    "tracing": "bench.tracing",
    "warm": "bench.warm",
    "models": "bench.models",
    "runtimes": "bench.runtimes",
}
"""Benchmark name → module with `run(cfg)`."""


async def run_benchmark(name: str, cfg: BenchConfig) -> list[Row]:
    """Run one benchmark by name (none, with a note in `cfg.skipped`, when its module is not here)."""
    if importlib.util.find_spec(BENCHMARKS[name]) is None:
        cfg.skipped.append(f"{name}: {BENCHMARKS[name]} is not in this checkout")
        return []
    module = importlib.import_module(BENCHMARKS[name])
    run = cast(Callable[[BenchConfig], Awaitable[list[Row]]], module.run)
    return await run(cfg)
