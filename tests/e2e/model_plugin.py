"""`plugin:test/models/default`: a stdio plugin runner that asks a host model through the runner SDK.

A test peer: it holds no provider key and calls the host's model the way any runner would, with
`out.api.models_invoke` (the run's MCP server, `models_invoke`). `ctx.input.text` is `MODEL_ID: prompt`;
the run replies with JSON `{text, deltas, model, attempts, usage}` (the answer's text, the streamed text
deltas in order, the model that answered, the attempts, the usage), or fails with the `RunAPIError`'s
code and message (which the SDK turns into `run.failed`).
"""

from __future__ import annotations

import json

from mcphost_runners.sdk import AgentRunContext, AgentRunner, Permissions, RunOutput, TextPart, serve


class ModelRunner(AgentRunner):
    name = "default"
    permissions = Permissions(models=["invoke", "stream"])

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        model, _, prompt = (ctx.input.text or "").partition(":")
        deltas: list[str] = []

        async def collect(delta: str) -> None:
            deltas.append(delta)

        answer = await out.api.models_invoke(
            model.strip(), [{"role": "user", "content": prompt.strip()}], max_tokens=64, on_text=collect
        )
        text = "".join(p.text for p in answer.message.content if isinstance(p, TextPart))
        reply = {
            "text": text,
            "deltas": deltas,
            "model": answer.model,
            "attempts": answer.attempts,
            "usage": answer.usage.model_dump(),
        }
        await out.message(json.dumps(reply))


if __name__ == "__main__":
    serve(ModelRunner(), author="test", plugin="models", version="0.1.0")
