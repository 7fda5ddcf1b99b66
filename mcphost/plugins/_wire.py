"""The wire of a plugin process: bounded line reading, JSON-RPC framing and per-run result routing.

Private to `process.py`, which owns the processes (spawn, restart, shutdown); lines are read with
`mcphost.common.lines` (an over-long line keeps 64 KiB to find its run id). It knows nothing of
`PluginProcess` (a connection gets its plugin's name and a callback counting diagnostics). Invariants: the
line reader never holds more than its limit (+ one read chunk) of a line; the connection's pumps never
raise — a malformed line is a logged diagnostic; the results of a run reach its stream in the order they
were written.
"""

from __future__ import annotations

import json
import logging
import re
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

import anyio
import anyio.abc
import pydantic_core
from anyio.streams.memory import MemoryObjectSendStream
from pydantic import ValidationError

from mcphost.common.lines import LineReader, TooLong
from mcphost.common.validation import describe
from mcphost.protocol import (
    MAX_JSON_DEPTH,
    MAX_LINE_BYTES,
    METHOD_RESULT,
    JSONObject,
    ResultParams,
    is_json_object,
)

logger = logging.getLogger("mcphost.plugins")
_ABANDONED_KEPT = 256
"""How many abandoned runs and requests a connection remembers, so that the plugin's late answers for
them (expected after a cancel) are not reported as protocol diagnostics."""

_QUEUED_LIMIT = 1 << 20
"""Queued bytes at which a sender waits for `pump_stdin` to take the queue (runs in flight bound it anyway)."""
_MAX_STDERR_LINE = 16 * 1024
_RUN_ID_IN_LINE = re.compile(rb'"run_id"\s*:\s*"([^"\\]{1,200})"')


@dataclass(frozen=True, slots=True)
class RawResult:
    """One `runner/result` of a run as it came off the wire, not yet validated."""

    obj: JSONObject
    nbytes: int
    """Size of the result object serialized compactly (UTF-8): what the 1 MiB cap is checked against."""
    dropped: bool = False
    """The line exceeded `MAX_LINE_BYTES` and was not read: `obj` holds only `run_id`, `nbytes` the line
    size. Check `nbytes` before validating `obj`."""
    source: tuple[int, int] | None = None
    """A remote run's result: the (fence, number) of the queue row it came from (`runtimes/remote.py`);
    the transaction that journals it deletes that row (`ResultEffects.consumed`)."""


# -- the wire ------------------------------------------------------------------------------------------


class BrokenConnectionError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PluginAnsweredError(Exception):
    def __init__(self, error: JSONObject) -> None:
        self.error = error
        super().__init__(f"{error.get('code')}: {error.get('message')}")


class Pending:
    __slots__ = ("broken", "done", "error", "quiet", "result")

    def __init__(self, *, quiet: bool = False) -> None:
        self.done = anyio.Event()
        self.result: JSONObject | None = None
        self.error: JSONObject | None = None
        self.broken: str | None = None
        self.quiet = quiet
        """An error answer is expected (a liveness probe): not a diagnostic."""


class RunRoute:
    """Where the results of one active run go. Detaching it never leaves the pump blocked."""

    def __init__(self, results: MemoryObjectSendStream[RawResult]) -> None:
        self.results = results
        self.detached = False
        self._scope: anyio.CancelScope | None = None

    async def push(self, item: RawResult) -> None:
        if self.detached:
            return
        try:  # the run's stream is unbounded (`_execution.execute`): taken at once, without a checkpoint
            self.results.send_nowait(item)
            return
        except anyio.WouldBlock:
            pass
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self.detached = True  # the caller stopped listening; later results of the run are dropped
            return
        with anyio.CancelScope() as self._scope:
            try:
                await self.results.send(item)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.detached = True  # the caller stopped listening; later results of the run are dropped
        self._scope = None

    def detach(self) -> None:
        self.detached = True
        if self._scope is not None:
            self._scope.cancel()


