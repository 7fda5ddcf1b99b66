"""The life of one harness CLI process: spawn, read its output, and bring its whole group down.

Owns the child process of a harness run (`claude -p`, `codex exec`) and everything it starts. Does not
own what the output means (`_harness_stream.py` and the adapters) nor when to stop (the adapter decides;
this module only makes stopping certain). Modelled on the MCP SDK's stdio client.

Invariants:
- The child runs in a new session (its own process group, no controlling terminal) with stdin on
  /dev/null and exactly the environment it is given: nothing of the plugin's environment leaks in.
- Leaving `open_harness_process` stops the group inside `CancelScope(shield=True)` with every wait
  bounded: SIGTERM to the group → wait → SIGKILL to the group → wait for the leader. The group is
  signalled even when the leader already exited, so no grandchild (an MCP bridge, a shell the model
  started) outlives the run; descendants that moved to a session of their own while the leader lived
  (Codex starts its stdio MCP servers that way) are found through /proc and signalled with the group.
  That holds when the caller is cancelled, fails or simply returns.
- stdout is read as lines of at most `max_line_bytes`; a longer line is skipped and reported as an
  `OverlongLine`, never buffered whole. stderr is drained continuously (a full pipe would stall the
  CLI) and its tail is kept, bounded, for failure messages.
- A group counts as alive while it has a member that is not a zombie: orphaned children are reparented
  to a PID 1 that may never reap them, and a zombie holds nothing.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc

logger = logging.getLogger("runners.harness")

MAX_LINE_BYTES = 16 * 1024 * 1024
"""A native stream line longer than this is skipped (a tool result of many megabytes, or garbage)."""
_READ_CHUNK = 64 * 1024
_STDERR_TAIL_BYTES = 16 * 1024
_GROUP_POLL_S = 0.02


@dataclass(frozen=True, slots=True)
class ProcessTimings:
    """Bounds of the stop sequence, in seconds."""

    terminate: float = 2.0
    """For the group to disappear after SIGTERM, before SIGKILL."""
    kill: float = 2.0
    """For the group to disappear after SIGKILL."""


@dataclass(frozen=True, slots=True)
class OverlongLine:
    """Stands in for a stdout line that exceeded the limit and was skipped."""

    size: int


class CLINotFoundError(Exception):
    """The harness executable does not exist or cannot be executed."""


class HarnessProcess:
    """A running harness CLI: its stdout lines, its stderr tail, its exit status and its group."""

    def __init__(self, process: anyio.abc.Process, *, max_line_bytes: int) -> None:
        self._process = process
        self.pid = process.pid
        self.pgid = process.pid
        """The group id: the child leads a new session, so its group is its pid."""
        self._max_line = max_line_bytes
        self._stderr: deque[str] = deque()
        self._stderr_size = 0
        self.stderr_done = anyio.Event()

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    @property
    def stderr_tail(self) -> str:
        """The last lines the CLI wrote on stderr (at most 16 KiB)."""
        return "\n".join(self._stderr)

    async def lines(self) -> AsyncIterator[bytes | OverlongLine]:
        """stdout, line by line, until EOF. A final line without a newline is yielded too."""
        stream = self._process.stdout
        assert stream is not None
        buffer = bytearray()
        dropping = 0  # > 0 while skipping the rest of an over-long line; counts its size
        while True:
            try:
                chunk = await stream.receive(_READ_CHUNK)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                break
            start = 0
            while True:
                newline = chunk.find(b"\n", start)
                piece = chunk[start:] if newline < 0 else chunk[start:newline]
                if dropping:
                    dropping += len(piece)
                else:
                    buffer += piece
                    if len(buffer) > self._max_line:
                        dropping, buffer = len(buffer), bytearray()
                if newline < 0:
                    break
                if dropping:
                    yield OverlongLine(dropping)
                    dropping = 0
                else:
                    yield bytes(buffer)
                    buffer.clear()
                start = newline + 1
        if dropping:
            yield OverlongLine(dropping)
        elif buffer:
            yield bytes(buffer)

    async def wait(self) -> int:
        return await self._process.wait()

    async def pump_stderr(self) -> None:
        stream = self._process.stderr
        assert stream is not None
        pending = b""
        try:
            while True:
                try:
                    chunk = await stream.receive(_READ_CHUNK)
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    break
                *complete, pending = (pending + chunk).split(b"\n")
                for line in complete:
                    self._keep_stderr(line)
                if len(pending) > _STDERR_TAIL_BYTES:
                    self._keep_stderr(pending)
                    pending = b""
            if pending:
                self._keep_stderr(pending)
        finally:
            self.stderr_done.set()

    def _keep_stderr(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip("\r")[:_STDERR_TAIL_BYTES]
        if not line.strip():
            return
        self._stderr.append(line)
        self._stderr_size += len(line) + 1
        while self._stderr_size > _STDERR_TAIL_BYTES and len(self._stderr) > 1:
            self._stderr_size -= len(self._stderr.popleft()) + 1

    async def stop(self, timings: ProcessTimings) -> None:
        """Bring the leader, every member of its group and every descendant that left the group (a CLI
        may start its MCP servers in sessions of their own) down; bounded, never raises."""
        strays = [pid for pid in descendants(self.pid) if _group_of(pid) != self.pgid]
        if group_alive(self.pgid) or strays:
            _signal_group(self.pgid, signal.SIGTERM)
            _signal_each(strays, signal.SIGTERM)
            if not await _wait_all_gone(self.pgid, strays, timings.terminate):
                logger.warning("Harness process group %d survived SIGTERM; killing it", self.pgid)
                _signal_group(self.pgid, signal.SIGKILL)
                _signal_each(strays, signal.SIGKILL)
                if not await _wait_all_gone(self.pgid, strays, timings.kill):
                    logger.error("Harness process group %d is alive after SIGKILL", self.pgid)
        with anyio.move_on_after(timings.kill):
            await self._process.wait()


@asynccontextmanager
async def open_harness_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timings: ProcessTimings | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> AsyncGenerator[HarnessProcess]:
    """Start `argv` in its own process group; on exit the whole group is stopped (shielded, bounded).

    Raises `CLINotFoundError` when the executable cannot be started.
    """
    try:
        process = await anyio.open_process(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(cwd),
            env=dict(env),
            start_new_session=True,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        raise CLINotFoundError(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None
    child = HarnessProcess(process, max_line_bytes=max_line_bytes)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(child.pump_stderr)
            try:
                yield child
            finally:
                with anyio.CancelScope(shield=True):
                    await child.stop(timings or ProcessTimings())
                    with anyio.move_on_after(0.5):  # the last stderr lines explain a crash
                        await child.stderr_done.wait()
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True), suppress(Exception):
            await process.aclose()


# -- process groups ----------------------------------------------------------------------------------


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


def _group_of(pid: int) -> int | None:
    stat = _read_stat(pid)
    return stat.pgrp if stat is not None and stat.live else None


def group_members(pgid: int) -> list[int] | None:
    """Pids of the live (non-zombie) members of a process group, or None where /proc is unavailable."""
    processes = _processes()
    if processes is None:
        return None
    return [p.pid for p in processes if p.pgrp == pgid and p.live]


def descendants(pid: int) -> list[int]:
    """Live descendants of `pid` (children, their children, ...), whatever their group; [] without /proc."""
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


def group_alive(pgid: int) -> bool:
    """True while the group has a member that is not a zombie."""
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


def _signal_group(pgid: int, signum: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _signal_each(pids: Sequence[int], signum: int) -> None:
    for pid in pids:
        with suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _alive(pid: int) -> bool:
    stat = _read_stat(pid)
    return stat is not None and stat.live


async def _wait_all_gone(pgid: int, strays: Sequence[int], timeout: float) -> bool:
    with anyio.move_on_after(timeout):
        while group_alive(pgid) or any(_alive(pid) for pid in strays):  # noqa: ASYNC110  # no event exists
            await anyio.sleep(_GROUP_POLL_S)
        return True
    return False


async def wait_group_gone(pgid: int, timeout: float) -> bool:
    """Poll the group (no event exists for it) until it is gone or `timeout` passes."""
    with anyio.move_on_after(timeout):
        while group_alive(pgid):  # noqa: ASYNC110  # a process group has no event to wait on
            await anyio.sleep(_GROUP_POLL_S)
        return True
    return False
