"""`uv run python -m bench [NAME...] [--quick]`: run benchmarks, print the table, write bench/results.json."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
from sqlalchemy.engine import make_url

from bench import BENCHMARKS, run_benchmark
from bench._config import PRESETS, BenchConfig
from bench._databases import dialects, postgres_server_url
from bench._report import RESULTS, load_average, machine, table, write_json
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
    command = "uv run python -m bench " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    server = postgres_server_url()
    if "postgres" in cfg.dialects and server is not None:
        shown = make_url(server).render_as_string(hide_password=True)
        command = f"MCPHOST_BENCH_POSTGRES_URL={shlex.quote(shown)} {command}"
    info = machine()
    print(table(rows))
    for note in skipped:
        print(f"\nskipped {note}")
    print(
        f"\n{info['nproc']} CPUs ({info['cpu']}), {info['memory_gib']} GiB, Python {info['python']}; "
        f"load average {load_before} before, {load_average()} after; "
        f"databases: {', '.join(cfg.dialects)}; {elapsed:.0f} s; `{command.strip()}`"
    )
    write_json(
        rows,
        command=command.strip(),
        preset=preset,
        elapsed_s=elapsed,
        skipped=skipped,
        load_before=load_before,
        path=args.output,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
