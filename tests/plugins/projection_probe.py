"""`plugin:test/projection/default`: a stdio plugin runner that reports what the host projected into its
run (`out.projection`) and what its per-run MCP server serves of skills, as one JSON message.

A test peer (not a mock): it reads the projection from `runner/run` as any runner does, writes the
harness folder with the bundled harness runners' own code (`prepare_workspace`, `write_projection`), and
reaches the run's MCP server with the `mcp` SDK client. The input text is a JSON object:

    {"vars": ["GH_TOKEN", ...],      report sha256 of each projected variable (null: absent), and whether
                                     the plugin process's own environment has it
     "reads": ["skill://...", ...],  read each resource: {"text_sha256"} or {"error": <code>}
     "harness": "<data_dir>"}        write the harness folder (the harness runners' `data_dir` there)
                                     and list its skill files (path → sha256, executable)

Never echoes a secret's value: only hashes of it leave the process.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, cast

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcphost_runners._harness_files import write_projection
from mcphost_runners.harness import ExternalSession, HarnessConfig, prepare_workspace
from mcphost_runners.sdk import AgentRunContext, AgentRunner, Permissions, RunOutput, serve


def _sha(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


class ProjectionRunner(AgentRunner):
    name = "default"
    permissions = Permissions()

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        asked: dict[str, Any] = json.loads(ctx.input.text or "{}")
        projection = out.projection
        report: dict[str, Any] = {
            "env": {
                v: (_sha(projection.env[v]) if v in projection.env else None) for v in asked.get("vars", [])
            },
            "process_env": {v: v in os.environ for v in asked.get("vars", [])},
            "workspace": projection.workspace,
            "skills": {s.skill_id: [f.path for f in s.files] for s in projection.skills},
        }
        if asked.get("harness"):
            config = HarnessConfig.model_validate({"data_dir": asked["harness"]})
            workspace = prepare_workspace(ctx, config, ExternalSession(), projection)
            write_projection(ctx, workspace.root, workspace.projection, skills=projection.skills)
            skills_root = workspace.cwd / ".claude" / "skills"
            report["harness_cwd"] = str(workspace.cwd)
            report["harness_files"] = {
                str(p.relative_to(skills_root)): {
                    "sha256": _sha(p.read_bytes()),
                    "executable": os.access(p, os.X_OK),
                }
                for p in sorted(skills_root.rglob("*"))
                if p.is_file()
            }
        mcp = ctx.context.mcp
        assert mcp is not None
        async with (
            httpx2.AsyncClient(headers=mcp.headers, timeout=httpx2.Timeout(30, read=60)) as http,
            Client(streamable_http_client(mcp.url, http_client=http)) as client,  # pyright: ignore[reportArgumentType]
        ):
            listed = await client.list_resources()
            report["resources"] = sorted(str(r.uri) for r in listed.resources)
            reads: dict[str, Any] = {}
            for uri in asked.get("reads", []):
                try:
                    read = await client.read_resource(uri)
                except MCPError as exc:
                    data = cast(object, exc.data)
                    code = cast(dict[str, Any], data).get("code") if isinstance(data, dict) else None
                    reads[uri] = {"error": code or str(exc)}
                    continue
                content = read.contents[0]
                if isinstance(content, types.TextResourceContents):
                    reads[uri] = {"text_sha256": _sha(content.text)}
                else:
                    reads[uri] = {"blob": True}
            report["reads"] = reads
        await out.message(json.dumps(report))


if __name__ == "__main__":
    serve(ProjectionRunner(), author="test", plugin="projection", version="0.1.0")
