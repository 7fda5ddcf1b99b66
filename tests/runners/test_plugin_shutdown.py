"""The bundled harness plugins stop cleanly: a normal shutdown (the host closes their stdin) leaves no traceback.

Regression: the plugin server entered the runners' lifespans (a harness's warm pool, with a task group of
its own) inside the task group of its runs, so leaving them on the way out raised anyio's "Attempted to exit
a cancel scope that isn't the current tasks's current cancel scope", which the host logged line by line
under `[plugin claude-code]` whenever `mcphost serve` stopped.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mcphost.protocol.stdio import METHOD_INITIALIZE


@pytest.mark.parametrize("module", ["mcphost_runners.claude_code", "mcphost_runners.codex"])
def test_a_harness_plugin_whose_stdin_closes_exits_zero_without_a_traceback(module: str) -> None:
    initialize = json.dumps({"jsonrpc": "2.0", "id": 1, "method": METHOD_INITIALIZE, "params": {}})
    done = subprocess.run(
        [sys.executable, "-P", "-m", module],
        input=initialize.encode() + b"\n",  # then stdin ends, as when the host stops its plugins
        capture_output=True,
        timeout=120,
        check=False,
    )
    stderr = done.stderr.decode(errors="replace")
    answer = json.loads(done.stdout.splitlines()[0])
    assert answer["id"] == 1
    assert "runners" in answer["result"]
    assert "Traceback" not in stderr, stderr
    assert done.returncode == 0, stderr
