"""Runtimes: runs of agents with `[agents.runtime]` execute on worker machines that register with the
host, heartbeat and claim work over HTTP (docs/protocol.md §12).

- `wire.py`: the bodies of the runtime protocol (`/v1/runtime/...`), shared by the host and the daemon.
- `fence.py`: the per-claim MCP token a runtime's runner gets, and its check.
- `remote.py`: the host's side of a remote run: `RemoteRuns` (one per host) and `RemoteExecution`, which
  the orchestrator calls as it calls a plugin process (`run`, `cancel`).
- `daemon.py`: `mcphost runtime`, the worker: register, heartbeat, claim, run with the host's plugin
  code, post results in order, honour cancel, reconnect.
"""
