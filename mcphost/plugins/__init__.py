"""Plugin processes and the runners they serve.

`process.py` owns every plugin process (spawn, `initialize`, run multiplexing, restart, shutdown) through
`PluginSupervisor`; `_wire.py` is its wire (bounded line reader, JSON-RPC framing, per-run routing);
`registry.py` looks runners up by id over the live plugins and keeps the rejected manifests.
Import the submodules; this package re-exports nothing, so importing one never drags in the others.
"""
