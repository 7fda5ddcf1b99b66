"""`plugin:bench/hold/default`: holds each run open for `float(input.text)` seconds, then replies.

A stdio plugin on the runner SDK (`python -m bench._hold_plugin`), used to keep many runs active at
once so the host's memory per active run can be measured, and to keep a run (and its MCP endpoint)
alive while mcp-call calls it (and while models calls the host's models through it). Cancelling a run ends it at once (the SDK
reports `run.failed {code: cancelled}`).
"""

from __future__ import annotations

import anyio

from mcphost_runners.sdk import AgentRunContext, AgentRunner, Permissions, RunOutput, serve


class HoldRunner(AgentRunner):
    name = "default"
    label = {"en": "Hold"}
    description = {"en": "Sleeps for input.text seconds, then replies 'held'."}
    # mcp-call reads its history over MCP meanwhile; models calls the host's models through the run
    permissions = Permissions(history=["page"], models=["invoke", "stream"])

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        await anyio.sleep(float(ctx.input.text or "0"))
        await out.message("held")
        await out.completed()


def main() -> None:
    serve(HoldRunner(), author="bench", plugin="hold", version="0")


if __name__ == "__main__":
    main()
