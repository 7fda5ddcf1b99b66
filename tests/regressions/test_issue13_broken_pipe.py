"""Issue 13: `mcphost show ... | head` ended in a BrokenPipe traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.examples.clikit import cli_env
from tests.mcphost.test_cli import mcphost


def test_a_shell_pipe_into_head_prints_the_first_line_only(tmp_path: Path) -> None:
    """Issue 13: `mcphost show ... | head` ended in a BrokenPipe traceback."""
    assert mcphost("run", "hello", cwd=tmp_path).returncode == 0
    run_id = json.loads(mcphost("runs", "--json", cwd=tmp_path).stdout)["items"][0]["run_id"]
    line = f"{sys.executable} -m mcphost.cli show {run_id} | head -1"
    done = subprocess.run(
        ["sh", "-c", line], cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=60
    )
    assert done.stdout.startswith(run_id)
    assert done.stdout.count("\n") == 1
    assert done.stderr == ""
