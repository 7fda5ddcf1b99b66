"""An SDK plugin (`test/sdk`) whose runners exercise each rule of `mcphost_runners.sdk.serve()`.

Runners: `everything` (one result of every builder method), `boom` (raises), `sleepy` (sleeps until
cancelled), `quiet` (returns without a result), `printer` (print()s to stdout, then replies), `after-end`
(emits after run.completed), `parallel` (emits from two tasks at once), `bulk` (emits ~1 MiB, far
more than a pipe holds, so its writes must wait for the reader), `flood` (sends in a loop awaiting nothing
else), `not-a-number` (writes NaN to state and lets the refusal escape).
"""

from __future__ import annotations

import anyio

from mcphost_runners.sdk import AgentRunContext, AgentRunner, Permissions, RunOutput, Usage, serve


class Everything(AgentRunner):
    name = "everything"
    permissions = Permissions(state=["read", "write"], artifacts=["create"])

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        await out.delta("he")
        await out.tool_started("call_1", "search", {"q": "x"})
        await out.tool_completed("call_1", "search", result_preview="found")
        await out.state("conversation", "seen", True)
        await out.artifact(name="note.txt", mime_type="text/plain", content=b"note")
        await out.action("reaction.add", target={"message_id": "m1"}, payload={"emoji": "+1"})
        await out.message("hello")
        await out.completed(usage=Usage(input_tokens=3, output_tokens=5))


class Boom(AgentRunner):
    name = "boom"

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        await out.delta("about to fail")
        raise ValueError("boom happened")


class Sleepy(AgentRunner):
    name = "sleepy"

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        await out.delta("sleeping")
        await anyio.sleep(60)


class Quiet(AgentRunner):
    name = "quiet"

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        return


class Printer(AgentRunner):
    name = "printer"

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        print("a stray print that must not reach the protocol")
        await out.message("printed")


class AfterEnd(AgentRunner):
    name = "after-end"

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        await out.completed("done")
        await out.delta("too late")


class Parallel(AgentRunner):
    name = "parallel"

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        async def chatter(tag: str) -> None:
            for i in range(25):
                await out.delta(f"{tag}{i}")

        async with anyio.create_task_group() as tg:
            tg.start_soon(chatter, "a")
            tg.start_soon(chatter, "b")
        await out.completed("both done")


class Bulk(AgentRunner):
    name = "bulk"

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        for i in range(250):
            await out.delta(f"{i:03d}" + "x" * 4096)
        await out.completed("bulk done")


class Flood(AgentRunner):
    """Sends results in a loop that awaits nothing else, until cancelled."""

    name = "flood"

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        while True:
            await out.delta("x" * 1024)


class NotANumber(AgentRunner):
    """Writes NaN to state, which the SDK refuses (`ValueError`) instead of sending null."""

    name = "not-a-number"

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        await out.delta("scoring")
        await out.state("conversation", "score", {"mean": float("nan")})


if __name__ == "__main__":
    serve(
        Everything(),
        Boom(),
        Sleepy(),
        Quiet(),
        Printer(),
        AfterEnd(),
        Parallel(),
        Bulk(),
        Flood(),
        NotANumber(),
        author="test",
        plugin="sdk",
        version="0.0.1",
    )
