"""The client configs `mcphost grant` prints, parsed the way the shell, TOML and the clients read them."""

from __future__ import annotations

import json
import shlex
import tomllib
from typing import cast

from mcphost.cli._grants import mcp_client_configs

URL = "http://127.0.0.1:8787/runs/run_01/mcp"
ENV_REF = "${MCPHOST_RUN_TOKEN}"


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


def test_a_read_only_grant_approves_nothing_and_host_tools_approve_the_server() -> None:
    read_only = mcp_client_configs(URL, bridge=["/b"])
    assert "tools" not in tomllib.loads(read_only["codex"]["http"]["config_toml"])["mcp_servers"]["mcphost"]
    with_host_tools = mcp_client_configs(URL, bridge=["/b"], approve_all=True)
    table = tomllib.loads(with_host_tools["codex"]["bridge"]["config_toml"])["mcp_servers"]["mcphost"]
    assert table["default_tools_approval_mode"] == "approve"


def merge(into: dict[str, object], more: dict[str, object]) -> None:
    for key, value in more.items():
        current = into.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            merge(cast(dict[str, object], current), cast(dict[str, object], value))
        else:
            into[key] = value
