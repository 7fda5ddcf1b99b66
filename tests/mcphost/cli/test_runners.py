"""`mcphost runners` lists without starting plugins; `--check` starts them; `python` in a plugin command
is the host's interpreter."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.examples.clikit import NO_BUNDLED, mcphost
from tests.mcphost.hostkit import REPO

BAD_MANIFEST = [sys.executable, str(REPO / "tests" / "plugins" / "bad_manifest.py")]


def runners_config(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "mcphost.toml"
    path.write_text(f'[host]\ndata_dir = "{tmp_path / "data"}"\n{extra}', encoding="utf-8")
    return path


async def test_a_plugin_whose_program_is_not_found_is_listed_missing(tmp_path: Path) -> None:
    config = runners_config(
        tmp_path, '[[plugins]]\nname = "gone"\ncommand = ["no-such-program-xyz", "run"]\n'
    )
    code, out, err = await mcphost("runners", "--json", "--config", str(config), cwd=tmp_path, env=NO_BUNDLED)
    assert code == 0, err
    (plugin,) = json.loads(out)["plugins"]
    assert (plugin["name"], plugin["state"]) == ("gone", "missing")


async def test_runners_check_starts_the_plugins_and_reports_rejected_manifests_and_missing_clis(
    tmp_path: Path,
) -> None:
    config = runners_config(
        tmp_path,
        f'[[plugins]]\nname = "bad"\ncommand = {json.dumps(BAD_MANIFEST)}\n'
        '[[agents]]\nid = "c"\nrunner = "plugin:mcphost/claude-code/default"\n'
        'config = { cli_path = "/nonexistent/claude" }\nevent_types = ["x.y"]\n',
    )
    code, out, err = await mcphost("runners", "--check", "--json", "--config", str(config), cwd=tmp_path)
    assert code == 0, err
    report = json.loads(out)
    assert report["checked"] is True
    assert "protocol_version '2' is not supported" in " ".join(r["reason"] for r in report["rejected"])
    plugins = {p["name"]: p for p in report["plugins"]}
    assert plugins["claude-code"]["state"] == "running"
    assert isinstance(plugins["claude-code"]["pid"], int)
    status = {r["id"]: r["status"] for r in report["runners"]}
    assert status["plugin:mcphost/claude-code/default"] == "missing"
    assert status["plugin:mcphost/echo/default"] == "ready"
