"""`plugin:test/asker/default`: a stdio plugin runner whose state writes an agent can mark `ask`.

A test peer (not a mock): it calls the host's per-run MCP endpoint with the `mcp` SDK client exactly as
any runner does. `set:KEY` calls `state_set` (conversation scope, value "v") and then `state_get`, and
replies with JSON `{is_error, answer, stored}`: the `state_set` call's error flag and structured answer,
and the value read back (null when nothing was written). `act:KEY` asks for the action `refund` of order
KEY with idempotency key KEY (`action.requested`) and replies "asked"; `act-json:DATA` asks for the
action whose `action.requested` data is the JSON object DATA, and replies "asked". Its manifest lists
the platform actions `refund` and `message.edit` (`permissions.platform_api`).
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcphost_runners.sdk import AgentRunContext, AgentRunner, Permissions, RunOutput, serve


class AskerRunner(AgentRunner):
    name = "default"
    permissions = Permissions(state=["read", "write"], platform_api=["refund", "message.edit"])

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        text = ctx.input.text or ""
        mcp = ctx.context.mcp
        if text.startswith("act:"):
            key = text.removeprefix("act:")
            await out.action("refund", target={"order": key}, payload={"amount": 5}, idempotency_key=key)
            await out.message("asked")
            return
        if text.startswith("act-json:"):
            data = json.loads(text.removeprefix("act-json:"))
            await out.action(
                data["action"],
                target=data.get("target"),
                payload=data.get("payload", {}),
                idempotency_key=data.get("idempotency_key"),
            )
            await out.message("asked")
            return
        if mcp is None or not text.startswith("set:"):
            await out.failed("runner.error", "expected set:KEY and an MCP endpoint")
            return
        key = text.removeprefix("set:")
        async with (
            httpx2.AsyncClient(headers=mcp.headers, timeout=httpx2.Timeout(30, read=120)) as http,
            Client(streamable_http_client(mcp.url, http_client=http)) as client,  # pyright: ignore[reportArgumentType]
        ):
            result = await client.call_tool("state_set", {"scope": "conversation", "key": key, "value": "v"})
            read = await client.call_tool("state_get", {"scope": "conversation", "key": key})
        content: dict[str, Any] = read.structured_content or {}
        stored = content.get("value")
        reply: dict[str, Any] = {
            "is_error": result.is_error,
            "answer": result.structured_content,
            "stored": stored,
        }
        await out.message(json.dumps(reply))


if __name__ == "__main__":
    serve(AskerRunner(), author="test", plugin="asker", version="0.1.0")
