"""Inspection grants from the command line: `grant`, `revoke`, `cancel` and the MCP client configs.

Owns creating an inspection grant and printing its endpoint, its token and ready-to-paste configs for
Claude Code, Codex, VS Code and Cursor (direct HTTP and through `mcphost-bridge`), and `revoke`, which
ends a grant or requests a run's cancel, and `cancel`, which does the same through the API with
`--url` and refuses a run that has already ended. Does not own what a grant allows nor how it is stored
(`mcphost.inspection`, `mcphost.grants`).

Invariants: the token is printed exactly once, in the guide's SECRET block (or the `--json` document);
every config reads it from `$MCPHOST_RUN_TOKEN` (or asks for it) rather than containing it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from mcphost.app import open_database
from mcphost.cli._common import EXIT_OK, dump, fail
from mcphost.config import Settings
from mcphost.context import TOKEN_ENV, mcp_url
from mcphost.inspection import create_grant, end_grant
from mcphost.protocol import JSONObject
from mcphost.serving import advertised_url

_TOKEN_REF = "@@MCPHOST_RUN_TOKEN@@"


def _double_quoted(text: str) -> str:
    """`text` inside double quotes for a POSIX shell, with the token placeholder left to expand."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`").replace("$", "\\$")
    return '"' + escaped.replace(_TOKEN_REF, f"${TOKEN_ENV}") + '"'


def _toml_str(text: str) -> str:
    return json.dumps(text)


def mcp_client_configs(url: str) -> dict[str, dict[str, Any]]:
    """Ready-to-paste MCP client configs for `url`, reading the token from $MCPHOST_RUN_TOKEN."""
    bridge_args = ["--url", url]
    env_ref = "${" + TOKEN_ENV + "}"
    claude_http = {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {env_ref}"}}
    claude_bridge = {
        "type": "stdio",
        "command": "mcphost-bridge",
        "args": bridge_args,
        "env": {TOKEN_ENV: env_ref},
    }
    shell_http = json.dumps({**claude_http, "headers": {"Authorization": f"Bearer {_TOKEN_REF}"}})
    vscode_input = [
        {"type": "promptString", "id": "mcphost-token", "description": "mcphost run token", "password": True}
    ]
    toml_args = "[" + ", ".join(_toml_str(a) for a in bridge_args) + "]"
    return {
        "claude_code": {
            "http": {
                "command": f"claude mcp add-json mcphost {_double_quoted(shell_http)}",
                "mcp_config": {"mcpServers": {"mcphost": claude_http}},
            },
            "bridge": {
                "command": "claude mcp add-json mcphost " + "'" + json.dumps(claude_bridge) + "'",
                "mcp_config": {"mcpServers": {"mcphost": claude_bridge}},
            },
        },
        "codex": {
            "http": {
                "overrides": [
                    f"mcp_servers.mcphost.url={_toml_str(url)}",
                    f'mcp_servers.mcphost.bearer_token_env_var="{TOKEN_ENV}"',
                ],
                "config_toml": f'[mcp_servers.mcphost]\nurl = {_toml_str(url)}\nbearer_token_env_var = "{TOKEN_ENV}"\n',
            },
            "bridge": {
                "overrides": [
                    'mcp_servers.mcphost.command="mcphost-bridge"',
                    f"mcp_servers.mcphost.args={toml_args}",
                    f'mcp_servers.mcphost.env_vars=["{TOKEN_ENV}"]',
                ],
                "config_toml": f'[mcp_servers.mcphost]\ncommand = "mcphost-bridge"\nargs = {toml_args}\nenv_vars = ["{TOKEN_ENV}"]\n',
            },
        },
        "vscode": {
            "http": {
                "servers": {
                    "mcphost": {
                        "type": "http",
                        "url": url,
                        "headers": {"Authorization": "Bearer ${input:mcphost-token}"},
                    }
                },
                "inputs": vscode_input,
            },
            "bridge": {
                "servers": {
                    "mcphost": {
                        "type": "stdio",
                        "command": "mcphost-bridge",
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
                    "mcphost": {"url": url, "headers": {"Authorization": "Bearer ${env:" + TOKEN_ENV + "}"}}
                }
            },
            "bridge": {
                "mcpServers": {
                    "mcphost": {
                        "command": "mcphost-bridge",
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
    print("codex " + " ".join(f"-c '{o}'" for o in codex["http"]["overrides"]))
    print("# through the stdio bridge:")
    print("codex " + " ".join(f"-c '{o}'" for o in codex["bridge"]["overrides"]))
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
    url = mcp_url(advertised_url(settings), run_id)
    configs = mcp_client_configs(url)
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
            await stores.runs.request_cancel(run.run_id)
            print(
                f"{run.run_id} is a run of {run.runner_id}: cancel requested (its host ends it)",
                file=sys.stderr,
            )
    return EXIT_OK


async def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    """Cancel a run (an inspection grant is revoked): through `POST /v1/runs/{id}/cancel` with `--url`,
    else in the database, where the host running it sees the request and ends it."""
    if args.url:
        return await _cancel_over_http(args)
    async with open_database(settings) as stores:
        run = await stores.runs.get(args.run_id)
        if run.status.is_terminal:
            return fail(f"Run {run.run_id!r} has already ended ({run.status}); nothing to cancel.")
        if run.runner_id is None:
            await end_grant(stores, run.run_id, "cancelled with mcphost cancel")
            print(f"{run.run_id} is an inspection grant: revoked", file=sys.stderr)
        else:
            await stores.runs.request_cancel(run.run_id)
            print(f"{run.run_id}: cancel requested (the host running it ends it)", file=sys.stderr)
    return EXIT_OK


async def _cancel_over_http(args: argparse.Namespace) -> int:
    import httpx2

    key = os.environ.get(args.api_key_env)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    url = args.url.rstrip("/")
    async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        try:
            response = await client.post(f"/v1/runs/{args.run_id}/cancel", json={"reason": args.reason})
        except httpx2.TransportError as exc:
            return fail(f"cannot reach mcphost at {url}: {exc}. Is `mcphost serve` running there?")
    body: JSONObject = response.json() if response.content else {}
    if response.status_code >= 400:
        error: JSONObject = body.get("error") or {}
        return fail(f"{error.get('code', response.status_code)}: {error.get('message', response.text[:200])}")
    print(f"{args.run_id}: {body.get('status')}, cancel requested", file=sys.stderr)
    return EXIT_OK
