"""The fuzz suite's figures: what each suite tried on each store, and what came back.

Every generated request or call is counted here by the test that sent it (`tally(suite, store)`), and
`tests/fuzz/conftest.py` prints the table at the end of the pytest run, so
`uv run pytest tests/fuzz` (or `uv run python -m tests.fuzz.report`) shows the figures of the run it made.
Counting is in-process and per run: nothing is written to disk. Under pytest-xdist each worker hands its
figures to the controller (`dump`/`merge`, wired in `tests/conftest.py`), which prints the sum.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any


def examples(default: int) -> int:
    """Examples per generated test: `default`, or `MCPHOST_FUZZ_EXAMPLES` when set (to go further locally)."""
    raw = os.environ.get("MCPHOST_FUZZ_EXAMPLES", "").strip()
    return int(raw) if raw else default


@dataclass
class Tally:
    """What one suite sent to one store and what it saw."""

    tried: int = 0
    """Requests (or MCP calls) sent."""
    refused: int = 0
    """Answered with a refusal: HTTP 4xx, an MCP tool error, or a JSON-RPC error."""
    server_errors: int = 0
    """HTTP 5xx answers (503 while draining included: the suite never drains)."""
    internal_errors: int = 0
    """JSON-RPC -32603 answers."""
    rows_changed_by_refusals: int = 0
    """Refused requests after which a stored row differed."""
    statuses: dict[str, int] = field(default_factory=dict[str, int])
    """Answers by HTTP status, tool error code or JSON-RPC code."""

    def saw(self, outcome: str) -> None:
        self.statuses[outcome] = self.statuses.get(outcome, 0) + 1


FIGURES: dict[tuple[str, str], Tally] = {}


def tally(suite: str, store: str) -> Tally:
    """The tally of `suite` on `store` (`sqlite` or `postgres`) for this pytest run."""
    return FIGURES.setdefault((suite, store), Tally())


def store_of(database_url: str) -> str:
    return "postgres" if database_url.startswith("postgresql") else "sqlite"


def report() -> list[str]:
    """The figures as text lines, one row per suite and store."""
    if not FIGURES:
        return []
    head = f"{'suite':<10} {'store':<9} {'tried':>7} {'refused':>8} {'5xx':>5} {'-32603':>7} {'rows changed':>13}"
    lines = [head, "-" * len(head)]
    for (suite, store), t in sorted(FIGURES.items()):
        lines.append(
            f"{suite:<10} {store:<9} {t.tried:>7} {t.refused:>8} {t.server_errors:>5} {t.internal_errors:>7} "
            f"{t.rows_changed_by_refusals:>13}"
        )
    for (suite, store), t in sorted(FIGURES.items()):
        top = sorted(t.statuses.items(), key=lambda kv: -kv[1])
        lines.append(f"{suite}/{store} answers: " + ", ".join(f"{k}: {v}" for k, v in top))
    return lines


def dump() -> list[tuple[str, str, dict[str, Any]]]:
    """FIGURES as plain data, for a pytest-xdist worker to hand to the controller."""
    return [(suite, store, asdict(t)) for (suite, store), t in FIGURES.items()]


def merge(rows: list[tuple[str, str, dict[str, Any]]]) -> None:
    """Add a worker's `dump()` to this process's FIGURES."""
    for suite, store, fields in rows:
        mine, theirs = tally(suite, store), Tally(**fields)
        mine.tried += theirs.tried
        mine.refused += theirs.refused
        mine.server_errors += theirs.server_errors
        mine.internal_errors += theirs.internal_errors
        mine.rows_changed_by_refusals += theirs.rows_changed_by_refusals
        for outcome, n in theirs.statuses.items():
            mine.statuses[outcome] = mine.statuses.get(outcome, 0) + n
