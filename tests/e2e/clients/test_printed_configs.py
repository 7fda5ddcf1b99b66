"""The configs `mcphost grant` prints, used as printed by the real Claude Code and Codex CLIs.

A real host serves the per-run MCP endpoint on a loopback port; `mcphost grant --json` (a subprocess on the
same database) prints the configs; each form — Claude Code's `add-json` shell line and `--mcp-config` file,
Codex's `-c` shell line and `config.toml` table, each direct over HTTP and through the bridge — starts the
real CLI (from `node_modules`, against a fake model API on 127.0.0.1) with nothing but the token in its
environment and no venv on PATH. The model calls a per-run tool; the host's audit says the call was made.
Shell lines go through `bash -c` exactly as printed, so their quoting is what is tested.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcphost.context import TOKEN_ENV
from mcphost_runners.claude_code import CLAUDE_DEFAULT_ENV
from mcphost_runners.codex import CODEX_CONFIG
from tests.e2e.harness.hostkit import FAKE_KEY, harness_host, unique
from tests.fakes.anthropic import fake_anthropic
from tests.fakes.harness_support import NODE_BIN, require_cli
from tests.fakes.openai import fake_openai
from tests.fakes.script import ToolCall, calls_then_answers

pytestmark = pytest.mark.slow

CREATE = ToolCall(
    "mcp__mcphost__artifacts_create", {"name": "note.txt", "mime_type": "text/plain", "text": "hi"}
)
CLI_TIMEOUT_S = 240


@dataclass(frozen=True)
class Grant:
    run_id: str
    token: str
    configs: dict[str, Any]


@asynccontextmanager
async def granted(tmp_path: Path) -> AsyncGenerator[tuple[Any, Grant]]:
    """A serving host and a `--write` grant made by the `mcphost grant` command on its database."""
    async with harness_host(tmp_path, []) as host:
        config = tmp_path / "mcphost.toml"
        config.write_text(f'[host]\ndata_dir = "{(tmp_path / "host").as_posix()}"\nbundled_plugins = false\n')
        made = await anyio.run_process(
            [
                *(sys.executable, "-m", "mcphost.cli", "grant", "--conversation", unique("conv"), "--write"),
                *("--url", host.orchestrator.public_url, "--json", "--config", str(config)),
            ],
            cwd=tmp_path,
            check=False,
        )
        assert made.returncode == 0, made.stderr.decode()
        printed = json.loads(made.stdout)
        yield host, Grant(printed["run_id"], printed["token"], printed["configs"])


def client_env(tmp_path: Path, grant: Grant, **extra: str) -> dict[str, str]:
    """A client's environment: the token, the CLIs on PATH, a fresh HOME, and no venv anywhere."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    path = [str(NODE_BIN), "/usr/local/bin", "/usr/bin", "/bin"]
    return {
        "PATH": os.pathsep.join(path),
        "HOME": str(home),
        TOKEN_ENV: grant.token,
        "NO_COLOR": "1",
        **extra,
    }


async def run(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    with anyio.fail_after(CLI_TIMEOUT_S):
        done = await anyio.run_process(argv, env=env, cwd=cwd, check=False, stdin=subprocess.DEVNULL)
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    assert done.returncode == 0, f"{argv[:3]} exited {done.returncode}\n{out[-3000:]}\n{err[-3000:]}"
    return out


async def assert_created(host: Any, grant: Grant) -> None:
    audit = await host.stores.audit.list(grant.run_id, limit=100)
    assert ("artifacts_create", "ok") in [(a.tool, a.outcome) for a in audit], audit


@pytest.mark.parametrize("transport", ["http", "bridge"])
@pytest.mark.parametrize("form", ["add-json", "mcp-config"])
async def test_claude_code_calls_a_granted_tool_through_each_printed_config(
    tmp_path: Path, transport: str, form: str
) -> None:
    claude = str(require_cli("claude"))
    project = tmp_path / "project"
    project.mkdir()
    async with (
        fake_anthropic(calls_then_answers([CREATE], "Done: {results}")) as fake,
        granted(tmp_path) as (
            host,
            grant,
        ),
    ):
        # CLAUDE_DEFAULT_ENV turns tool search off, so the tools are offered to the model up front.
        env = client_env(
            tmp_path,
            grant,
            ANTHROPIC_BASE_URL=fake.base_url,
            ANTHROPIC_API_KEY=FAKE_KEY,
            **CLAUDE_DEFAULT_ENV,
        )
        printed = grant.configs["claude_code"][transport]
        argv = [claude, "-p", "--allowedTools", "mcp__mcphost", "--permission-mode", "dontAsk"]
        if form == "add-json":
            await run(["bash", "-c", printed["command"]], env, project)
            stored = (tmp_path / "home" / ".claude.json").read_text()
            assert grant.token not in stored  # the shell did not expand the token into the config
        else:
            (project / "mcphost.json").write_text(json.dumps(printed["mcp_config"]))
            argv += ["--mcp-config", "mcphost.json", "--strict-mcp-config"]
        answer = await run([*argv, "--max-turns", "4", "--", "Save a note."], env, project)
        assert "Done:" in answer
        assert "mcp__mcphost__artifacts_create" in fake.agent_turns[0].offered_tools
        await assert_created(host, grant)


@pytest.mark.parametrize("transport", ["http", "bridge"])
@pytest.mark.parametrize("form", ["overrides", "config.toml"])
async def test_codex_calls_a_granted_write_tool_through_each_printed_config(
    tmp_path: Path, transport: str, form: str
) -> None:
    require_cli("codex")
    project = tmp_path / "project"
    project.mkdir()
    async with (
        fake_openai(calls_then_answers([CREATE], "Done: {results}")) as fake,
        granted(tmp_path) as (
            host,
            grant,
        ),
    ):
        codex_home = tmp_path / "home" / ".codex"
        codex_home.mkdir(parents=True)
        provider = (
            '[model_providers.fake]\nname = "fake"\n'
            f'base_url = {json.dumps(fake.base_url)}\nwire_api = "responses"\nenv_key = "OPENAI_API_KEY"\n'
        )
        printed = grant.configs["codex"][transport]
        table = printed["config_toml"] if form == "config.toml" else ""
        (codex_home / "config.toml").write_text(
            f'model_provider = "fake"\nmodel = "mcphost-fake"\n{CODEX_CONFIG}\n{provider}\n{table}'
        )
        env = client_env(tmp_path, grant, OPENAI_API_KEY=FAKE_KEY, CODEX_HOME=str(codex_home))
        prefix = printed["command"] if form == "overrides" else "codex"
        line = f"{prefix} exec --json --skip-git-repo-check -- 'Save a note.'"
        out = await run(["bash", "-c", line], env, project)
        assert "Done:" in out
        assert "mcp__mcphost__artifacts_create" in fake.agent_turns[0].offered_tools
        await assert_created(host, grant)
