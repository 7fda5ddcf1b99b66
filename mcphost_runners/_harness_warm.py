"""The warm pool of a harness plugin: one long-lived CLI process per warm session, reused across turns.

Owns the warm processes (`WarmProcess`: a CLI in its long-lived mode, its stdin, its stdout lines, its
group and the CLI's session it holds), which session each serves, and when each is stopped: idle past `idle_timeout_s`, past
`max_sessions` or the memory cap `max_rss_mb` (least recently used idle first), on a config change it
cannot follow (`warm_fingerprint`), on any turn that did not end cleanly, and when the plugin stops; and
`pump_turn`, one turn on a warm process (write the turn's opening line, map what comes back up to the
terminal event). The line protocol is the adapter's: Claude Code's stream-json (one user message in,
events out) or a JSON-RPC conversation (Codex's app-server: the mapper writes its next requests and its
answers to the server's requests through `WarmProcess.send` as the answers come in). Does not own what a
turn's messages are or what its events mean (the adapters), nor its terminal
result (`harness.py`), nor the session endpoint (the host).

Invariants:
- A process serves one session and one turn at a time (`busy`); a busy process is never evicted. The
  caller holds the session's lock (`SessionLocks`), so two turns never race for one entry.
- A process whose turn did not end with its terminal event (crash, wedge, cancellation, deadline) is
  stopped, never reused: its next turn starts a new one.
- A fingerprint differing from the process's (model, tools, prompt, grant shape, folder) stops it and
  starts a new one: never a silent mismatch.
- Stopping is `procgroup.stop_group` (shielded, bounded, strays included). `running()` owns the sweeper
  and stops every warm process on exit.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import subprocess
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import anyio
import anyio.abc
import anyio.to_thread

from mcphost.common.lines import LineReader, TooLong
from mcphost.common.procgroup import (
    StopTimings,
    group_rss_mb,
    release_process,
    spawn,
    stop_group,
)
from mcphost.protocol import AgentRunContext, JSONObject
from mcphost_runners._harness_config import HarnessConfig
from mcphost_runners._harness_stream import Diagnostics, StreamMapper, pump_native_stream

logger = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 1.0
MAX_EXITED_KEPT = 1024
"""How many sessions whose process died while idle are remembered until their next turn."""
MAX_LINE_BYTES = 16 * 1024 * 1024


class WarmProcessGoneError(Exception):
    """The session's warm process died between turns: it was removed, and this turn runs cold."""


@dataclass(frozen=True)
class PoolLimits:
    """The host's `[host] warm_*` settings, as the latest run's context carried them."""

    max_sessions: int = 8
    idle_timeout_s: float = 600.0
    max_rss_mb: float = 2048


class WarmProcess:
    """One warm CLI process: stdin for turns, stdout as lines, stderr into a file, its own group."""

    def __init__(
        self, key: str, fingerprint: str, process: anyio.abc.Process, stderr: IO[bytes], secrets: list[Path]
    ) -> None:
        self.key = key
        self.fingerprint = fingerprint
        self.pid = process.pid
        self.turns = 0
        self.busy = False
        self.last_used = time.monotonic()
        self.session_id: str | None = None
        """The CLI's own session this process holds, for adapters that name it in every turn (Codex's
        thread, learned on its first turn); None until then."""
        self._process = process
        self._stderr = stderr
        self._secrets = secrets
        assert process.stdout is not None
        self._reader = LineReader.from_stream(process.stdout, MAX_LINE_BYTES, keep=0)

    @property
    def alive(self) -> bool:
        # The CLI itself (the group's leader) must be live: an exited one stays a zombie, its returncode
        # unset, until the event loop's child watcher reaps it. Without /proc only the returncode tells.
        if self._process.returncode is not None:
            return False
        return _leader_live(self.pid)

    async def send(self, line: bytes) -> None:
        """Write one line to the CLI's stdin. Raises `anyio.BrokenResourceError` when it is gone."""
        stdin = self._process.stdin
        if stdin is None:
            raise anyio.BrokenResourceError
        await stdin.send(line)

    async def lines(self) -> AsyncIterator[bytes | TooLong]:
        """stdout lines, until EOF (the caller stops iterating at its turn's end)."""
        while True:
            try:
                yield await self._reader.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return

    def forget_secrets(self) -> None:
        """The CLI has read its config: the files holding the session token go."""
        for path in self._secrets:
            path.unlink(missing_ok=True)
        self._secrets = []

    def rss_mb(self) -> float:
        """Resident memory of the process group (MiB); 0 where it cannot be read."""
        return group_rss_mb(self.pid)

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    def stderr_tail(self, limit: int = 4000) -> str:
        """The last `limit` bytes the CLI wrote on stderr (its file), for failure messages."""
        try:
            with open(self._stderr.name, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(f.tell() - limit, 0))
                return f.read().decode("utf-8", "replace")
        except (OSError, TypeError):
            return ""

    async def stop(self, timings: StopTimings) -> None:
        with anyio.CancelScope(shield=True):
            if self._process.stdin is not None:
                with anyio.move_on_after(0.1):
                    await self._process.stdin.aclose()
            await stop_group(self._process, timings, label="Warm harness")
            await release_process(self._process)
            self._stderr.close()
            self.forget_secrets()


