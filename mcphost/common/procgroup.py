"""A child in a session of its own: spawn it, tell whether its group lives, and bring the group down.

Owns the process-group mechanics shared by plugin processes (`mcphost.plugins.process`) and harness CLIs
(`mcphost_runners._harness_process`). Does not own what a process says (its pipes are the caller's) nor when to
stop it, nor any graceful step before the signals (a `shutdown` request, a closed stdin): callers do
those first, then call `stop_group`.

Invariants:
- `spawn` starts the child in a new session (its own process group, no controlling terminal), shielded:
  a cancellation during the spawn would leave a child nobody stops or reaps.
- `stop_group` runs inside `CancelScope(shield=True)` with every wait bounded: SIGTERM to the group and to
  the strays → wait → SIGKILL to both → wait → wait for the leader. The group is signalled even when the
  leader already exited, so no grandchild outlives its parent; descendants that moved to a session of
  their own while the leader lived (Codex starts its stdio MCP servers that way) are found through /proc
  and signalled with the group. It never raises.
- A group counts as alive while it has a member that is not a zombie: orphaned children are reparented
  to a PID 1 that may never reap them, and a zombie holds nothing. Without /proc, `killpg(pgid, 0)`
  decides (a zombie then counts as alive).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import anyio
import anyio.abc

logger = logging.getLogger("mcphost.common.procgroup")

_GROUP_POLL_S = 0.02


@dataclass(frozen=True, slots=True)
class StopTimings:
    """Bounds of `stop_group`, in seconds."""

    terminate: float = 2.0
    """For the group (and the strays) to disappear after SIGTERM, before SIGKILL."""
    kill: float = 2.0
    """For the group to disappear after SIGKILL, and again for the leader to be reaped."""


async def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str] | None = None,
    stdin: int | None = subprocess.PIPE,
    stderr: int | IO[bytes] = subprocess.PIPE,
) -> anyio.abc.Process:
    """Start `argv` as the leader of a new session with exactly `env`; stdout is a pipe, stderr too
    unless the caller gives a file (a long-lived child whose stderr nobody drains).

    Raises what `anyio.open_process` raises (`OSError` for a missing or unrunnable executable).
    """
    process: anyio.abc.Process | None = None
    with anyio.CancelScope(shield=True):
        process = await anyio.open_process(
            list(argv),
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
        )
    assert process is not None  # nothing cancels a shielded scope, so the spawn completed
    return process


async def stop_group(
    process: anyio.abc.Process, timings: StopTimings, *, label: str, strays: Sequence[int] | None = None
) -> None:
    """Bring the leader, every member of its group and every stray descendant down; bounded, never raises.

    `process` must lead its group (see `spawn`). `strays` are descendants outside the group; by default
    they are looked up now, which finds them only while the leader lives (an orphan is reparented), so a
    caller that waits for the leader first looks them up with `strays_of` before. `label` names the
    process in the log ("Plugin 'x'", "Harness").
    """
    pgid = process.pid
    with anyio.CancelScope(shield=True):
        others = list(strays) if strays is not None else strays_of(pgid)
        if group_alive(pgid) or any(_alive(pid) for pid in others):
            _signal_all(pgid, others, signal.SIGTERM)
            if not await _wait_all_gone(pgid, others, timings.terminate):
                logger.warning("%s: process group %d survived SIGTERM; killing it", label, pgid)
                _signal_all(pgid, others, signal.SIGKILL)
                if not await _wait_all_gone(pgid, others, timings.kill):
                    logger.error("%s: process group %d is alive after SIGKILL; abandoning it", label, pgid)
        await wait_exit(process, timings.kill)


async def wait_exit(process: anyio.abc.Process, timeout: float) -> bool:
    """Wait at most `timeout` for the leader to exit (and be reaped); True when it did."""
    with anyio.move_on_after(timeout):
        await process.wait()
    return process.returncode is not None


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


async def release_process(process: anyio.abc.Process) -> None:
    """Close our ends of the pipes and the asyncio transport, which would otherwise warn at GC."""
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await stream.aclose()
    # Nothing public exposes the transport (the `mcp` SDK's stdio client does the same walk).
    transport = getattr(process, "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with suppress(PermissionError):
            close()


# -- liveness ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ProcStat:
    pid: int
    state: str
    ppid: int
    pgrp: int

    @property
    def live(self) -> bool:
        return self.state not in ("Z", "X")


def _processes() -> list[_ProcStat] | None:
    """Every process's state, parent and group from /proc, or None where /proc is unavailable."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    found: list[_ProcStat] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        stat = _read_stat(int(entry.name))
        if stat is not None:
            found.append(stat)
    return found


