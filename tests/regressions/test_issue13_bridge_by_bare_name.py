"""Issue 13: the configs `mcphost grant` printed named `mcphost-bridge` by bare name, which is not on PATH
outside `uv run`."""

from __future__ import annotations

import sys
from pathlib import Path

from mcphost.cli._grants import bridge_command


def test_the_bridge_is_named_by_an_absolute_path_next_to_this_interpreter() -> None:
    """Issue 13: the configs `mcphost grant` printed named `mcphost-bridge` by bare name, which is not on
    PATH outside `uv run`."""
    command = bridge_command()
    assert Path(command[0]).is_absolute()
    assert command == [str(Path(sys.executable).parent / "mcphost-bridge")] or command == [
        sys.executable,
        "-P",
        "-m",
        "mcphost_bridge",
    ]
