"""`python serve.py PORT JOBS`: LangGraph's in-memory agent server (what `langgraph dev` runs) for bench/peers.

Runs in LangGraph's own environment. It starts `langgraph_api.cli.run_server`, the function behind
`langgraph dev`, with the settings bench/peers reports (bench/README.md lists them), after one change that
keeps the comparison fair:

- **The queue is woken on run creation.** The in-memory runtime's worker loop polls for pending runs and,
  when a poll found none, sleeps 0.5 s before the next one (`langgraph_runtime_inmem.ops.Runs.next`), so a
  run that arrives at an idle server waits up to half a second for nothing. LangGraph's production runtime
  does not pay that (its queue is woken), and mcphost's readers are woken too, so here `Runs.put` sets an
  event and the idle wait ends as soon as it is set (never later than the 0.5 s it would have slept).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import anyio

# LangGraph is installed in this folder's own environment only, so its API is untyped here: reached as `Any`.
_cli: Any = importlib.import_module("langgraph_api.cli")
ops: Any = importlib.import_module("langgraph_runtime_inmem.ops")

IDLE_POLL_S = 0.5


class _Wake:
    """Set by `Runs.put`, awaited by the idle queue. One event loop runs both (the in-memory runtime's
    shared-loop mode), so checking `pending` and creating the event cannot interleave with a `put`."""

    pending = False
    event: anyio.Event | None = None


def _wake_on_put() -> None:
    original_next = ops.Runs.next
    original_put = ops.Runs.put

    async def next_run(wait: bool, limit: int = 1) -> Any:
        if wait and not _Wake.pending:
            _Wake.event = anyio.Event()
            with anyio.move_on_after(IDLE_POLL_S):
                await _Wake.event.wait()
        _Wake.pending = False
        async for item in original_next(False, limit):
            yield item

    async def put(*args: Any, **kwargs: Any) -> Any:
        created = await original_put(*args, **kwargs)
        _Wake.pending = True
        if _Wake.event is not None:
            _Wake.event.set()
        return created

    ops.Runs.next = staticmethod(next_run)
    ops.Runs.put = staticmethod(put)


def main() -> None:
    port, jobs = int(sys.argv[1]), int(sys.argv[2])
    _wake_on_put()
    graph = str(Path(__file__).with_name("echo_graph.py").resolve())
    _cli.run_server(
        host="127.0.0.1",
        port=port,
        reload=False,
        graphs={"echo": f"{graph}:graph"},
        n_jobs_per_worker=jobs,
        open_browser=False,
        allow_blocking=True,
        server_level="WARNING",
    )


if __name__ == "__main__":
    main()
