"""`uv run python -m bench.peers [--quick] [--no-peer] [--sqlite-only] [--wait]`: mcphost vs LangGraph, one table.

Prints the Markdown table and the settings of both sides; writes every number to bench/peers/results.json.
LangGraph's environment is its own uv project: `uv sync --locked --directory bench/peers/langgraph` once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from bench._databases import dialects
from bench.peers import PRESETS, PeerConfig, _command, run
from bench.peers._servers import MCPHOST_SETTINGS, PEER_ENV, PEER_JOBS

RESULTS = Path(__file__).parent / "results.json"


def settings(*, wait: bool = False) -> dict[str, object]:
    """What each side ran with (also in results.json)."""
    return {
        "client": "one aiohttp session in the benchmark's process, the same for both sides, keep-alive "
        "connections for every run in flight (httpx spent ~4x its CPU per run)",
        "mcphost": {
            "server": "`mcphost serve` (uvicorn, one process), bundled echo runner as a plugin subprocess",
            "request": "POST /v1/events?wait=true, one JSON answer once the run has ended"
            if wait
            else "POST /v1/events?stream=true, read to `event: end` (the run closed)",
            "host": MCPHOST_SETTINGS,
            "database": "a fresh SQLite file (WAL, synchronous=NORMAL) or a fresh PostgreSQL database",
            "event_loop": "uvloop"
            if os.environ.get("MCPHOST_BENCH_UVLOOP", "true") != "false"
            else "asyncio",
        },
        "langgraph": {
            "server": "langgraph_api.cli.run_server (what `langgraph dev` runs): in-memory runtime, no reload",
            "request": "POST /runs/wait, stateless: a temporary thread per run, deleted once it is done (its "
            "store stays small; with a kept thread per run its queue's scans of every stored run and thread "
            "make each run cost more than the last)",
            "n_jobs_per_worker": PEER_JOBS,
            "environment": PEER_ENV,
            "loops": "one shared event loop for the API and the runs (BG_JOB_ISOLATED_LOOPS off, its default)",
            "allow_blocking": "true (the dev-only blocking-call detector is off: less work for the peer)",
            "queue": "woken on run creation instead of its 0.5 s idle poll (bench/peers/langgraph/serve.py)",
            "persistence": "its default: the in-memory store flushed to .langgraph_api/ in the background",
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = _command.parser(
        "python -m bench.peers",
        "mcphost vs LangGraph's agent server, side by side.",
        quick="smaller sizes; under 2 minutes",
        results=RESULTS,
    )
    parser.add_argument(
        "--wait",
        action="store_true",
        help="mcphost's runs as POST /v1/events?wait=true (one JSON answer, like LangGraph's /runs/wait) "
        "instead of ?stream=true",
    )
    args = parser.parse_args(argv)
    preset = _command.preset(args)
    cfg = PeerConfig(
        sizes=PRESETS[preset],
        dialects=tuple(dialects(args.sqlite_only)),
        peer=not args.no_peer,
        wait=args.wait,
    )
    return _command.measure(
        run,
        cfg,
        module="bench.peers",
        argv=argv,
        preset=preset,
        output=args.output,
        details={"settings": settings(wait=args.wait)},
    )


if __name__ == "__main__":
    sys.exit(main())
