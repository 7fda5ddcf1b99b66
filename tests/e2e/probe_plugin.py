"""`plugin:test/probe/default`: a stdio plugin runner that answers from the host's per-run MCP endpoint.

A test peer (not a mock): it reaches host facts exactly as any runner does, through `ctx.context.mcp`
over Streamable HTTP with the `mcp` SDK client. Each run's behaviour is chosen by `ctx.input.text`:

    probe            lists tools, calls run_context and history_page; replies with JSON
                     {tools, prompt, history, url}
    hold:SECONDS     calls run_context every 0.1 s for SECONDS and at least HOLD_MIN_CALLS times (a run
                     that needs its MCP endpoint while the host drains, however slow the machine),
                     then replies "held N"
    leak:PATH        writes the run token to PATH (so a test can try it after the run), then probes
    keep:SECONDS:PATH
                     writes the run token to PATH, then stays running for SECONDS without MCP calls (so
                     a test can use the run's endpoint itself), then replies "kept"
    steps:PATH       writes the run token to PATH, sends the delta "step 1", waits for the file PATH.release,
                     sends "step 2".."step 4", writes PATH.produced, waits for PATH.finish, then replies
                     "stepped" (so a test can stop its host between the steps)
    tick:COUNT:SECONDS:PATH
                     writes the run token to PATH, then replies "tick I TAG" for I in 1..COUNT, one every
                     SECONDS (TAG: `token_tag` of the token, telling a requeued run's attempts apart)
    warm:SECONDS:PATH
                     writes the warm session's URL and token (`context.mcp.session`, offered when the
                     agent's config says `warm = true`) to PATH as JSON, then stays running for SECONDS
                     like `keep:` (so a test can use the session endpoint while the run is current)
    stderr:TEXT      writes TEXT and the run id to stderr (the plugin's diagnostics channel), then replies
                     "said"
    anything else    replies with the text
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from typing import Any, cast

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcphost_runners.sdk import AgentRunContext, AgentRunner, Permissions, RunOutput, serve

HOLD_MIN_CALLS = 10


def _structured(result: types.CallToolResult) -> dict[str, Any]:
    # Not tests._json.structured: this plugin runs as a script, where the `tests` package is not importable.
    data: object = result.structured_content
    assert isinstance(data, dict), result
    return cast(dict[str, Any], data)


def token_tag(token: str) -> str:
    """A short name of a run token (a claim's fenced token differs per attempt), not the token itself."""
    return hashlib.sha256(token.encode()).hexdigest()[:8]


async def _write_file(path: str, text: str) -> None:
    written = anyio.Path(path + ".part")  # renamed when complete: a reader never sees half of it
    await written.write_text(text)
    await written.rename(path)


async def _wait_for(path: str) -> None:
    while True:
        if await anyio.Path(path).exists():
            return
        await anyio.sleep(0.05)


class ProbeRunner(AgentRunner):
    name = "default"
    permissions = Permissions(
        history=["page"], events=["get", "page"], artifacts=["metadata", "read"], knowledge=["list"]
    )

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        text = ctx.input.text or ""
        mcp = ctx.context.mcp
        if mcp is None:
            await out.failed("runner.mcp_unavailable", "no MCP access in the context")
            return
        if text.startswith("warm:"):
            seconds, path = text.removeprefix("warm:").split(":", 1)
            session = mcp.session
            found = {} if session is None else {"url": session.url, "headers": session.headers}
            await _write_file(path, json.dumps(found))
            await anyio.sleep(float(seconds))
            await out.message("kept")
            return
        token = mcp.headers.get("Authorization", "").removeprefix("Bearer ")
        if text.startswith("keep:"):
            seconds, path = text.removeprefix("keep:").split(":", 1)
            await _write_file(path, token)
            await anyio.sleep(float(seconds))
            await out.message("kept")
            return
        if text.startswith("tick:"):
            count, seconds, path = text.removeprefix("tick:").split(":", 2)
            await _write_file(path, token)
            for index in range(1, int(count) + 1):
                await out.message(f"tick {index} {token_tag(token)}")
                await anyio.sleep(float(seconds))
            return
        if text.startswith("stderr:"):
            print(f"{text.removeprefix('stderr:')} ({ctx.run_id})", file=sys.stderr, flush=True)
            await out.message("said")
            return
        if text.startswith("steps:"):
            path = text.removeprefix("steps:")
            await _write_file(path, token)
            await out.delta("step 1")
            await _wait_for(path + ".release")
            for step in (2, 3, 4):
                await out.delta(f"step {step}")
            await anyio.Path(path + ".produced").write_text("")
            await _wait_for(path + ".finish")
            await out.message("stepped")
            return
        if text.startswith("leak:"):
            await anyio.Path(text.removeprefix("leak:")).write_text(token, encoding="utf-8")
            text = "probe"
        if text != "probe" and not text.startswith("hold:"):
            await out.message(text)
            return
        async with (
            httpx2.AsyncClient(headers=mcp.headers, timeout=httpx2.Timeout(30, read=60)) as http,
            Client(streamable_http_client(mcp.url, http_client=http)) as client,  # pyright: ignore[reportArgumentType]
        ):
            if text.startswith("hold:"):
                until, calls = time.monotonic() + float(text.removeprefix("hold:")), 0
                while time.monotonic() < until or calls < HOLD_MIN_CALLS:
                    result = await client.call_tool("run_context", {})
                    if result.is_error:
                        await out.failed(
                            "runner.error", f"run_context failed after {calls} calls: {result.content}"
                        )
                        return
                    calls += 1
                    await anyio.sleep(0.1)
                await out.message(f"held {calls}")
                return
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            context = _structured(await client.call_tool("run_context", {}))
            history = _structured(await client.call_tool("history_page", {"limit": 10}))
        config: dict[str, Any] = context.get("config") or {}
        reply = {
            "tools": tools,
            "prompt": config.get("prompt"),
            "history": [item["content"] for item in history["items"]],
            "url": mcp.url,
        }
        await out.message(json.dumps(reply))


if __name__ == "__main__":
    serve(ProbeRunner(), author="test", plugin="probe", version="0.1.0")
