"""The plugin side of the stdio protocol (PROTOCOL §8): `serve()` and the `_PluginServer` behind it.

Owns reading host requests from stdin, answering `initialize` with the manifests, running each
`runner/run` in its own task with its own `RunAPI`, sending results as `runner/result` notifications,
cancelling on `runner/cancel`, and exiting on `shutdown` or stdin EOF. Does not own the runner's
manifest (`_runner`) nor the numbering of results (`_output`). Re-exported by `mcphost_runners.sdk`; the rules
it keeps are listed in that module's docstring. It logs as `mcphost_runners.sdk`, the name plugin authors see.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import logging
import os
import stat
import sys
import threading
from contextlib import AsyncExitStack
from importlib import metadata

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
from pydantic import ValidationError

from mcphost.common import gcstart
from mcphost.common.excgroups import sole_leaf
from mcphost.common.lines import LineReader, TooLong
from mcphost.protocol import (
    MAX_LINE_BYTES,
    METHOD_CANCEL,
    METHOD_INITIALIZE,
    METHOD_RUN,
    METHOD_SHUTDOWN,
    AgentRunContext,
    AgentRunResult,
    CancelParams,
    JSONObject,
    JSONValue,
    RunParams,
    is_json_object,
)
from mcphost_runners._output import RunOutput, result_line
from mcphost_runners._runapi import CONNECTION_MODULES, RunAPI, RunAPIError
from mcphost_runners._runner import AgentRunner

logger = logging.getLogger("mcphost_runners.sdk")


_SHUTDOWN_GRACE = 5.0
"""How long `shutdown` and stdin EOF wait for cancelled runs to report before the plugin exits."""
_CORK_BYTES = 1 << 16
"""Queued bytes past which a line is written by its sender rather than by the flusher, which then lets
the loop run (`_write`)."""


def installed_version(distribution: str = "mcphost") -> str:
    """The installed version of `distribution`, or `0.0.0` when it is not installed (a bare checkout)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "0.0.0"


def serve(*runners: AgentRunner, author: str, plugin: str, version: str | None = None) -> None:
    """Serve `runners` as plugin `author/plugin` over stdio until `shutdown` or stdin EOF.

    `version` defaults to the installed mcphost distribution's (right for the bundled runners); a plugin
    shipped on its own passes its own, e.g. `installed_version("my-plugin")`.
    """
    server = _PluginServer(runners, author=author, plugin=plugin, version=version or installed_version())
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
        )
        for chatty in ("httpx2", "httpcore", "mcp"):  # a line per MCP request would drown the host's log
            logging.getLogger(chatty).setLevel(logging.WARNING)
    proto_in, proto_out = _claim_stdio()
    gcstart.collect_less()  # a run leaves cycles (tasks, futures, cancel scopes) only the collector frees
    anyio.run(server.serve, proto_in, proto_out, backend="asyncio", backend_options=_loop_options())


def _warm(modules: tuple[str, ...]) -> None:
    """Import `modules` (on a background thread, while the plugin waits for `initialize` and its first
    run: a run that needs one meanwhile waits on the import lock for the same import), then move the heap the imports
    built into the collector's permanent generation (`gc.freeze`): later collections, and the exit the
    host waits for, do not traverse it again. A failed import is the first run's to report."""
    try:
        for name in modules:
            importlib.import_module(name)
    except Exception:  # the run that needs the module meets the same error, worded
        return
    gc.freeze()


def _loop_options() -> dict[str, bool]:
    """uvloop when it is installed (mcphost's `speed` extra) and `MCPHOST_UVLOOP` is not false, as for
    `mcphost serve`: a plugin's loop wakes for every host message and every result it writes."""
    if os.environ.get("MCPHOST_UVLOOP", "").strip().lower() in ("0", "false", "no", "off"):
        return {}
    return {"use_uvloop": True} if importlib.util.find_spec("uvloop") is not None else {}


def _claim_stdio() -> tuple[int, int]:
    """Keep the protocol pipes on private descriptors; fd 0 becomes /dev/null and fd 1 stderr."""
    sys.stdout.flush()
    proto_in, proto_out = os.dup(0), os.dup(1)  # dup'ed descriptors are not inherited by children
    mode = os.fstat(proto_out).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):  # a pipe, or the socket pair libuv (uvloop) makes
        # Results are written without a worker thread (`_write_all`). The pipe's write end is this
        # process's alone once fd 1 points at stderr, so non-blocking mode changes nobody else's
        # writes (a terminal's would: a plugin started by hand keeps blocking writes on a thread).
        os.set_blocking(proto_out, False)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return proto_in, proto_out


class _ActiveRun:
    __slots__ = ("done", "out", "reason", "scope")

    def __init__(self, out: RunOutput) -> None:
        self.out = out
        self.scope = anyio.CancelScope()
        self.reason = "cancelled"
        self.done = anyio.Event()


