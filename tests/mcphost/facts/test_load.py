"""Many runs at once: 100 concurrent runs, each making 20 MCP calls over HTTP, all answered and audited."""

from __future__ import annotations

import anyio
import pytest

from tests.mcphost.facts._helpers import LEGACY, MODERN, RunHandle, Served, connect, ok

RUNS = 100
CALLS = 20


@pytest.mark.slow
async def test_a_hundred_concurrent_runs_of_twenty_calls_all_succeed_with_complete_audits(
    served: Served,
) -> None:
    runs = [await served.start_run(conversation_id=f"conv-{i}", text=f"message {i}") for i in range(RUNS)]
    answered: dict[str, int] = {}

    async def work(index: int, run: RunHandle) -> None:
        mode = LEGACY if index % 4 == 0 else MODERN
        async with connect(served, run, mode=mode) as client:
            for n in range(CALLS):
                match n % 4:
                    case 0:
                        page = await ok(client, "history_page", {"limit": 5})
                        assert page["items"][0]["content"] == f"message {index}"
                    case 1:
                        await ok(client, "state_set", {"scope": "conversation", "key": f"k{n}", "value": n})
                    case 2:
                        got = await ok(client, "state_get", {"scope": "conversation", "key": f"k{n - 1}"})
                        assert got["value"] == n - 1
                    case _:
                        assert (await ok(client, "run_context"))["run_id"] == run.run_id
                answered[run.run_id] = answered.get(run.run_id, 0) + 1

    async with anyio.create_task_group() as tg:
        for index, run in enumerate(runs):
            tg.start_soon(work, index, run)

    assert answered == {run.run_id: CALLS for run in runs}
    for run in runs:
        rows = await served.audit(run)
        assert [r.seq for r in rows] == list(range(1, CALLS + 1))
        assert {r.outcome for r in rows} == {"ok"}
