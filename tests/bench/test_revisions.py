"""`bench.revisions` checks a revision out, serves it beside this tree and measures both, side by side.

Proves the baseline server runs the revision's code (its tree first on `PYTHONPATH`), that both sides
get every block, and that the worktree is gone afterwards; it never judges speed.
"""

from __future__ import annotations

import math
import subprocess

import pytest

from bench import revisions
from tests._postgres import NO_POSTGRES, POSTGRES_URL

pytestmark = pytest.mark.timeout(300)


def _worktrees() -> str | None:
    listed = subprocess.run(
        ["git", "-C", str(revisions.ROOT), "worktree", "list"], capture_output=True, text=True, check=False
    )
    return listed.stdout if listed.returncode == 0 else None


async def test_a_revision_and_this_tree_are_measured_block_by_block() -> None:
    before = _worktrees()
    if before is None:
        pytest.skip("not a git checkout")
    rows = await revisions.run("HEAD", "sqlite", [2], blocks=2, runs=4)
    assert [row.case for row in rows] == [
        "sqlite, c=2: host CPU per run",
        "sqlite, c=2: runs/s",
        "sqlite, c=2: latency p50",
    ]
    for row in rows:
        assert row.baseline is not None
        assert row.baseline.n == row.subject.n == 2
        assert math.isfinite(row.subject.p50)
        assert row.subject.p50 > 0
        assert row.baseline_label == revisions.short_name("HEAD")
    assert _worktrees() == before


@pytest.mark.postgres
async def test_on_postgresql_each_side_gets_the_cpu_of_its_own_databases_backends() -> None:
    if not POSTGRES_URL:
        pytest.skip(NO_POSTGRES)
    if _worktrees() is None:
        pytest.skip("not a git checkout")
    # 30 runs a block: over a clock tick (10 ms) of the backends' CPU, which /proc counts in ticks
    rows = await revisions.run("HEAD", "postgres", [2], blocks=2, runs=30)
    cases = {row.case: row for row in rows}
    assert list(cases) == [
        "postgres, c=2: host CPU per run",
        "postgres, c=2: runs/s",
        "postgres, c=2: latency p50",
        "postgres, c=2: PostgreSQL CPU per run",
    ]
    postgres = cases["postgres, c=2: PostgreSQL CPU per run"]
    assert postgres.baseline is not None
    assert postgres.baseline.n == postgres.subject.n == 2
    # Every run sends its statements: each side's backends spent CPU.
    assert postgres.baseline.p50 > 0
    assert postgres.subject.p50 > 0


def test_a_revision_git_cannot_find_is_refused_in_one_line() -> None:
    with (
        pytest.raises(SystemExit, match="cannot check out 'no-such-revision'"),
        revisions.worktree("no-such-revision"),
    ):
        pass
