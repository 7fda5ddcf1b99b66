"""The harness subprocess lifecycle (`mcphost_runners/_harness_process.py`) with real child processes."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import anyio
import pytest

from mcphost.common.lines import TooLong
from mcphost.common.procgroup import StopTimings, descendants, group_alive, group_members
from mcphost_runners._harness_process import CLINotFoundError, open_harness_process
from tests.mcphost.common.test_procgroup import gone

FAST = StopTimings(terminate=1.0, kill=1.0)
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


async def read_all(tmp_path: Path, argv: list[str], **kwargs: int) -> list[bytes | TooLong]:
    lines: list[bytes | TooLong] = []
    async with open_harness_process(argv, cwd=tmp_path, env=ENV, timings=FAST, **kwargs) as process:
        async for line in process.lines():
            lines.append(line)
    return lines


async def test_the_child_leads_its_own_group_with_stdin_closed_and_only_the_given_env(tmp_path: Path) -> None:
    code = (
        "import os, sys; "
        "print(os.getpgrp() == os.getpid()); print(repr(sys.stdin.read())); "
        "print(sorted(os.environ)); print(os.getcwd())"
    )
    lines = await read_all(tmp_path, python(code))
    assert lines[0] == b"True"
    assert lines[1] == b"''"
    assert isinstance(lines[2], bytes)
    assert set(ast.literal_eval(lines[2].decode())) <= {"PATH", "LC_CTYPE"}
    assert lines[3] == str(tmp_path).encode()


async def test_lines_are_split_and_a_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.write('a\\n\\nb\\nlast'); sys.stdout.flush()"
    assert await read_all(tmp_path, python(code)) == [b"a", b"", b"b", b"last"]


async def test_an_overlong_line_is_skipped_not_buffered(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.write('x' * 5000 + '\\nshort\\n' + 'y' * 3000)"
    lines = await read_all(tmp_path, python(code), max_line_bytes=1000)
    assert lines == [TooLong(b"", 5000), b"short", TooLong(b"", 3000)]


async def test_the_stderr_tail_is_kept_for_failure_messages(tmp_path: Path) -> None:
    code = "import sys; [print(f'line {i}', file=sys.stderr) for i in range(5000)]; sys.exit(3)"
    async with open_harness_process(python(code), cwd=tmp_path, env=ENV, timings=FAST) as process:
        assert await process.wait() == 3
    assert process.stderr_tail.endswith("line 4999")
    assert len(process.stderr_tail) <= 16 * 1024


async def test_a_missing_executable_raises_cli_not_found(tmp_path: Path) -> None:
    with pytest.raises(CLINotFoundError, match="cannot start"):
        async with open_harness_process([str(tmp_path / "nope")], cwd=tmp_path, env=ENV):
            pass


async def test_leaving_kills_grandchildren_even_after_the_leader_exited(tmp_path: Path) -> None:
    # The leader starts a grandchild that ignores SIGTERM, prints its pid and exits at once.
    code = (
        "import subprocess, sys; "
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)'], "
        "stdout=subprocess.PIPE); child.stdout.readline(); print(child.pid, flush=True)"
    )
    with anyio.fail_after(10):
        async with open_harness_process(python(code), cwd=tmp_path, env=ENV, timings=FAST) as process:
            lines = [line async for line in process.lines()]
            assert await process.wait() == 0
            pgid = process.pgid
            assert group_alive(pgid)  # the grandchild is still there
    assert isinstance(lines[0], bytes)
    grandchild = int(lines[0])
    assert not group_alive(pgid)
    assert grandchild not in (group_members(pgid) or [])


async def test_a_cancelled_caller_still_stops_the_whole_group(tmp_path: Path) -> None:
    code = "import subprocess, sys, time; subprocess.Popen(['sleep', '60']); print('up', flush=True); time.sleep(60)"
    pgid = 0
    with anyio.fail_after(10):
        with anyio.move_on_after(0.5):
            async with open_harness_process(python(code), cwd=tmp_path, env=ENV, timings=FAST) as process:
                pgid = process.pgid
                async for _ in process.lines():
                    pass
    assert pgid
    assert not group_alive(pgid)


async def test_a_descendant_in_a_session_of_its_own_is_stopped_too(tmp_path: Path) -> None:
    # Like Codex starting an MCP server: the child leaves the group, its parent (the CLI) stays alive.
    code = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen(['sleep', '60'], start_new_session=True); "
        "print(child.pid, flush=True); time.sleep(60)"
    )
    stray = 0
    with anyio.fail_after(10):
        async with open_harness_process(python(code), cwd=tmp_path, env=ENV, timings=FAST) as process:
            async for line in process.lines():
                assert isinstance(line, bytes)
                stray = int(line)
                break
            assert stray in descendants(process.pid)
            assert stray not in (group_members(process.pgid) or [])
    assert gone(stray)
