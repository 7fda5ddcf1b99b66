"""A plugin (`test/parking`) whose runner asks the person a question and parks, without a harness CLI.

A run whose input is not a continuation emits `interaction.requested` (one question) and then waits: the
host turns the question into a parked `interaction` approval and stops the run, which ends `parked`. The
decision's continuation run (same agent and conversation; its input says what the person answered, and
its event's `data.continuation` names the approval) replies with that input and completes.
"""

from __future__ import annotations

import anyio

from mcphost.protocol.results import InteractionRequested, InteractionRequestedData
from mcphost_runners.sdk import AgentRunContext, AgentRunner, RunOutput, serve

QUESTION = {"question": "Which colour?", "options": [{"label": "green"}, {"label": "blue"}]}
REPLY_PREFIX = "continued: "


class Parking(AgentRunner):
    name = "default"

    async def run(self, ctx: AgentRunContext, out: RunOutput) -> None:
        text = ctx.input.text or ""
        if text.startswith(("The person answered", "Nobody answered")):
            await out.message(REPLY_PREFIX + text)
            return
        data = InteractionRequestedData(questions=[QUESTION], tool_use_id="ask_1")
        await out.emit(InteractionRequested(run_id=ctx.run_id, data=data))
        await anyio.sleep_forever()  # the host parks the run: it cancels this runner


def main() -> None:
    serve(Parking(), author="test", plugin="parking")


if __name__ == "__main__":
    main()