class _PluginServer:
    """The plugin side of the stdio protocol for a set of runners."""

    def __init__(self, runners: tuple[AgentRunner, ...], *, author: str, plugin: str, version: str) -> None:
        names = [runner.name for runner in runners]
        if not runners or len(set(names)) != len(names):
            raise ValueError(f"serve() needs runners with unique names; got {names!r}")
        self._manifests = [runner.manifest(author=author, plugin=plugin) for runner in runners]
        self._runners = {runner.name: runner for runner in runners}
        self._info = {"author": author, "name": plugin, "version": version}
        self._runs: dict[str, _ActiveRun] = {}
        # Lines are queued and written by `_flush`: once the task that queued them lets the loop run
        # (`_flusher`), every line queued by then in one write, so a runner's results sent back to back
        # (its message, state and `run.completed`, then the answer) reach the host in one read, one
        # wake-up and one batch (one transaction) there instead of one per line.
        self._queued: list[bytes] = []
        self._queued_bytes = 0
        self._ready = anyio.Event()
        self._write_lock = anyio.Lock(fast_acquire=True)
        self._out_fd = -1
        self._out_broken = False

    async def serve(self, in_fd: int, out_fd: int) -> None:
        self._out_fd = out_fd
        if any(runner.calls_run_api for runner in self._runners.values()):
            threading.Thread(target=_warm, args=(CONNECTION_MODULES,), daemon=True).start()
        # The runners' lifespans (a harness's warm pool runs a task group of its own) are entered before,
        # and left after, the task group of the runs: a task group entered inside another must be left
        # first, or anyio refuses to leave the outer one ("exit a cancel scope that isn't the current
        # task's") and a normal shutdown ends in a traceback.
        async with AsyncExitStack() as lifespans:
            for runner in self._runners.values():
                await lifespans.enter_async_context(runner.lifespan())
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._flusher)
                    await self._serve_lines(in_fd, tg)
                    await self._wind_down()
                    tg.cancel_scope.cancel()
            finally:
                await self._flush()  # what was queued last (the `shutdown` answer): before the plugin exits

    async def _serve_lines(self, in_fd: int, tg: anyio.abc.TaskGroup) -> None:
        reader = LineReader.from_fd(in_fd, MAX_LINE_BYTES, keep=0)
        while True:
            try:
                line = await reader.receive()
            except anyio.EndOfStream:
                return
            if isinstance(line, TooLong):
                logger.error("The host sent a line of %d bytes, over %d; skipped.", line.size, MAX_LINE_BYTES)
                continue
            if await self._dispatch(line, tg):
                return

    async def _dispatch(self, line: bytes, tg: anyio.abc.TaskGroup) -> bool:
        """Handle one line from the host; True when the plugin should exit."""
        if not line.strip():
            return False
        try:
            message: object = json.loads(line)
        except ValueError:
            logger.error("The host sent a line that is not JSON: %r", line[:200])
            return False
        if not is_json_object(message):
            logger.error("The host sent a JSON value that is not an object: %r", line[:200])
            return False
        method, request_id = message.get("method"), message.get("id")
        params: object = message.get("params") or {}
        if method == METHOD_INITIALIZE and request_id is not None:
            runners = [m.model_dump(mode="json") for m in self._manifests]
            await self._answer(request_id, {"plugin": self._info, "runners": runners})
        elif method == METHOD_RUN and request_id is not None:
            await self._start_run(request_id, params, tg)
        elif method == METHOD_CANCEL:
            try:
                cancel = CancelParams.model_validate(params)
            except ValidationError as exc:
                logger.error("Invalid runner/cancel params: %s", exc)
                return False
            active = self._runs.get(cancel.run_id)
            if active is not None:
                active.reason = cancel.reason
                active.scope.cancel()
        elif method == METHOD_SHUTDOWN and request_id is not None:
            await self._wind_down()
            await self._answer(request_id, {})
            return True
        elif request_id is not None and isinstance(method, str):
            await self._write(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "error": {"code": -32601, "message": f"Method not found: {method}"},
                }
            )
        else:
            logger.warning("Ignored a message from the host: %r", line[:200])
        return False

    async def _start_run(self, request_id: JSONValue, params: JSONValue, tg: anyio.abc.TaskGroup) -> None:
        try:
            run = RunParams.model_validate(params)
        except ValidationError as exc:
            await self._error(request_id, -32602, f"Invalid runner/run params: {exc}")
            return
        runner = self._runners.get(run.runner)
        if runner is None:
            known = ", ".join(sorted(self._runners))
            await self._error(request_id, -32602, f"Unknown runner {run.runner!r}; this plugin has: {known}")
            return
        if run.context.run_id in self._runs:
            await self._error(request_id, -32602, f"Run {run.context.run_id!r} is already active")
            return
        runtime = run.context.runtime
        api = RunAPI(run.context.context.mcp, traceparent=runtime.traceparent, tracestate=runtime.tracestate)
        active = _ActiveRun(
            RunOutput(run.context.run_id, self._send_result, api=api, projection=run.projection)
        )
        self._runs[run.context.run_id] = active
        tg.start_soon(self._run, request_id, runner, run.context, active)

    async def _run(
        self, request_id: JSONValue, runner: AgentRunner, ctx: AgentRunContext, active: _ActiveRun
    ) -> None:
        out = active.out
        try:
            try:
                async with out.api:  # the run's MCP connection ends with the run
                    with active.scope:
                        await runner.run(ctx, out)
            except RunAPIError as exc:  # a facts call the runner did not handle: report its code
                logger.warning("Runner %r failed in run %r: %s", runner.name, ctx.run_id, exc)
                if not out.ended:
                    details: JSONObject = {**exc.details, "tool": exc.tool} if exc.tool else exc.details
                    await out.failed(exc.code, exc.message, exc.retryable, details)
            except Exception as exc:
                logger.exception("Runner %r failed in run %r", runner.name, ctx.run_id)
                if not out.ended:
                    await out.failed("runner.error", _describe(exc))
            else:
                if not out.ended and active.scope.cancel_called:
                    await out.failed("cancelled", f"Run cancelled: {active.reason}")
                elif not out.ended:
                    await out.completed()
            await self._answer(request_id, {"status": out.status or "failed"})
        finally:
            del self._runs[ctx.run_id]
            active.done.set()

    async def _wind_down(self) -> None:
        """Cancel every run and give them a bounded moment to report it."""
        runs = list(self._runs.values())
        for active in runs:
            active.reason = "the plugin is shutting down"
            active.scope.cancel()
        with anyio.move_on_after(_SHUTDOWN_GRACE):
            for active in runs:
                await active.done.wait()

    async def _send_result(self, result: AgentRunResult) -> None:
        await self._queue(result_line(result))  # ValueError for what the host cannot store, sent nowhere

    async def _answer(self, request_id: JSONValue, result: JSONObject) -> None:
        await self._write({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def _error(self, request_id: JSONValue, code: int, message: str) -> None:
        await self._write({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})

    async def _write(self, message: JSONObject) -> None:
        await self._queue((json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n").encode())

    async def _queue(self, data: bytes) -> None:
        """Queue one line for the host: written once this task lets the loop run, with every line
        queued by then (`_flusher`), or right here once `_CORK_BYTES` are queued: a host that reads
        slowly then holds the writer back, as an unqueued write would, and a runner that sends in a
        loop awaiting nothing else still lets the loop run (to read `runner/cancel`) every so often."""
        if self._out_broken:
            return
        self._queued.append(data)
        self._queued_bytes += len(data)
        self._ready.set()
        if self._queued_bytes >= _CORK_BYTES:
            await self._flush()
            await anyio.lowlevel.checkpoint()

    async def _flusher(self) -> None:
        """Write what is queued each time lines were queued, until cancelled (`serve` flushes the rest).
        Woken by the first line, it lets the loop turn once more before writing: a run that ends yields
        once between its last result and its answer (leaving its `RunAPI`'s task group), and without
        that turn the answer went in a write of its own, waking the host twice per run."""
        while True:
            await self._ready.wait()
            self._ready = anyio.Event()
            await anyio.lowlevel.cancel_shielded_checkpoint()
            await self._flush()

    async def _flush(self) -> None:
        """Write every queued line, in order, in one write (several only when the pipe is full)."""
        async with self._write_lock:
            if not self._queued:
                return
            data = b"".join(self._queued)
            self._queued.clear()
            self._queued_bytes = 0
            if self._out_broken:
                return
            try:
                # Not abandoned on cancel: lines are either written whole or not started.
                with anyio.CancelScope(shield=True):
                    if os.get_blocking(self._out_fd):
                        await anyio.to_thread.run_sync(_write_blocking, self._out_fd, data)
                    else:
                        await _write_all(self._out_fd, data)
            except OSError as exc:
                self._out_broken = True
                logger.error("The host stopped reading stdout (%s); dropping further output.", exc)


def _describe(exc: BaseException) -> str:
    # A task group inside a runner wraps a single failure; report the failure, not the wrapper.
    exc = sole_leaf(exc)
    return str(exc) or type(exc).__name__


def _write_blocking(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def _write_all(fd: int, data: bytes) -> None:
    """Write `data` whole to the non-blocking `fd`: on the loop's thread while the pipe has room (a
    result line almost always fits at once), waiting for room when the host reads slowly."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await anyio.wait_writable(fd)
