"""Inspection grants from the command line: `grant`, `revoke`, `cancel` and the MCP client configs.

Owns creating an inspection grant and printing its endpoint, its token and ready-to-paste configs for
Claude Code, Codex, VS Code and Cursor (direct HTTP and through `mcphost-bridge`), and `revoke`, which
ends a grant or requests a run's cancel, and `cancel`, which does the same through the API with
`--url` and refuses a run that has already ended. Does not own what a grant allows nor how it is stored
(`mcphost.inspection`, `mcphost.grants`).

Invariants: the token is printed exactly once, in the guide's SECRET block (or the `--json` document);
every config reads it from `$MCPHOST_RUN_TOKEN` (or asks for it) rather than containing it. Shell lines
are quoted with `shlex`, so `${MCPHOST_RUN_TOKEN}` reaches the client's config unexpanded (the client
expands it when it starts the server). The bridge is named by absolute path (`bridge_command`), so a
config works outside `uv run` and from any directory. Codex entries are `required` (Codex drops an
optional server that is slow to start, without a word) and approve the grant's write tools (`codex exec`
refuses a tool that needs approval).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcphost.app import open_database
from mcphost.cli._common import EXIT_OK, EXIT_USAGE, dump, fail
from mcphost.config import Settings, host_module_command
from mcphost.context import TOKEN_ENV, mcp_url
from mcphost.inspection import INSPECTION_WRITE_TOOLS, create_grant, end_grant
from mcphost.serving import advertised_url

MAX_REASON_CHARS = 500
"""The longest `--reason` (as `POST /v1/runs/{id}/cancel` takes it)."""

SERVER_NAME = "mcphost"
"""The name every printed config gives the server: Claude Code and Codex call its tools `mcp__mcphost__*`."""
CODEX_STARTUP_TIMEOUT_S = 30
"""Codex waits this long for the server to start; only `required = true` makes it wait at all (an optional
server that is not up within about a second is dropped silently)."""


def bridge_command() -> list[str]:
    """The bridge as an absolute command that works from any directory, with or without the venv on PATH:
    the `mcphost-bridge` script installed next to the running interpreter, else `<python> -P -m mcphost_bridge`
    (`host_module_command`: the client's working directory stays off the module search path)."""
    script = Path(sys.executable).parent / "mcphost-bridge"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return host_module_command("mcphost_bridge")


def _toml(value: str | bool | int | list[str]) -> str:
    """A TOML value (JSON's string escapes are TOML's basic-string escapes)."""
    return json.dumps(value) if not isinstance(value, bool) else str(value).lower()


def mcp_client_configs(
    url: str,
    *,
    bridge: Sequence[str] | None = None,
    write_tools: Sequence[str] = (),
    approve_all: bool = False,
) -> dict[str, dict[str, Any]]:
    """Ready-to-paste MCP client configs for `url`, reading the token from $MCPHOST_RUN_TOKEN.

    Args:
        bridge: the bridge command (default: `bridge_command()`); `--url URL` is appended.
        write_tools: tools Codex must run without asking (it refuses tools that need approval when its
            approval policy is `never`, as in `codex exec`).
        approve_all: approve every tool of the server in Codex (a grant that names host tools, which
            cannot be listed here).
    """
    command, *bridge_args = [*(bridge or bridge_command()), "--url", url]
    env_ref = "${" + TOKEN_ENV + "}"
    # `alwaysLoad`: Claude Code connects other servers in the background and may send its first turn
    # before they have listed their tools; this one it waits for (no MCP_CONNECTION_NONBLOCKING needed).
    claude_http = {
        "type": "http",
        "url": url,
        "headers": {"Authorization": f"Bearer {env_ref}"},
        "alwaysLoad": True,
    }
    claude_bridge = {
        "type": "stdio",
        "command": command,
        "args": bridge_args,
        "env": {TOKEN_ENV: env_ref},
        "alwaysLoad": True,
    }
    vscode_input = [
        {"type": "promptString", "id": "mcphost-token", "description": "mcphost run token", "password": True}
    ]
    server = f"mcp_servers.{SERVER_NAME}"
    codex_common: list[tuple[str, str | bool | int | list[str]]] = [
        ("required", True),
        ("startup_timeout_sec", CODEX_STARTUP_TIMEOUT_S),
    ]
    if approve_all:
        codex_common.append(("default_tools_approval_mode", "approve"))
    codex_tools = [(f"tools.{tool}.approval_mode", "approve") for tool in write_tools]
    codex_http: list[tuple[str, str | bool | int | list[str]]] = [
        ("url", url),
        ("bearer_token_env_var", TOKEN_ENV),
        *codex_common,
    ]
    codex_bridge: list[tuple[str, str | bool | int | list[str]]] = [
        ("command", command),
        ("args", bridge_args),
        ("env_vars", [TOKEN_ENV]),
        *codex_common,
    ]

    def codex(settings: list[tuple[str, str | bool | int | list[str]]]) -> dict[str, Any]:
        overrides = [f"{server}.{key}={_toml(value)}" for key, value in [*settings, *codex_tools]]
        table = f"[{server}]\n" + "".join(f"{key} = {_toml(value)}\n" for key, value in settings)
        for tool in write_tools:
            table += f'\n[{server}.tools.{tool}]\napproval_mode = "approve"\n'
        shell = shlex.join(["codex", *(arg for o in overrides for arg in ("-c", o))])
        return {"overrides": overrides, "command": shell, "config_toml": table}

    return {
        "claude_code": {
            "http": {
                "command": shlex.join(["claude", "mcp", "add-json", SERVER_NAME, json.dumps(claude_http)]),
                "mcp_config": {"mcpServers": {SERVER_NAME: claude_http}},
            },
            "bridge": {
                "command": shlex.join(["claude", "mcp", "add-json", SERVER_NAME, json.dumps(claude_bridge)]),
                "mcp_config": {"mcpServers": {SERVER_NAME: claude_bridge}},
            },
        },
        "codex": {"http": codex(codex_http), "bridge": codex(codex_bridge)},
        "vscode": {
            "http": {
                "servers": {
                    SERVER_NAME: {
                        "type": "http",
                        "url": url,
                        "headers": {"Authorization": "Bearer ${input:mcphost-token}"},
                    }
                },
                "inputs": vscode_input,
            },
            "bridge": {
                "servers": {
                    SERVER_NAME: {
                        "type": "stdio",
                        "command": command,
                        "args": bridge_args,
                        "env": {TOKEN_ENV: "${input:mcphost-token}"},
                    }
                },
                "inputs": vscode_input,
            },
        },
        "cursor": {
            "http": {
                "mcpServers": {
                    SERVER_NAME: {"url": url, "headers": {"Authorization": "Bearer ${env:" + TOKEN_ENV + "}"}}
                }
            },
            "bridge": {
                "mcpServers": {
                    SERVER_NAME: {
                        "command": command,
                        "args": bridge_args,
                        "env": {TOKEN_ENV: "${env:" + TOKEN_ENV + "}"},
                    }
                }
            },
        },
    }


def _print_grant_guide(
    run_id: str, url: str, token: str, configs: dict[str, dict[str, Any]], summary: str
) -> None:
    def block(obj: Any) -> str:
        return json.dumps(obj, indent=2)

    cc, codex, vscode, cursor = configs["claude_code"], configs["codex"], configs["vscode"], configs["cursor"]
    rule = "-" * 78
    print(f"{summary}\nMCP endpoint: {url}\n")
    print(
        f"{rule}\nSECRET - the run token, shown only this once. Anyone holding it can read what the grant allows."
    )
    print(f"export {TOKEN_ENV}='{token}'\n{rule}")
    print(
        f"The configs below read the token from ${TOKEN_ENV}: export it in the shell that starts the client.\n"
    )
    print("## Claude Code\n# direct HTTP:")
    print(cc["http"]["command"])
    print("# through the stdio bridge:")
    print(cc["bridge"]["command"])
    print("# or save as mcphost.json and start `claude --mcp-config mcphost.json` (direct HTTP):")
    print(block(cc["http"]["mcp_config"]))
    print("# (through the bridge):")
    print(block(cc["bridge"]["mcp_config"]))
    print("\n## Codex\n# direct HTTP:")
    print(codex["http"]["command"])
    print("# through the stdio bridge:")
    print(codex["bridge"]["command"])
    print("# or in ~/.codex/config.toml (direct HTTP):")
    print(codex["http"]["config_toml"], end="")
    print("# (through the bridge):")
    print(codex["bridge"]["config_toml"], end="")
    print("\n## VS Code (.vscode/mcp.json; it asks for the token) - direct HTTP:")
    print(block(vscode["http"]))
    print("# through the stdio bridge:")
    print(block(vscode["bridge"]))
    print("\n## Cursor (.cursor/mcp.json) - direct HTTP:")
    print(block(cursor["http"]))
    print("# through the stdio bridge:")
    print(block(cursor["bridge"]))
    print(f"\nEnd it early with: mcphost revoke {run_id}")


async def cmd_grant(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as stores:
        made = await create_grant(
            stores,
            conversation_id=args.conversation,
            thread_id=args.thread,
            ttl_s=args.ttl,
            tools=args.tools or (),
            host_tools=args.host_tools or (),
            write=args.write,
        )
    run_id = made.run.run_id
    url = mcp_url(args.url or advertised_url(settings), run_id)
    write_tools = [tool for tool in INSPECTION_WRITE_TOOLS if tool in made.grant.tools]
    configs = mcp_client_configs(url, write_tools=write_tools, approve_all=bool(made.grant.host_tool_globs))
    expires = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(made.grant.deadline_at))
    if args.json:
        dump(
            {
                "run_id": run_id,
                "url": url,
                "token": made.token,
                "token_env": TOKEN_ENV,
                "expires_at": made.grant.deadline_at,
                "conversation_id": args.conversation,
                "thread_id": args.thread,
                "tools": sorted(made.grant.tools),
                "host_tool_globs": list(made.grant.host_tool_globs),
                "write": args.write,
                "configs": configs,
            }
        )
        return EXIT_OK
    access = "read and create artifacts" if args.write else "read-only"
    summary = (
        f"Inspection grant {run_id} on conversation {args.conversation!r}"
        + (f" thread {args.thread!r}" if args.thread else "")
        + f" ({access}; tools: {', '.join(sorted(made.grant.tools))}; host tools: "
        + (", ".join(made.grant.host_tool_globs) or "none")
        + f"), valid until {expires}."
    )
    _print_grant_guide(run_id, url, made.token, configs, summary)
    return EXIT_OK


async def cmd_revoke(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as stores:
        run = await stores.runs.get(args.run_id)
        if run.status.is_terminal:
            print(
                f"{run.run_id} has already ended ({run.status}); its token no longer works", file=sys.stderr
            )
            return EXIT_OK
        if run.runner_id is None:
            run = await end_grant(stores, run.run_id, "revoked with mcphost revoke")
            print(
                f"{run.run_id} revoked: its token stops working within seconds on every host", file=sys.stderr
            )
        else:
            await stores.runs.request_cancel(run.run_id, "revoked with mcphost revoke")
            print(
                f"{run.run_id} is a run of {run.runner_id}: cancel requested (its host ends it)",
                file=sys.stderr,
            )
    return EXIT_OK


async def cancel_in_database(args: argparse.Namespace, settings: Settings) -> int:
    """`mcphost cancel` without `--url` (`_send.cmd_cancel`): in the database, where the host running the
    run sees the request and ends it."""
    reason = args.reason or "cancelled with mcphost cancel"
    if len(reason) > MAX_REASON_CHARS or not reason.isprintable():
        return fail(f"--reason takes at most {MAX_REASON_CHARS} printable characters.", EXIT_USAGE)
    async with open_database(settings) as stores:
        run = await stores.runs.get(args.run_id)
        if run.status.is_terminal:
            return fail(f"Run {run.run_id!r} has already ended ({run.status}); nothing to cancel.")
        if run.runner_id is None:
            await end_grant(stores, run.run_id, reason)
            print(f"{run.run_id} is an inspection grant: revoked", file=sys.stderr)
        else:
            await stores.runs.request_cancel(run.run_id, reason)
            print(f"{run.run_id}: cancel requested (the host running it ends it)", file=sys.stderr)
    return EXIT_OK
