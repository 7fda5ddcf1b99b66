"""A plugin (`test/model-caller`) whose one runner mixes MCP calls and host model calls, as an agent loop
does: the console's tests draw both on a run's timeline.

`default`, for the input `models:FIRST,SECOND` (default: the first and last granted models): reads
conversation state over MCP, asks FIRST over the run's Anthropic Messages endpoint (not streamed; a
model that fails falls back there), writes state over MCP, asks SECOND, streamed, and answers with both
replies. The run token from
`ctx.context.mcp.headers` authenticates the model calls, as it does the MCP ones.
"""

from __future__ import annotations

import json

import httpx2

from mcphost_runners.sdk import AgentRunContext, AgentRunner, Permissions, RunOutput, serve


class ModelCaller(AgentRunner):
    name = "default"
    permissions = Permissions(state=["read", "write"], models=["invoke", "stream"])

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        access = ctx.context
        assert access.models is not None, "the agent grants no host model"
        assert access.mcp is not None
        granted = [model.model_id for model in ctx.resources.models]
        text = ctx.input.text or ""
        first_model, second_model = (
            text.removeprefix("models:").split(",", 1)
            if text.startswith("models:")
            else (granted[0], granted[-1])
        )
        await out.api.state_get("conversation", "model-caller")
        url = f"{access.models.anthropic}/v1/messages"
        ask = {"max_tokens": 64, "messages": [{"role": "user", "content": text or "hi"}]}
        async with httpx2.AsyncClient(headers=access.mcp.headers, timeout=60, trust_env=False) as http:
            first = await http.post(url, json={"model": first_model, **ask})
            first.raise_for_status()
            await out.api.state_set("conversation", "model-caller", 1)
            streamed: list[str] = []
            async with http.stream(
                "POST", url, json={"model": second_model, "stream": True, **ask}
            ) as answer:
                answer.raise_for_status()
                async for line in answer.aiter_lines():
                    if line.startswith("data:"):
                        data = json.loads(line[5:])
                        if data.get("type") == "content_block_delta":
                            streamed.append(data["delta"].get("text", ""))
        said = "".join(block.get("text", "") for block in first.json()["content"])
        await out.message(f"{said} / {''.join(streamed)}")
        await out.completed()


if __name__ == "__main__":
    serve(ModelCaller(), author="test", plugin="model-caller", version="0.0.1")