def _compact_size(result: object) -> int:
    """The size of `result` as compact UTF-8 JSON (what the 1 MiB cap is checked against), by
    pydantic-core's encoder (5x faster than `json.dumps`; a float may be spelled a character shorter
    or longer, `1e-7` for `1e-07`). A lone surrogate, which it refuses, is measured by `json.dumps`
    with surrogatepass: such a result must reach `classify_result`, which refuses it by field, instead
    of failing the line here and vanishing; one too deep for either measures 0 (the journal refuses it
    as nested too deep, whatever its size)."""
    try:
        return len(pydantic_core.to_json(result))
    except ValueError:
        pass
    try:
        return len(
            json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
        )
    except RecursionError:
        return 0


def dumps_line(message: JSONObject) -> bytes:
    """`message` as compact UTF-8 JSON (no newline), by pydantic-core's encoder: a `runner/run` line
    carries the run's context, which it encodes 5-7x faster than `json.dumps`."""
    return pydantic_core.to_json(message)


class Connection:
    """One spawned process of a plugin: its pipes, pumps, pending requests and active runs."""

    def __init__(
        self,
        name: str,
        process: anyio.abc.Process,
        *,
        on_diagnostic: Callable[[], None],
        on_output: Callable[[str], None] | None = None,
    ) -> None:
        self.name = name
        """The plugin's name, for logs."""
        self._on_diagnostic = on_diagnostic
        """Called once per diagnostic (the owner counts them)."""
        self._on_output = on_output
        """Called with every stderr line, and every stdout line that is not JSON (`[stdout] …`)."""
        self.process = process
        self.pid = process.pid
        self.runs: dict[str, RunRoute] = {}
        self.broken: str | None = None
        self.closed = anyio.Event()
        """Set when the process can no longer be talked to: stdout ended or stdin refused a write."""
        self.finished = anyio.Event()
        """Set by the owner once the process is down and `final_reason` says how it ended."""
        self.final_reason: str | None = None
        self.stderr_note = ""
        """`; last stderr line: '…'` when the process failed and said something on its way out (or, when it
        died before `initialize`, the import failure those lines show: `_startup.import_failure`)."""
        self.stderr_done = anyio.Event()
        self.stderr_tail: deque[str] = deque(maxlen=8)
        """The last lines: enough for the end of a traceback (its frames and the exception)."""
        # Shielded, so the pumps keep working during a shutdown under cancellation; the owner cancels
        # them explicitly once the process is down (cancel() works on a shielded scope).
        self.stdout_scope = anyio.CancelScope(shield=True)
        self.stderr_scope = anyio.CancelScope(shield=True)
        self.stdout_pumping = False
        self.stdin_scope = anyio.CancelScope(shield=True)
        self._write_lock = anyio.Lock(fast_acquire=True)  # no checkpoint when free: most writes
        self._queued: list[bytes] = []
        """Lines for `pump_stdin` to write, in order."""
        self._queued_bytes = 0
        self._queued_event = anyio.Event()
        self._written = anyio.Event()
        """Set (and replaced) each time the queue is taken to be written."""
        self._next_id = 0
        self._pending: dict[int, Pending] = {}
        self._abandoned_requests: deque[int] = deque(maxlen=_ABANDONED_KEPT)
        self.abandoned_runs: deque[str] = deque(maxlen=_ABANDONED_KEPT)
        """Runs the host gave up on (cancelled while in flight): the plugin may still answer for them."""

    def mark_broken(self, reason: str) -> None:
        if self.broken is None:
            self.broken = reason
        self.closed.set()
        self._queued_event.set()  # `pump_stdin` stops
        self._written.set()  # and no sender waits for it

    def fail_pending(self, reason: str) -> None:
        self.mark_broken(reason)
        for pending in self._pending.values():
            pending.broken = reason
            pending.done.set()

    async def send(self, message: JSONObject) -> None:
        """Write `message` as one line: at once when at most one run is active on the process and no
        other line waits (a run alone is not held back a loop turn), else queued for `pump_stdin`,
        which writes every line queued in the same loop turn in one write; a plugin that reads slowly
        holds the senders back (`_QUEUED_LIMIT`). A queued line whose write fails fails the pending
        requests (`fail_pending`): a request hears of it as its answer."""
        if self.broken is not None:
            raise BrokenConnectionError(self.broken)
        data = dumps_line(message) + b"\n"
        if len(self.runs) <= 1 and not self._queued and not self._write_lock.locked():
            async with self._write_lock:
                if not await self._write(data):
                    raise BrokenConnectionError(self.broken or "")
            return
        self._queued.append(data)
        self._queued_bytes += len(data)
        self._queued_event.set()
        while self._queued_bytes >= _QUEUED_LIMIT and self.broken is None:
            await self._written.wait()

    async def notify(self, method: str, params: JSONObject) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params: JSONObject, *, quiet: bool = False) -> JSONObject:
        """Send a request and wait for its answer; `BrokenConnectionError` or `PluginAnsweredError` otherwise.

        `quiet`: an error answer is expected and not logged as a diagnostic.
        """
        if self.broken is not None:
            raise BrokenConnectionError(self.broken)
        self._next_id += 1
        request_id = self._next_id
        pending = Pending(quiet=quiet)
        self._pending[request_id] = pending
        try:
            await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            await pending.done.wait()
        finally:
            del self._pending[request_id]
            if not pending.done.is_set():
                self._abandoned_requests.append(request_id)
        if pending.broken is not None:
            raise BrokenConnectionError(pending.broken)
        if pending.error is not None:
            raise PluginAnsweredError(pending.error)
        assert pending.result is not None
        return pending.result

    async def close_stdin(self) -> None:
        """Close the plugin's stdin: the process is going down, so what is still queued (nothing, after
        an answered `shutdown`) is dropped, and a write the plugin does not take stops waiting."""
        self.stdin_scope.cancel()
        async with self._write_lock:  # never cut a line in half
            assert self.process.stdin is not None
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await self.process.stdin.aclose()

    async def _write(self, data: bytes) -> bool:
        """Write `data` to stdin under `_write_lock`; False, with the pending requests failed, when the
        process no longer takes it."""
        assert self.process.stdin is not None
        try:
            await self.process.stdin.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self.fail_pending(f"stopped reading its stdin ({type(exc).__name__})")
            return False
        return True

    def _take_queued(self) -> bytes:
        data = b"".join(self._queued)
        self._queued.clear()
        self._queued_bytes = 0
        written, self._written = self._written, anyio.Event()
        written.set()
        return data

    # -- pumps (never raise) -------------------------------------------------------------------------

    async def pump_stdin(self) -> None:
        """Write the queued lines until the process is down: woken by the first line queued, it writes
        every line queued by then in one write. With many runs in flight, the starts of the runs one
        grouped admission admitted reach the plugin in one read instead of one each, and the plugin
        answers them in one wake-up and one write."""
        try:
            with self.stdin_scope:
                while self.broken is None:
                    await self._queued_event.wait()
                    self._queued_event = anyio.Event()
                    async with self._write_lock:
                        if self._queued and self.broken is None:
                            await self._write(self._take_queued())
        finally:
            self._take_queued()  # sent nowhere (the process is going down), and no sender waits for it

    async def pump_stdout(self) -> None:
        assert self.process.stdout is not None
        reader = LineReader.from_stream(self.process.stdout, MAX_LINE_BYTES)
        try:
            with self.stdout_scope:
                self.stdout_pumping = True
                while True:
                    try:
                        item = await reader.receive()
                    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                        break
                    try:
                        if isinstance(item, TooLong):
                            await self._on_too_long(item)
                        else:
                            await self._on_line(item)
                    except Exception:  # a bug here must not cost the plugin its reader
                        logger.exception("Plugin %r: handling a stdout line failed", self.name)
        finally:
            self.stdout_pumping = False
            # No answer can come any more: wake every waiter now; run() then waits for `final_reason`.
            self.fail_pending("closed its stdout")

    async def pump_stderr(self) -> None:
        assert self.process.stderr is not None
        reader = LineReader.from_stream(self.process.stderr, _MAX_STDERR_LINE)
        extra = {"plugin": self.name}
        try:
            with self.stderr_scope:
                while True:
                    try:
                        item = await reader.receive()
                    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                        break
                    if isinstance(item, TooLong):
                        text = f"{item.prefix[:_MAX_STDERR_LINE].decode(errors='replace')}… ({item.size} bytes, cut)"
                    else:
                        text = item.decode(errors="replace").rstrip()
                    if text:
                        self.stderr_tail.append(text)
                        if self._on_output is not None:
                            self._on_output(text)
                        logger.info("[plugin %s] %s", self.name, text, extra=extra)
        finally:
            self.stderr_done.set()

    def _diagnostic(self, message: str, *args: object) -> None:
        self._on_diagnostic()
        logger.warning("Plugin %r " + message, self.name, *args, extra={"plugin": self.name})

    async def _on_line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message: object = json.loads(line)
        except RecursionError:
            self._diagnostic(
                "wrote a line nested too deep to parse (results may nest at most %d levels); dropped: %r",
                MAX_JSON_DEPTH,
                line[:200],
            )
            return
        except ValueError:
            if self._on_output is not None:
                self._on_output("[stdout] " + line[:_MAX_STDERR_LINE].decode(errors="replace").rstrip())
            self._diagnostic(
                "wrote a line that is not JSON to stdout (stdout is the protocol channel; logs go to stderr): %r",
                line[:200],
            )
            return
        if not is_json_object(message):
            self._diagnostic("wrote a JSON value that is not a JSON-RPC object: %r", line[:200])
            return
        obj: JSONObject = message
        method = obj.get("method")
        if method == METHOD_RESULT and "id" not in obj:
            await self._on_result(obj.get("params"))
        elif isinstance(method, str):
            # The protocol has no plugin→host requests; answering would mean writing from the pump.
            self._diagnostic("sent %r, which the host does not handle; ignored", method)
        elif "id" in obj and ("result" in obj or "error" in obj):
            self._on_response(obj)
        else:
            self._diagnostic("wrote a JSON object that is neither a request nor a response: %r", line[:200])

    async def _on_result(self, params: object) -> None:
        try:
            parsed = ResultParams.model_validate(params)
        except ValidationError as exc:
            self._diagnostic(
                "sent an invalid 'runner/result' notification: %s", describe(exc, root="(params)")
            )
            return
        route = self.runs.get(parsed.run_id)
        if route is None and parsed.run_id in self.abandoned_runs:
            logger.debug("Plugin %r: a late result for abandoned run %r; dropped", self.name, parsed.run_id)
            return
        if route is None:
            self._diagnostic(
                "sent a result for run %r, which is not active on this process; dropped", parsed.run_id
            )
            return
        size = _compact_size(parsed.result)
        await route.push(RawResult(parsed.result, size))

    def _on_response(self, obj: JSONObject) -> None:
        request_id = obj.get("id")
        pending = self._pending.get(request_id) if type(request_id) is int else None
        if pending is None and request_id in self._abandoned_requests:
            logger.debug("Plugin %r: a late answer to abandoned request %r", self.name, request_id)
            return
        if pending is None or pending.done.is_set():
            self._diagnostic("answered request id %r, which the host is not waiting for", request_id)
            return
        if "error" in obj:
            error = obj["error"]
            pending.error = error if isinstance(error, dict) else {"code": None, "message": repr(error)}
            if not pending.quiet:
                self._diagnostic("answered request %d with a JSON-RPC error: %r", request_id, pending.error)
        elif isinstance(obj["result"], dict):
            pending.result = obj["result"]
        else:
            pending.error = {"code": -32603, "message": f"the result is not a JSON object: {obj['result']!r}"}
            self._diagnostic("answered request %d with a result that is not an object", request_id)
        pending.done.set()

    async def _on_too_long(self, item: TooLong) -> None:
        match = _RUN_ID_IN_LINE.search(item.prefix)
        run_id = match.group(1).decode(errors="replace") if match else None
        route = self.runs.get(run_id) if run_id is not None else None
        if run_id is None or route is None:
            self._diagnostic(
                "wrote a line of %d bytes, over the %d-byte limit; dropped", item.size, MAX_LINE_BYTES
            )
            return
        self._diagnostic(
            "wrote a line of %d bytes for run %r, over the %d-byte limit; dropped, the run fails",
            item.size,
            run_id,
            MAX_LINE_BYTES,
        )
        await route.push(RawResult({"run_id": run_id}, item.size, dropped=True))
