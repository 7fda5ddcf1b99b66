"""`bench.revisions` checks a revision out, serves it beside this tree and measures both, side by side.

Proves the baseline server runs the revision's code (its tree first on `PYTHONPATH`), that both sides
get every block, and that the worktree is gone afterwards; it never judges speed.
"""

from __future__ import annotations

import math
import subprocess

import pytest

from bench import revisions

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


def test_a_revision_git_cannot_find_is_refused_in_one_line() -> None:
    with (
        pytest.raises(SystemExit, match="cannot check out 'no-such-revision'"),
        revisions.worktree("no-such-revision"),
    ):
        pass
