"""The baseline runner driver: a minimal JSON-RPC client of one stdio plugin, with no host around it.

Owns one plugin process (`python -m mcphost_runners.echo` by default) and the least a caller must do to run it:
`initialize`, then per run a `runner/run` request whose `runner/result` notifications are collected
until the response arrives. Runs are multiplexed by JSON-RPC id, so concurrent `run()` calls share one
process, exactly as the host's `PluginProcess` does. It parses every line (a driver must, to route it)
and validates nothing, stores nothing, publishes nothing: the floor the host's overhead is measured from.

Shutdown is bounded: `shutdown` request, close stdin, wait, then kill.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

_SHUTDOWN_WAIT_S = 2.0


@dataclass
class _Pending:
    done: anyio.Event = field(default_factory=anyio.Event)
    response: dict[str, Any] | None = None
    results: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])


class StdioDriver:
    """Drive one plugin process over its stdio protocol. Enter with `async with StdioDriver.open(...)`."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self._process = process
        self._next_id = 0
        self._pending: dict[int, _Pending] = {}
        self._by_run: dict[str, _Pending] = {}
        self._write_lock = anyio.Lock()
        self.manifests: list[dict[str, Any]] = []

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def active_runs(self) -> int:
        """Runs sent and not yet answered."""
        return len(self._by_run)

    @classmethod
    @asynccontextmanager
    async def open(cls, command: Sequence[str] | None = None) -> AsyncGenerator[StdioDriver, None]:
        """Spawn the plugin, run `initialize`, and stop it on exit."""
        argv = list(command or [sys.executable, "-m", "mcphost_runners.echo"])
        process = await anyio.open_process(argv, stderr=None)
        driver = cls(process)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(driver._pump)
                init = await driver.request(
                    "initialize", {"protocol_version": "1", "host": {"name": "bench", "version": "0"}}
                )
                driver.manifests = list(init.get("runners", []))
                try:
                    yield driver
                finally:
                    with anyio.CancelScope(shield=True):
                        await driver._stop()
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    process.kill()
                await process.aclose()

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        pending = await self._send_request(method, params)
        await pending.done.wait()
        return pending.response or {}

    async def run(self, runner: str, context: dict[str, Any]) -> list[dict[str, Any]]:
        """Run one context to its end; the results the plugin sent, in order."""
        run_id = context["run_id"]
        pending = _Pending()
        self._by_run[run_id] = pending
        try:
            request = await self._send_request("runner/run", {"runner": runner, "context": context}, pending)
            await request.done.wait()
        finally:
            del self._by_run[run_id]
        return pending.results

    async def _send_request(
        self, method: str, params: dict[str, Any], pending: _Pending | None = None
    ) -> _Pending:
        self._next_id += 1
        request_id = self._next_id
        pending = pending or _Pending()
        self._pending[request_id] = pending
        line = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        await self._write(line.encode() + b"\n")
        return pending

    async def _write(self, data: bytes) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        async with self._write_lock:
            await stdin.send(data)

    async def _pump(self) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        buffer = b""
        async for chunk in stdout:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    self._on_line(json.loads(line))
        for pending in self._pending.values():  # the process ended: nothing more will come
            pending.done.set()

    def _on_line(self, message: dict[str, Any]) -> None:
        if message.get("method") == "runner/result":
            params: dict[str, Any] = message.get("params") or {}
            pending = self._by_run.get(params.get("run_id", ""))
            if pending is not None:
                pending.results.append(params.get("result") or {})
            return
        request_id = message.get("id")
        if isinstance(request_id, int) and request_id in self._pending:
            pending = self._pending.pop(request_id)
            pending.response = message.get("result") or {"error": message.get("error")}
            pending.done.set()

    async def _stop(self) -> None:
        with anyio.move_on_after(_SHUTDOWN_WAIT_S):
            await self.request("shutdown", {})
        stdin = self._process.stdin
        if stdin is not None:
            with anyio.move_on_after(_SHUTDOWN_WAIT_S):
                await stdin.aclose()
        with anyio.move_on_after(_SHUTDOWN_WAIT_S):
            await self._process.wait()
