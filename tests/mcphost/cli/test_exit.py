"""The console script ends the process without the interpreter's teardown (`cli.exit_now`), losing no
output: buffered standard streams and logging handlers are flushed, the exit code is the command's, and
under a tracer (coverage, debuggers) or profiler the interpreter exits as usual so they write their data.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.examples.clikit import cli_env

_PROGRAM = """
import atexit, logging, sys
from mcphost.cli import exit_now
atexit.register(lambda: sys.stdout.write("atexit ran\\n"))
{setup}
logging.basicConfig(stream=sys.stderr, format="%(message)s")
logging.getLogger("probe").warning("logged last")
sys.stdout.write("buffered, no newline")
exit_now(3)
"""


def _run(setup: str) -> subprocess.CompletedProcess[str]:
    code = _PROGRAM.format(setup=setup)
    return subprocess.run(
        [sys.executable, "-c", code], env=cli_env(), capture_output=True, text=True, timeout=60, check=False
    )


def test_the_exit_flushes_what_is_buffered_and_skips_the_teardown() -> None:
    done = _run("")
    assert done.returncode == 3
    assert done.stdout == "buffered, no newline"  # flushed; no atexit handler ran (no teardown)
    assert "logged last" in done.stderr


def test_under_a_tracer_the_interpreter_exits_as_usual() -> None:
    done = _run("sys.settrace(lambda *args: None)")
    assert done.returncode == 3
    assert done.stdout == "buffered, no newlineatexit ran\n"  # the tracer's own exit hooks run too
    assert "logged last" in done.stderr


def _mcphost(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcphost.cli", *args],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_command_run_by_the_console_script_keeps_its_output_and_exit_code(tmp_path: Path) -> None:
    (tmp_path / "mcphost.toml").write_text(
        '[[agents]]\nid = "echo"\nrunner = "plugin:mcphost/echo/default"\n'
    )
    done = _mcphost("run", "hello there", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]  # every line written, each whole
    assert lines[-1]["run"]["status"] == "completed"
    assert [line["type"] for line in lines[:-1]][-1] == "run.completed"
    missing = _mcphost("show", "run_nope", "--json", cwd=tmp_path)
    assert missing.returncode == 1
    assert "run_nope" in missing.stderr


def test_output_to_a_full_disk_is_one_line_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "mcphost.toml").write_text(
        '[[agents]]\nid = "echo"\nrunner = "plugin:mcphost/echo/default"\n'
    )
    with Path("/dev/full").open("w") as full:  # every write: ENOSPC
        done = subprocess.run(
            [sys.executable, "-m", "mcphost.cli", "run", "hello"],
            cwd=tmp_path,
            env=cli_env(),
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "mcphost: error: No space left on device: free some space and run the command again"
    )
