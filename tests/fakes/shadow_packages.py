"""Packages named like mcphost's own, for the folder a process starts in: importing any of them fails loudly.

A user's project may well hold a `runners/` or `bridge/` package (mcphost's names before they became
`mcphost_runners` / `mcphost_bridge`), or a checkout of something called `mcphost`. A Python process whose
module search path starts with its working directory (`python -m ...` without `-P`) imports these instead
of mcphost's, and fails with the `ImportError` each module here raises, naming the file.
"""

from __future__ import annotations

from pathlib import Path

SHADOW_PACKAGES = ("runners", "bridge", "mcphost", "mcphost_runners", "mcphost_bridge")
"""Every top-level name mcphost installs, and the generic names it used to install."""
SHADOW_MODULES = ("__init__", "__main__", "sdk", "echo", "memo", "claude_code", "codex", "relay", "protocol")
"""Module names of ours (`runners/memo.py`, `runners/sdk.py`, `bridge/__main__.py`, ...) in each package."""


def write_shadow_packages(folder: Path) -> Path:
    """`folder` with a package of each of `SHADOW_PACKAGES` whose every module raises on import."""
    for package in SHADOW_PACKAGES:
        root = folder / package
        root.mkdir(parents=True, exist_ok=True)
        for module in SHADOW_MODULES:
            path = root / f"{module}.py"
            path.write_text(f"raise ImportError({f'{path} is not part of mcphost'!r})\n", encoding="utf-8")
    return folder