def _read_stat(pid: int) -> _ProcStat | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command (which may contain spaces and parentheses): state, ppid, pgrp, ...
    fields = text.rsplit(")", 1)[-1].split()
    if len(fields) < 3:
        return None
    return _ProcStat(pid, fields[0], int(fields[1]), int(fields[2]))


def group_members(pgid: int) -> list[int] | None:
    """Pids of the live (non-zombie) members of a process group, or None where /proc is unavailable."""
    processes = _processes()
    if processes is None:
        return None
    return [p.pid for p in processes if p.pgrp == pgid and p.live]


def _children(pid: int) -> list[int] | None:
    """`pid`'s children from `/proc/<pid>/task/*/children` (a few small reads where scanning every
    process's stat takes ~0.1 s on a busy machine), or None where the kernel does not offer them."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    found: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as file:
                found.extend(int(child) for child in file.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None  # no `children` files in this kernel
        except (OSError, ValueError):
            continue
    return found


def descendants(pid: int) -> list[int]:
    """Live descendants of `pid` (children, their children, ...), whatever their group; [] without /proc."""
    if not _alive(pid):
        return []  # an exiting process's children are handed to another parent before it is a zombie
    direct = _children(pid)
    if direct is not None:
        found: list[int] = []
        todo = [child for child in direct if _alive(child)]
        while todo:
            child = todo.pop()
            found.append(child)
            todo.extend(grandchild for grandchild in _children(child) or [] if _alive(grandchild))
        return found
    children: dict[int, list[int]] = {}
    for process in _processes() or []:
        if process.live:
            children.setdefault(process.ppid, []).append(process.pid)
    found: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, []))
    return found


def group_rss_mb(pgid: int) -> float:
    """Resident memory of the live members of a process group (MiB), from /proc; 0 where unreadable."""
    total = 0
    for pid in group_members(pgid) or [pgid]:
        try:
            for row in Path(f"/proc/{pid}/status").read_text().splitlines():
                if row.startswith("VmRSS:"):
                    total += int(row.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1024


def strays_of(pgid: int) -> list[int]:
    """Live descendants of the group's leader that left its group (a session of their own)."""
    return [pid for pid in descendants(pgid) if _group_of(pid) != pgid]


def group_alive(pgid: int) -> bool:
    """True while the group has a member that is not a zombie."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False  # no process at all in the group, zombies included: no /proc scan needed
    except PermissionError:
        pass
    members = group_members(pgid)
    if members is not None:
        return bool(members)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # EPERM never proves the group is gone
    return True


def _group_of(pid: int) -> int | None:
    stat = _read_stat(pid)
    return stat.pgrp if stat is not None and stat.live else None


def _alive(pid: int) -> bool:
    stat = _read_stat(pid)
    return stat is not None and stat.live


def _signal_all(pgid: int, strays: Sequence[int], signum: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)
    for pid in strays:
        with suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


async def _wait_all_gone(pgid: int, strays: Sequence[int], timeout: float) -> bool:
    with anyio.move_on_after(timeout):
        while group_alive(pgid) or any(_alive(pid) for pid in strays):  # noqa: ASYNC110  # no event exists
            await anyio.sleep(_GROUP_POLL_S)
        return True
    return False
