"""`mcphost serve` with Claude Code and Codex agents stops on SIGTERM and SIGINT without a traceback.

Regression: every stop of the bundled harness plugins raised anyio's "Attempted to exit a cancel scope that
isn't the current tasks's current cancel scope", which the host logged line by line (at info) under
`[plugin claude-code]` and `[plugin codex]`. The real command runs here with `--log-level info`, so
anything a plugin writes to stderr reaches the host's.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # a server start-up on a loaded machine


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_serve_with_harness_agents_stops_without_a_traceback(tmp_path: Path, signum: signal.Signals) -> None:
    port = free_port()
    config = tmp_path / "mcphost.toml"
    config.write_text(
        f'[host]\ndata_dir = "{(tmp_path / "data").as_posix()}"\nlisten = "127.0.0.1:{port}"\n'
        '[[agents]]\nid = "claude"\nrunner = "plugin:mcphost/claude-code/default"\nmatch = { bot_id = "a" }\n'
        '[[agents]]\nid = "codex"\nrunner = "plugin:mcphost/codex/default"\nmatch = { bot_id = "b" }\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCPHOST_", "OTEL_"))}
    stderr_path = tmp_path / "serve.stderr"
    with stderr_path.open("wb") as stderr:
        server = subprocess.Popen(
            [sys.executable, "-m", "mcphost.cli", "--log-level", "info", "serve", "--config", str(config)],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            deadline = time.monotonic() + 240
            while True:
                assert server.poll() is None, stderr_path.read_text()
                try:
                    if httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                assert time.monotonic() < deadline, "mcphost serve did not become healthy"
                time.sleep(0.5)
            time.sleep(1)  # the plugins are up (they start with the host)
            server.send_signal(signum)
            assert server.wait(60) == 0
        finally:
            if server.poll() is None:
                server.kill()
                server.wait(10)
    text = stderr_path.read_text(errors="replace")
    assert "Traceback" not in text, text[-4000:]
    assert "stopped" in text
