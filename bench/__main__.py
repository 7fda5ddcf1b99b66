"""`uv run python -m bench [NAME...] [--quick]`: run benchmarks, print the table, write bench/results.json."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import anyio

from bench import BENCHMARKS, run_benchmark
from bench._config import PRESETS, BenchConfig
from bench._databases import dialects
from bench._report import RESULTS, load_average, publish
from bench._stats import Row


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="mcphost benchmarks: each measures a baseline and the subject alternately in this process.",
    )
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"benchmarks to run (default: all): {', '.join(BENCHMARKS)}"
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes; finishes in under 2 minutes")
    parser.add_argument(
        "--tiny", action="store_true", help="smoke-test sizes: proves it runs, measures nothing"
    )
    parser.add_argument(
        "--sqlite-only", action="store_true", help="skip PostgreSQL even when a server is configured"
    )
    parser.add_argument(
        "--output", type=Path, default=RESULTS, help=f"JSON results file (default: {RESULTS})"
    )
    return parser


async def _main(names: Sequence[str], cfg: BenchConfig) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    skipped = cfg.skipped
    for name in names:
        started = time.perf_counter()
        print(f"== {name} …", file=sys.stderr, flush=True)
        got = await run_benchmark(name, cfg)
        rows.extend(got)
        print(f"   {len(got)} rows in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return rows, skipped


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    names: list[str] = args.names or list(BENCHMARKS)
    preset = "tiny" if args.tiny else "quick" if args.quick else "full"
    cfg = BenchConfig(sizes=PRESETS[preset], preset=preset, dialects=tuple(dialects(args.sqlite_only)))
    load_before = load_average()
    started = time.perf_counter()
    rows, skipped = anyio.run(_main, names, cfg, backend="asyncio")
    elapsed = time.perf_counter() - started
    publish(
        rows,
        module="bench",
        argv=argv,
        preset=preset,
        dialects=cfg.dialects,
        skipped=skipped,
        load_before=load_before,
        elapsed_s=elapsed,
        path=args.output,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
