"""The command line both peer benchmarks share (`python -m bench.peers`, `python -m bench.peers.soak`):
their common options, the preset those pick, and measuring then publishing the rows.

Does not own what either benchmark measures, its sizes, or options of its own (the soak's `--part`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

import anyio

from bench._databases import DialectName
from bench._report import load_average, publish
from bench._stats import Row


class Measured(Protocol):
    """What a benchmark's config tells the report: the databases measured and what was skipped."""

    dialects: tuple[DialectName, ...]
    skipped: list[str]


ConfigT = TypeVar("ConfigT", bound=Measured)


def parser(prog: str, description: str, *, quick: str, results: Path) -> argparse.ArgumentParser:
    """A parser with the shared options: `--quick` (described by `quick`) or `--tiny`, `--no-peer`,
    `--sqlite-only` and `--output` (default `results`)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help=quick)
    size.add_argument(
        "--tiny", action="store_true", help="smoke-test sizes: proves it runs, measures nothing"
    )
    parser.add_argument("--no-peer", action="store_true", help="measure the mcphost side only")
    parser.add_argument("--sqlite-only", action="store_true", help="skip PostgreSQL even when configured")
    parser.add_argument("--output", type=Path, default=results, help=f"JSON results (default: {results})")
    return parser


def preset(args: argparse.Namespace) -> str:
    """The size preset the parsed options name: `tiny`, `quick` or `full`."""
    return "tiny" if args.tiny else "quick" if args.quick else "full"


def measure(
    run: Callable[[ConfigT], Awaitable[list[Row]]],
    cfg: ConfigT,
    *,
    module: str,
    argv: Sequence[str] | None,
    preset: str,
    output: Path,
    details: Mapping[str, object],
) -> int:
    """Run the benchmark, print its table and write its JSON to `output`; the command's exit status."""
    load_before = load_average()
    started = time.perf_counter()
    rows = anyio.run(run, cfg, backend="asyncio")
    publish(
        rows,
        module=module,
        argv=argv,
        preset=preset,
        dialects=cfg.dialects,
        skipped=cfg.skipped,
        load_before=load_before,
        elapsed_s=time.perf_counter() - started,
        path=output,
        details=details,
    )
    return 0
