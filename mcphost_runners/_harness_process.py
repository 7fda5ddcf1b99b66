"""The life of one harness CLI process: spawn, read its output, and bring its whole group down.

Owns the child process of a harness run (`claude -p`, `codex exec`) and everything it starts. Does not
own what the output means (`_harness_stream.py` and the adapters) nor when to stop (the adapter decides;
this module only makes stopping certain). Modelled on the MCP SDK's stdio client.

Invariants:
- The child runs in a new session (`mcphost.common.procgroup.spawn`) with stdin on /dev/null and exactly
  the environment it is given: nothing of the plugin's environment leaks in.
- Leaving `open_harness_process` stops the group through `procgroup.stop_group` (shielded, bounded,
  strays included), so no grandchild (an MCP bridge, a shell the model started) outlives the run. That
  holds when the caller is cancelled, fails or simply returns.
- stdout is read as lines of at most `max_line_bytes` (`mcphost.common.lines`); a longer line is skipped
  and reported as a `TooLong` (its size only), never buffered whole. stderr is drained continuously (a full pipe would stall the
  CLI) and its tail is kept, bounded, for failure messages.
"""

from __future__ import annotations

import subprocess
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc

from mcphost.common.lines import LineReader, TooLong
from mcphost.common.procgroup import StopTimings, release_process, spawn, stop_group

MAX_LINE_BYTES = 16 * 1024 * 1024
"""A native stream line longer than this is skipped (a tool result of many megabytes, or garbage)."""
_STDERR_TAIL_BYTES = 16 * 1024


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

    async def lines(self) -> AsyncIterator[bytes | TooLong]:
        """stdout, line by line, until EOF. A final line without a newline is yielded too."""
        assert self._process.stdout is not None
        reader = LineReader.from_stream(self._process.stdout, self._max_line, keep=0)
        while True:
            try:
                yield await reader.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return

    async def wait(self) -> int:
        return await self._process.wait()

    async def pump_stderr(self) -> None:
        assert self._process.stderr is not None
        reader = LineReader.from_stream(self._process.stderr, _STDERR_TAIL_BYTES, keep=_STDERR_TAIL_BYTES)
        try:
            while True:
                try:
                    line = await reader.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    break
                self._keep_stderr(line.prefix if isinstance(line, TooLong) else line)
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

    async def stop(self, timings: StopTimings) -> None:
        """Bring the leader, its group and its stray descendants down; bounded, never raises."""
        await stop_group(self._process, timings, label="Harness")


@asynccontextmanager
async def open_harness_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timings: StopTimings | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> AsyncGenerator[HarnessProcess]:
    """Start `argv` in its own process group; on exit the whole group is stopped (shielded, bounded).

    Raises `CLINotFoundError` when the executable cannot be started.
    """
    try:
        process = await spawn(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL)
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
                    await child.stop(timings or StopTimings())
                    with anyio.move_on_after(0.5):  # the last stderr lines explain a crash
                        await child.stderr_done.wait()
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await release_process(process)
