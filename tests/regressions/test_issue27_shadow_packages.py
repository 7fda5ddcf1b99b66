"""Issue 27, item 2: a `runners/` (or `bridge/`) package in the working directory broke the bundled
runners."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.shadow_packages import write_shadow_packages
from tests.mcphost.test_cli import mcphost


def test_the_quickstart_runs_in_a_project_holding_packages_named_like_mcphosts(tmp_path: Path) -> None:
    """Issue 27, item 2: a folder named `runners/` in the working directory broke every bundled runner
    (plugins started as `python -m runners.memo` imported it), and the error blamed `[[plugins]]`.

    The README's first command, the installed `mcphost` script, with a fresh data dir, run in a project
    with its own `runners/`, `bridge/`, `mcphost_runners/`... packages whose every module raises: the
    bundled plugins never import them, so memo answers."""
    project = write_shadow_packages(tmp_path / "project")
    data_dir = tmp_path / "data"
    done = mcphost(
        "run", "hello", cwd=project, timeout=120, env={"MCPHOST_DATA_DIR": str(data_dir)}, script=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Turn 1. I heard “hello”.")
    assert "completed" in done.stderr
    assert "is not part of mcphost" not in done.stderr
    assert (data_dir / "mcphost.db").is_file()
    assert not (project / ".mcphost").exists()
