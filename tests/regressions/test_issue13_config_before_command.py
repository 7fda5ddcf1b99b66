"""Issue 13: `mcphost --config FILE <command>`, as every example file wrote it, was rejected by the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mcphost.test_cli import mcphost


@pytest.mark.parametrize("before", [True, False], ids=["before-the-command", "after-the-command"])
def test_config_is_taken_before_or_after_the_command(tmp_path: Path, before: bool) -> None:
    """Issue 13: `mcphost --config FILE <command>`, as every example file wrote it, was rejected by the CLI."""
    data = tmp_path / "elsewhere"
    config = tmp_path / "mine.toml"
    config.write_text(f'[host]\ndata_dir = "{data}"\nbundled_plugins = false\n', encoding="utf-8")
    args = ["--config", str(config), "runs"] if before else ["runs", "--config", str(config)]
    done = mcphost(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (data / "mcphost.db").is_file()
    assert not (tmp_path / ".mcphost").exists()
