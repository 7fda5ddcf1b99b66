"""Issue 13: the printed Claude `add-json` line was double-quoted, so the shell expanded the token into
~/.claude.json."""

from __future__ import annotations

import json
import shlex

from mcphost.cli._grants import mcp_client_configs
from tests.mcphost.cli.test_grant_configs import ENV_REF, URL


def test_claude_lines_pass_the_token_reference_to_the_client_unexpanded() -> None:
    """Issue 13: the printed Claude `add-json` line was double-quoted, so the shell expanded the token into
    ~/.claude.json."""
    configs = mcp_client_configs(URL, bridge=["/opt/venv/bin/mcphost-bridge"])
    for form in ("http", "bridge"):
        argv = shlex.split(configs["claude_code"][form]["command"])
        assert argv[:4] == ["claude", "mcp", "add-json", "mcphost"]
        added = json.loads(argv[4])
        assert added == configs["claude_code"][form]["mcp_config"]["mcpServers"]["mcphost"]
        assert ENV_REF in argv[4]
    bridged = configs["claude_code"]["bridge"]["mcp_config"]["mcpServers"]["mcphost"]
    assert (bridged["command"], bridged["args"]) == ("/opt/venv/bin/mcphost-bridge", ["--url", URL])
