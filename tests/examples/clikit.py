"""Run the `mcphost` command line the way a user does: a subprocess in a fresh directory, no inherited
mcphost configuration, the repository importable (for `examples/` and the bundled runners)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
_ENV_DROP = ("MCPHOST_CONFIG", "MCPHOST_DATABASE_URL", "MCPHOST_DATA_DIR")


NO_BUNDLED = {"MCPHOST_BUNDLED_PLUGINS": "false"}
"""For an example that brings its own plugins: the bundled ones need not start with every command."""


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _ENV_DROP}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return {**env, **(extra or {})}


async def mcphost(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> tuple[int, str, str]:
    """`mcphost ARGS` in `cwd` (with `env` added): (exit code, stdout, stderr)."""
    with anyio.fail_after(timeout):
        done = await anyio.run_process(
            [sys.executable, "-m", "mcphost.cli", *args], cwd=cwd, env=cli_env(env), check=False
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()