_NOT_RUNNING = frozenset({"Z", "X", "x"})
"""`/proc/<pid>/stat` states of a process that has exited: a zombie, or dead while its parent reaps it."""


def _leader_live(pid: int) -> bool:
    """Whether `pid` runs and has not exited, from its own `/proc/<pid>/stat`: one read, not a scan of
    every process (`procgroup.group_members`), because it is on every warm turn's path and a scan costs
    tens of milliseconds on a busy machine. True where /proc is unavailable. A process being reaped at
    that moment reads as dead (`X`) or its read fails (`ESRCH`): it has exited."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return not Path("/proc/self").exists()
    except ProcessLookupError:
        return False
    except OSError:
        return True
    state = text.rsplit(")", 1)[-1].split()[:1]
    return not state or state[0] not in _NOT_RUNNING


async def start_warm(
    key: str,
    fingerprint: str,
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stderr_path: Path,
    secrets: list[Path],
) -> WarmProcess:
    """Start a warm CLI with a stdin pipe. Raises `OSError` when it cannot start."""
    stderr_file = stderr_path.open("ab")
    try:
        process = await spawn(argv, env=env, cwd=cwd, stdin=subprocess.PIPE, stderr=stderr_file)
    except BaseException:
        stderr_file.close()
        raise
    return WarmProcess(key, fingerprint, process, stderr_file, secrets)


WARM_START_S = 10.0
"""A warm process that shows nothing this long after a turn was written to it is taken for wedged."""


async def pump_turn(
    process: WarmProcess,
    message: bytes,
    mapper: StreamMapper,
    diagnostics: Diagnostics,
    *,
    start_s: float | None,
) -> bool:
    """Write the turn and map its events up to its terminal one. False when the process showed nothing
    (gone, or wedged for `start_s`): nothing of the turn was emitted then. A process started for this
    turn gets no such window (it connects its MCP servers first); the run's deadline bounds it."""
    lines = process.lines()
    first: bytes | TooLong | None = None
    with anyio.move_on_after(start_s if start_s is not None else math.inf):
        try:
            await process.send(message)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return False
        first = await anext(aiter(lines), None)
    if first is None:
        return False

    async def turn() -> AsyncIterator[bytes | TooLong]:
        assert first is not None
        yield first
        if mapper.state.finished or mapper.state.stop:
            return
        async for line in lines:
            yield line
            if mapper.state.finished or mapper.state.stop:
                return

    await pump_native_stream(turn(), mapper, diagnostics)
    return True


