"""Issue 13: `mcphost runners` started every bundled plugin to list them and called CLIs that are not
installed "running"."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.examples.clikit import mcphost
from tests.mcphost.cli.test_runners import runners_config


async def test_runners_lists_the_bundled_runners_without_starting_any_plugin(tmp_path: Path) -> None:
    """Issue 13: `mcphost runners` started every bundled plugin to list them and called CLIs that are not
    installed "running"."""
    # A plugin that records its start: it must not start without --check.
    marker = tmp_path / "started"
    recorder = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    config = runners_config(
        tmp_path,
        f'[[plugins]]\nname = "recorder"\ncommand = {json.dumps(recorder)}\n'
        '[[agents]]\nid = "c"\nrunner = "plugin:mcphost/claude-code/default"\n'
        'config = { cli_path = "/nonexistent/claude" }\nevent_types = ["x.y"]\n',
    )
    code, out, err = await mcphost("runners", "--json", "--config", str(config), cwd=tmp_path)
    assert code == 0, err
    report = json.loads(out)
    assert out.count("\n") == 1
    assert not marker.exists()
    assert report["checked"] is False
    status = {r["id"]: r["status"] for r in report["runners"]}
    assert status == {
        "plugin:mcphost/echo/default": "ready",
        "plugin:mcphost/memo/default": "ready",
        "plugin:mcphost/claude-code/default": "missing",
        "plugin:mcphost/codex-agent/default": "ready",
    }
    missing = next(r for r in report["runners"] if r["status"] == "missing")
    assert "'/nonexistent/claude' is not an executable" in missing["detail"]
    plugins = {p["name"]: p for p in report["plugins"]}
    assert {p["state"] for p in plugins.values()} == {"configured"}
    assert all(p["pid"] is None for p in plugins.values())
    assert "--check" in plugins["recorder"]["last_error"]
    assert plugins["echo"]["runners"] == ["plugin:mcphost/echo/default"]

    code, out, err = await mcphost("runners", "--config", str(config), cwd=tmp_path)
    assert code == 0, err
    line = next(x for x in out.splitlines() if "claude-code/default" in x)
    assert "missing" in line
    assert "running" not in out
    assert not marker.exists()
