"""`bench.pg_scale` generates both databases and measures every operation (PostgreSQL, smallest size).

Proves the benchmark runs and that the generated rows are what the stores read (a drift fails a read or
deletes nothing); it never judges speed.
"""

from __future__ import annotations

import math
from typing import cast

import pytest

from bench import pg_scale
from bench._generate import SMALL_SCALE

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]


async def test_pg_scale_measures_every_operation_and_the_retention_pass(shared_postgres: str) -> None:
    del shared_postgres  # only for its skip without PostgreSQL: the benchmark makes its own databases
    rows, details = await pg_scale.run(SMALL_SCALE * 2, calls=2)
    cases = [row.case for row in rows]
    assert cases[: len(pg_scale.OPERATIONS)] == [label for label, _ in pg_scale.OPERATIONS]
    assert [c for c in cases if c.startswith("retention")] == [
        f"retention {kind} ({n} rows a pass)" for kind, n in pg_scale.RETENTION_ROWS.items()
    ]
    for row in rows:
        assert row.baseline is not None
        assert math.isfinite(row.subject.p50), row
        assert row.subject.p50 > 0, row
        assert row.verdict in ("met", "missed")
    sizes = details["sizes_big"]
    assert isinstance(sizes, dict)
    assert set(cast(dict[str, object], sizes)) == {"runs", "audit", "transcript", "events", "conversations"}
