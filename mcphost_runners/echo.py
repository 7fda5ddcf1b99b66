"""`plugin:mcphost/echo/default`: replies with the input text and counts turns in conversation state.

The reference runner of the SDK and the workhorse of the tests (`python -m mcphost_runners.echo`). It needs no
model and no MCP calls: the previous turn count comes from the context's state snapshot.
"""

from __future__ import annotations

from mcphost_runners.sdk import (
    AgentRunContext,
    AgentRunner,
    Capabilities,
    ContextSupport,
    Permissions,
    RunOutput,
    serve,
)


class EchoRunner(AgentRunner):
    """Echoes `ctx.input.text`; streams it first when the delivery surface supports streaming."""

    name = "default"
    label = {"en": "Echo"}
    description = {"en": "Replies with the input text and counts the conversation's turns."}
    capabilities = Capabilities(streaming=True)
    permissions = Permissions(state=["read", "write"])
    context_support = ContextSupport(calls_mcp=False)  # state comes with the context and goes out as results

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        text = ctx.input.text or ""
        if ctx.delivery.supports_streaming:
            await out.delta(text)
        await out.message(text)
        if ctx.conversation is not None:  # the conversation scope needs a conversation
            previous = ctx.state.conversation.get("turns")
            turns = previous if isinstance(previous, int) and not isinstance(previous, bool) else 0
            await out.state("conversation", "turns", turns + 1)
        await out.completed()


def main() -> None:
    serve(
        EchoRunner(),
        author="mcphost",
        plugin="echo",
    )


if __name__ == "__main__":
    main()
