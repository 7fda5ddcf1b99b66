"""Issue 13: the Codex config `mcphost grant` printed was not `required`, so a slow bridge start left Codex
without tools, and it had no approval mode for write tools."""

from __future__ import annotations

import tomllib

from mcphost.cli._grants import CODEX_STARTUP_TIMEOUT_S, mcp_client_configs
from tests.mcphost.cli.test_grant_configs import URL, merge


def test_codex_entries_are_required_wait_for_startup_and_approve_the_write_tools() -> None:
    """Issue 13: the Codex config `mcphost grant` printed was not `required`, so a slow bridge start left
    Codex without tools, and it had no approval mode for write tools."""
    configs = mcp_client_configs(URL, bridge=["/b"], write_tools=["artifacts_create"])
    for form in ("http", "bridge"):
        table = tomllib.loads(configs["codex"][form]["config_toml"])["mcp_servers"]["mcphost"]
        assert table["required"] is True
        assert table["startup_timeout_sec"] == CODEX_STARTUP_TIMEOUT_S
        assert table["tools"] == {"artifacts_create": {"approval_mode": "approve"}}
        assert "default_tools_approval_mode" not in table
        from_overrides: dict[str, object] = {}
        for override in configs["codex"][form]["overrides"]:
            merged = tomllib.loads(override)["mcp_servers"]["mcphost"]
            merge(from_overrides, merged)
        assert from_overrides == table
    http = tomllib.loads(configs["codex"]["http"]["config_toml"])["mcp_servers"]["mcphost"]
    assert (http["url"], http["bearer_token_env_var"]) == (URL, "MCPHOST_RUN_TOKEN")
