"""The client configs `mcphost grant` prints, parsed the way the shell, TOML and the clients read them."""

from __future__ import annotations

import json
import shlex
import tomllib
from typing import cast

from mcphost.cli._grants import CODEX_STARTUP_TIMEOUT_S, mcp_client_configs

URL = "http://127.0.0.1:8787/runs/run_01/mcp"
ENV_REF = "${MCPHOST_RUN_TOKEN}"


def test_claude_lines_pass_the_token_reference_to_the_client_unexpanded() -> None:
    configs = mcp_client_configs(URL, bridge=["/opt/venv/bin/mcphost-bridge"])
    for form in ("http", "bridge"):
        argv = shlex.split(configs["claude_code"][form]["command"])
        assert argv[:4] == ["claude", "mcp", "add-json", "mcphost"]
        added = json.loads(argv[4])
        assert added == configs["claude_code"][form]["mcp_config"]["mcpServers"]["mcphost"]
        assert ENV_REF in argv[4]
    bridged = configs["claude_code"]["bridge"]["mcp_config"]["mcpServers"]["mcphost"]
    assert (bridged["command"], bridged["args"]) == ("/opt/venv/bin/mcphost-bridge", ["--url", URL])


def test_a_url_with_shell_characters_survives_the_printed_lines() -> None:
    url = "http://127.0.0.1:8787/runs/run_01/mcp?x='$(touch /tmp/x)'&y=\"`id`\""
    configs = mcp_client_configs(url, bridge=["/opt/my venv/bin/python", "-m", "mcphost_bridge"])
    claude = json.loads(shlex.split(configs["claude_code"]["bridge"]["command"])[4])
    assert claude["command"] == "/opt/my venv/bin/python"
    assert claude["args"] == ["-m", "mcphost_bridge", "--url", url]
    assert claude["alwaysLoad"] is True  # Claude Code lists its tools before the first turn
    codex = shlex.split(configs["codex"]["bridge"]["command"])
    overrides = codex[2::2]
    assert codex[0] == "codex"
    assert codex[1::2] == ["-c"] * len(overrides)
    assert overrides == configs["codex"]["bridge"]["overrides"]
    args = tomllib.loads(next(o for o in overrides if ".args=" in o).replace("mcp_servers.mcphost.", "", 1))
    assert args["args"] == ["-m", "mcphost_bridge", "--url", url]


def test_codex_entries_are_required_wait_for_startup_and_approve_the_write_tools() -> None:
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
            _merge(from_overrides, merged)
        assert from_overrides == table
    http = tomllib.loads(configs["codex"]["http"]["config_toml"])["mcp_servers"]["mcphost"]
    assert (http["url"], http["bearer_token_env_var"]) == (URL, "MCPHOST_RUN_TOKEN")


def test_a_read_only_grant_approves_nothing_and_host_tools_approve_the_server() -> None:
    read_only = mcp_client_configs(URL, bridge=["/b"])
    assert "tools" not in tomllib.loads(read_only["codex"]["http"]["config_toml"])["mcp_servers"]["mcphost"]
    with_host_tools = mcp_client_configs(URL, bridge=["/b"], approve_all=True)
    table = tomllib.loads(with_host_tools["codex"]["bridge"]["config_toml"])["mcp_servers"]["mcphost"]
    assert table["default_tools_approval_mode"] == "approve"


def _merge(into: dict[str, object], more: dict[str, object]) -> None:
    for key, value in more.items():
        current = into.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            _merge(cast(dict[str, object], current), cast(dict[str, object], value))
        else:
            into[key] = value
