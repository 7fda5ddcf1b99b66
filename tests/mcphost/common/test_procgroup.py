"""`mcphost.common.procgroup` with real child processes: zombie-aware liveness and the bounded group stop."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from mcphost.common import procgroup
from mcphost.common.procgroup import (
    StopTimings,
    descendants,
    group_alive,
    group_members,
    release_process,
    spawn,
    stop_group,
    strays_of,
    wait_exit,
)

FAST = StopTimings(terminate=1.0, kill=1.0)
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
STRAY = (
    "import subprocess, time; "
    "child = subprocess.Popen(['sleep', '60'], start_new_session=True); "
    "print(child.pid, flush=True); time.sleep({leader_sleep})"
)

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")


def gone(pid: int) -> bool:
    """The process no longer exists, or is a zombie nobody reaped (it holds nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


async def first_line(process: anyio.abc.Process) -> bytes:
    assert process.stdout is not None
    data = b""
    while not data.endswith(b"\n"):
        data += await process.stdout.receive()
    return data


def test_a_group_whose_only_member_is_a_zombie_is_not_alive() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    try:
        while not gone(child.pid):  # exited, not reaped: a zombie that killpg(pgid, 0) still finds
            os.sched_yield()
        os.killpg(child.pid, 0)
        assert not group_alive(child.pid)
        assert group_members(child.pid) == []
    finally:
        child.wait()


def test_group_members_finds_this_process_and_nothing_for_a_dead_group() -> None:
    assert os.getpid() in (group_members(os.getpgrp()) or [])
    assert group_members(2**22 + 12345) == []


async def test_stop_group_brings_down_the_leader_and_a_descendant_in_a_session_of_its_own() -> None:
    with anyio.fail_after(10):
        process = await spawn([sys.executable, "-c", STRAY.format(leader_sleep=60)], env=ENV)
        try:
            stray = int(await first_line(process))
            assert strays_of(process.pid) == [stray]
            await stop_group(process, FAST, label="test")
        finally:
            await release_process(process)
    assert process.returncode is not None
    assert not group_alive(process.pid)
    assert gone(stray)


async def test_strays_looked_up_while_the_leader_lived_are_stopped_after_it_exited() -> None:
    with anyio.fail_after(10):
        process = await spawn([sys.executable, "-c", STRAY.format(leader_sleep=0.5)], env=ENV)
        try:
            stray = int(await first_line(process))
            strays = strays_of(process.pid)
            assert await wait_exit(process, 5)
            assert strays_of(process.pid) == []  # orphaned: no longer found from the leader
            await stop_group(process, FAST, label="test", strays=strays)
        finally:
            await release_process(process)
    assert gone(stray)


async def test_a_cancelled_caller_still_finishes_the_stop() -> None:
    with anyio.fail_after(10):
        process = await spawn(
            [sys.executable, "-c", "import time; print(1, flush=True); time.sleep(60)"], env=ENV
        )
        try:
            await first_line(process)
            with anyio.CancelScope() as scope:
                scope.cancel()
                await stop_group(process, FAST, label="test")
        finally:
            await release_process(process)
    assert process.returncode is not None
    assert not group_alive(process.pid)


def test_descendants_from_the_children_files_are_those_a_scan_of_every_process_finds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A child, a grandchild in the child's group and one in a session of its own, all alive.
    tree = (
        "import subprocess, sys, time; "
        "a = subprocess.Popen(['sleep', '60']); "
        "b = subprocess.Popen(['sleep', '60'], start_new_session=True); "
        "print(a.pid, b.pid, flush=True); time.sleep(60)"
    )
    leader = subprocess.Popen([sys.executable, "-c", tree], stdout=subprocess.PIPE, start_new_session=True)
    grandchildren: set[int] = set()
    try:
        assert leader.stdout is not None
        grandchildren = {int(pid) for pid in leader.stdout.readline().split()}
        fast = descendants(leader.pid)

        def no_children_files(pid: int) -> None:  # a kernel without children files
            del pid

        monkeypatch.setattr(procgroup, "_children", no_children_files)
        scanned = descendants(leader.pid)
        assert set(fast) == set(scanned) == grandchildren
        assert descendants(2**22 + 12345) == []
    finally:
        os.killpg(leader.pid, 9)  # the leader and the grandchild in its group
        for pid in grandchildren:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        leader.communicate()


def test_a_group_with_no_process_left_is_not_alive_and_one_with_a_live_member_is() -> None:
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert group_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not group_alive(child.pid)  # reaped: killpg(pgid, 0) finds nothing
