"""A plugin runner in a dozen lines: it reads the conversation's history over the run's MCP server.

Register it in mcphost.toml and send it a few messages:

    [[plugins]]
    command = ["python", "examples/plugin_runner.py"]

    [[agents]]
    id = "recall"
    runner = "plugin:example/recall/default"

    uv run mcphost run "hello" && uv run mcphost run "and now?"
"""

from mcphost_runners.sdk import AgentRunContext, AgentRunner, Permissions, RunOutput, serve


class Recall(AgentRunner):
    permissions = Permissions(history=["page"])  # the most this runner asks of the host

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        page = await out.api.history_page(before_cursor=ctx.context.latest_cursor, limit=20)
        said = [item.content for item in page.items if item.role == "user"]
        earlier = f"before that you said {said[0]!r}" if said else "that is the first thing you said"
        await out.message(f"You said {ctx.input.text!r}; {earlier}.")


if __name__ == "__main__":
    serve(Recall(), author="example", plugin="recall", version="1.0.0")
