"""Issue 10, item 8: `mcphost grant --tools '*'` copied every glob into the host-tool globs, so a read-only
grant reached every upstream tool."""

from __future__ import annotations

import json
from pathlib import Path

from tests.mcphost.test_cli import mcphost, write_config


def test_grant_star_tools_grants_no_host_tool_and_host_tools_must_be_named(tmp_path: Path) -> None:
    """Issue 10, item 8: `mcphost grant --tools '*'` copied every glob into the host-tool globs, so a read-
    only grant reached every upstream tool."""
    config = str(write_config(tmp_path))
    star = mcphost(
        "grant", "--conversation", "cli", "--tools", "*", "--json", "--config", config, cwd=tmp_path
    )
    assert star.returncode == 0, star.stderr
    made = json.loads(star.stdout)
    assert made["host_tool_globs"] == []
    assert "history_page" in made["tools"]
    named = mcphost(
        "grant", "--conversation", "cli", "--host-tools", "up__*", "--json", "--config", config, cwd=tmp_path
    )
    assert json.loads(named.stdout)["host_tool_globs"] == ["up__*"]
    human = mcphost("grant", "--conversation", "cli", "--tools", "*", "--config", config, cwd=tmp_path)
    assert "host tools: none" in human.stdout
    refused = mcphost("grant", "--conversation", "cli", "--host-tools", "*", "--config", config, cwd=tmp_path)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        "mcphost: error: --host-tools '*' does not name a host tool: write '<server>__<tool>' (globs allowed, "
        "such as 'search__*'), so that every host tool a grant reaches is named on purpose."
    ]
    assert "--host-tools" in mcphost("grant", "--help", cwd=tmp_path).stdout