def warm_fingerprint(ctx: AgentRunContext, config: HarnessConfig, cwd: Path, cli: Path) -> str:
    """What a warm process cannot follow once started: its config (model, tools, prompt, environment),
    the grant's shape (the hashes of the tools and resources it lists), its folder and its endpoint."""
    mcp = ctx.context.mcp
    parts: JSONObject = {
        "config": config.model_dump(mode="json"),
        "static_refs": {name: ref.sha256 for name, ref in sorted(ctx.runtime.static_refs.items())},
        "cwd": str(cwd),
        "cli": str(cli),
        "streaming": ctx.delivery.supports_streaming,
        "endpoint": mcp.session.url if mcp is not None and mcp.session is not None else None,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


@dataclass
class WarmPool:
    """The warm processes of this plugin process, by session key."""

    timings: StopTimings = field(default_factory=StopTimings)
    limits: PoolLimits = field(default_factory=PoolLimits)
    _processes: dict[str, WarmProcess] = field(default_factory=dict[str, WarmProcess])
    _exited: dict[str, int] = field(default_factory=dict[str, int])
    """Sessions whose idle process the sweeper found dead, with its pid: their next turn is told and runs
    cold, like a turn that finds the process dead itself (the turn after starts a new one)."""

    def __len__(self) -> int:
        return len(self._processes)

    def get(self, key: str) -> WarmProcess | None:
        return self._processes.get(key)

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[WarmPool]:
        """Sweep idle processes in the background; on exit stop every warm process."""
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._sweeper)
                try:
                    yield self
                finally:
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                for key in list(self._processes):
                    await self.discard(key, "the plugin is stopping")

    async def _sweeper(self) -> None:
        while True:
            await anyio.sleep(SWEEP_INTERVAL_S)
            await self.sweep()

    async def acquire(
        self, key: str, fingerprint: str, start: Callable[[], Awaitable[WarmProcess]]
    ) -> tuple[WarmProcess, bool]:
        """The session's warm process, marked busy, and whether it was started now. One whose
        fingerprint differs is replaced; one that died is removed and `WarmProcessGoneError` raised (the
        turn runs cold, the next one starts a new process); making room stops least recently used idle
        ones."""
        current = self._processes.get(key)
        if current is not None and current.fingerprint != fingerprint:
            await self.discard(key, "its configuration changed (model, tools, prompt, grant or folder)")
            current = None
        elif current is not None and not current.alive:
            await self.discard(key, "it exited")
            raise WarmProcessGoneError(f"the warm process {current.pid} of session {key} exited")
        elif current is None and key in self._exited:
            pid = self._exited.pop(key)
            raise WarmProcessGoneError(f"the warm process {pid} of session {key} exited")
        if current is None:
            await self.sweep(room_for=1)
            current = await start()
            self._processes[key] = current
            fresh = True
        else:
            fresh = False
        current.busy = True
        return current, fresh

    def release(self, process: WarmProcess) -> None:
        """The turn ended cleanly: the process waits for the session's next turn."""
        process.busy = False
        process.turns += 1
        process.last_used = time.monotonic()

    async def discard(self, key: str, why: str) -> None:
        process = self._processes.pop(key, None)
        if process is not None:
            logger.info("stopping the warm harness process %d of session %s: %s", process.pid, key, why)
            await process.stop(self.timings)

    async def sweep(self, room_for: int = 0) -> None:
        """Stop idle processes past the idle timeout, then least recently used idle ones while the pool
        holds more than `max_sessions - room_for` processes or more than `max_rss_mb` of memory."""
        now = time.monotonic()
        limits = self.limits
        for key, process in list(self._processes.items()):
            if not process.busy and now - process.last_used >= limits.idle_timeout_s:
                await self.discard(key, f"idle for {limits.idle_timeout_s:g} s")
            elif not process.busy and not process.alive:
                # Told before stopping it: a turn that comes while it is being stopped (no longer in
                # the pool) must learn it died, not start a new process as if there had been none.
                self._exited[key] = process.pid
                while len(self._exited) > MAX_EXITED_KEPT:  # sessions that never came back
                    del self._exited[next(iter(self._exited))]
                await self.discard(key, "it exited")
        idle = sorted((p for p in self._processes.values() if not p.busy), key=lambda p: p.last_used)
        while idle and len(self._processes) > max(limits.max_sessions - room_for, 0):
            oldest = idle.pop(0)
            if self._idle(oldest):
                await self.discard(oldest.key, f"the pool holds more than {limits.max_sessions} sessions")
        if not idle:
            return  # memory only matters when an idle process could be stopped
        # Reading the groups' memory scans /proc once per process: off the event loop, which meanwhile
        # carries the turns of busy processes (a turn may take an idle one meanwhile: `_idle` rechecks).
        pids = [p.pid for p in self._processes.values()]
        used = await anyio.to_thread.run_sync(lambda: {pid: group_rss_mb(pid) for pid in pids})
        total = sum(used.values())
        while idle and total > limits.max_rss_mb:
            oldest = idle.pop(0)
            if self._idle(oldest):
                await self.discard(oldest.key, f"the pool uses {total:.0f} MiB, over {limits.max_rss_mb} MiB")
                total -= used.get(oldest.pid, 0.0)

    def _idle(self, process: WarmProcess) -> bool:
        """Still in the pool and not taken by a turn (checked again after every wait of a sweep)."""
        return not process.busy and self._processes.get(process.key) is process

    def pids(self) -> dict[str, int]:
        return {key: process.pid for key, process in self._processes.items()}
