"""`mcphost tools`: every configured upstream server's status and tools, from a config file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.mcphost.hostkit import REPO


def mcphost(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it: a subprocess with the repository importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPHOST_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "mcphost.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


FAKES = Path(__file__).resolve().parents[2] / "fakes"


def _config(tmp_path: Path, servers: str) -> Path:
    cfg = tmp_path / "mcphost.toml"
    cfg.write_text(f'[host]\ndata_dir = "{(tmp_path / "data").as_posix()}"\n\n{servers}')
    return cfg


def test_tools_lists_servers_and_their_tools(tmp_path: Path) -> None:
    upstream = json.dumps([sys.executable, str(FAKES / "upstream_tools.py"), "stdio"])
    cfg = _config(tmp_path, f"[tools.fake]\ncommand = {upstream}\n")
    done = mcphost("tools", "--config", str(cfg), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.splitlines()[0].split()[:2] == ["fake", "stdio"]
    assert "ready" in out.splitlines()[0]
    assert "  fake__get_time" in out
    done = mcphost("tools", "--json", "--config", str(cfg), cwd=tmp_path)
    assert done.returncode == 0
    (server,) = json.loads(done.stdout)["servers"]
    assert server["state"] == "ready"
    assert {"name": "fake__get_time", "tool": "get.time", "description": "A fixed time."} in server["tools"]


def test_an_unavailable_server_is_shown_and_fails_the_command(tmp_path: Path) -> None:
    cfg = _config(tmp_path, '[tools.gone]\ncommand = ["/nonexistent/binary"]\n')
    done = mcphost("tools", "--config", str(cfg), cwd=tmp_path)
    assert done.returncode == 1
    line = done.stdout.splitlines()[0]
    assert line.startswith("gone")
    assert "backoff:" in line


def test_no_servers_configured(tmp_path: Path) -> None:
    done = mcphost("tools", "--config", str(_config(tmp_path, "")), cwd=tmp_path)
    assert done.returncode == 0
    assert "no tool servers" in done.stderr
