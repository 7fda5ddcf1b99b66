"""Memory per active run, measured in a child process: `python -m bench._memory host|direct N URL DATA_DIR`.

Prints one JSON line: `rss_before_kib`, `rss_after_kib`, `per_run_kib` (this process's RSS growth while
N runs are held open, divided by N) and `plugin_per_run_kib` (the hold plugin's growth, likewise).

`host`: a host with the hold plugin; N events in N conversations, measured once the plugin has started
all N (each run is `running` in the database and its context has reached the plugin). `direct`: the
same N runs held by `bench._stdio.StdioDriver` on its own hold plugin process. Both warm up first (a
few short runs) so one-time imports and caches are not counted as per-run cost. Linux only (`/proc`).
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import anyio

from bench._databases import Workspace
from bench._host import HOLD_COMMAND, baseline_context, bench_host, host_run, message
from bench._stdio import StdioDriver
from mcphost.models import RunStatus
from mcphost.stores import Stores

HOLD_S = 600.0
WARMUP_RUNS = 8
SETTLE_S = 0.5


def rss_kib(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


async def _settled_rss(plugin_pid: int) -> tuple[int, int]:
    await anyio.sleep(SETTLE_S)
    gc.collect()
    return rss_kib(), rss_kib(plugin_pid)


async def host_side(n: int, ws: Workspace) -> dict[str, float]:
    async with bench_host(ws, max_concurrent_runs=n + 8, hold=True) as host:
        plugin_pid = host.supervisor.get("hold").pid
        assert plugin_pid is not None
        for i in range(WARMUP_RUNS):
            await host_run(host, message("0", f"warm-{i}", bot="hold"))
            await host_run(host, message("hello", f"warm-{i}"))
        before, plugin_before = await _settled_rss(plugin_pid)
        for i in range(n):
            await host.orchestrator.submit(message(str(HOLD_S), f"held-{i}", bot="hold"))
        while True:
            if await _running(host.stores, n) >= n:
                break
            await anyio.sleep(0.05)
        after, plugin_after = await _settled_rss(plugin_pid)
        return _report(n, before, after, plugin_before, plugin_after)


async def _running(stores: Stores, n: int) -> int:
    count, cursor = 0, None
    while True:
        page = await stores.runs.list(status=RunStatus.RUNNING, limit=100, cursor=cursor)
        count += len(page.items)
        if not page.has_more or count >= n:
            return count
        cursor = page.next_cursor


async def direct_side(n: int) -> dict[str, float]:
    async with StdioDriver.open(HOLD_COMMAND) as driver:
        plugin_pid = driver.pid
        for i in range(WARMUP_RUNS):
            await driver.run("default", baseline_context("0", f"warm-{i}"))
        before, plugin_before = await _settled_rss(plugin_pid)
        held: list[tuple[int, int]] = []
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(driver.run, "default", baseline_context(str(HOLD_S), f"held-{i}"))
            while True:
                if driver.active_runs >= n:
                    break
                await anyio.sleep(0.05)
            await anyio.sleep(SETTLE_S)  # the plugin has read every request line
            held.append(await _settled_rss(plugin_pid))
            tg.cancel_scope.cancel()
        after, plugin_after = held[0]
        return _report(n, before, after, plugin_before, plugin_after)


def _report(n: int, before: int, after: int, plugin_before: int, plugin_after: int) -> dict[str, float]:
    return {
        "rss_before_kib": before,
        "rss_after_kib": after,
        "per_run_kib": (after - before) / n,
        "plugin_per_run_kib": (plugin_after - plugin_before) / n,
    }


async def _main(side: str, n: int, url: str, data_dir: str) -> None:
    if side == "host":
        ws = Workspace("postgres" if url.startswith("postgres") else "sqlite", url, Path(data_dir))
        out = await host_side(n, ws)
    else:
        out = await direct_side(n)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    side, count, database_url, folder = sys.argv[1:5]
    anyio.run(_main, side, int(count), database_url, folder, backend="asyncio")
