"""Model budgets: reserved in the database before the upstream is called, so racing calls cannot overspend."""

from __future__ import annotations

import time

import anyio
import httpx2
import pytest

from mcphost.errors import BudgetExceededError
from mcphost.llm import ModelConfig
from mcphost.stores import Stores
from mcphost.stores.usage import AttemptEnd, CallStart, FinishedCall, ModelBudget, ModelCallRecord
from tests.fakes.openai_chat import Reply, serve_fake_chat
from tests.mcphost.proxy.kit import client, serve_proxy

CALLS = 20


def priced(base_url: str) -> ModelConfig:
    # One output token costs 1 USD, input is free: a call with max_tokens 1 reserves and costs 1 USD.
    return ModelConfig(
        provider="openai-compatible",
        base_url=base_url,
        model="m1",
        input_usd_per_mtok=0,
        output_usd_per_mtok=1_000_000,
    )


@pytest.mark.parametrize(
    ("budget", "key", "runs"),
    [
        (ModelBudget(model_usd_per_run=5), "model_usd_per_run", 1),
        (ModelBudget(model_tokens_per_run=40), "model_tokens_per_run", 1),
        (ModelBudget(model_usd_per_day=5), "model_usd_per_day", CALLS),
        (ModelBudget(model_usd_per_day_per_actor=5), "model_usd_per_day_per_actor", CALLS),
    ],
)
async def test_twenty_racing_calls_never_spend_past_the_budget(
    stores: Stores, budget: ModelBudget, key: str, runs: int
) -> None:
    async with serve_fake_chat() as upstream:
        upstream.script("m1", *[Reply(content="x", json_body=True, usage=(0, 1)) for _ in range(CALLS)])
        async with serve_proxy(
            stores, {"m": priced(upstream.base_url)}, budgets={"agent-a": budget}
        ) as served:
            handles = [await served.start_run(["m"], conversation_id=f"c{i}") for i in range(runs)]
            answers: list[httpx2.Response] = []

            async def call(i: int) -> None:
                run = handles[i % runs]
                async with client(run.token, bearer=True) as http:
                    answers.append(
                        await http.post(
                            f"{served.openai(run)}/chat/completions",
                            # ~36 bytes: 12 reserved input tokens + 1 output token
                            json={"model": "m", "max_tokens": 1, "messages": []},
                        )
                    )

            with anyio.fail_after(120):
                async with anyio.create_task_group() as tg:
                    for i in range(CALLS):
                        tg.start_soon(call, i)
    ok = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 429]
    assert len(ok) + len(refused) == CALLS
    assert ok
    assert refused
    assert len(upstream.requests) == len(ok)
    for answer in refused:
        error = answer.json()["error"]
        assert error["code"] == "budget_exceeded"
        assert key in error["message"]
    calls = [c for h in handles for c in await _calls(stores, h.run_id)]
    if key == "model_tokens_per_run":
        # A call reserves its body's size / 3 plus max_tokens (16) and spends 1: finished calls make room.
        assert sum(c.input_tokens + c.output_tokens + c.cached_tokens for c in calls) <= 40
    else:
        # Reservation and cost are both 1 USD: exactly the budget's worth of calls get through.
        assert len(ok) == 5
        assert sum(c.cost_usd for c in calls) == pytest.approx(5)


async def _calls(stores: Stores, run_id: str) -> list[ModelCallRecord]:
    return await stores.usage.calls(run_id)


async def test_what_a_budget_holds_is_the_run_across_days_and_the_agent_and_actor_today(
    stores: Stores,
) -> None:
    """A reservation sums the run's calls whatever their day (a run that crossed midnight), the agent's and
    the actor's of today only, and never another agent's."""
    now = time.time()

    def start(run_id: str, agent_id: str, actor_id: str) -> CallStart:
        return CallStart(
            run_id=run_id,
            agent_id=agent_id,
            actor_id=actor_id,
            conversation_id=None,
            model_id="a",
            upstream_model="m1",
            kind="chat",
            api="chat",
            streamed=False,
            reserved_tokens=10,
            reserved_usd=1.0,
        )

    def spent(run_id: str, agent_id: str, actor_id: str, at: float) -> FinishedCall:
        attempt = AttemptEnd(
            model_id="a", upstream_model="m1", attempt=1, status="ok", output_tokens=10, cost_usd=1.0
        )
        return FinishedCall(
            start=start(run_id, agent_id, actor_id), call_id=None, created_at=at, attempts=(attempt,)
        )

    yesterday = now - 86_400
    await stores.usage.record(
        [
            spent("run-long", "agent-a", "ann", yesterday),  # this run, yesterday: counts for the run
            spent("run-old", "agent-a", "ann", yesterday),  # another run, yesterday: counts for nothing
            spent("run-other", "agent-a", "ann", now),  # today: counts for the actor and the day
            spent("run-bob", "agent-a", "bob", now),  # today, another actor: counts for the day
            spent("run-b", "agent-b", "ann", now),  # another agent: counts for nothing
        ]
    )
    held: dict[str, float] = {}
    for key, budget in (
        ("model_tokens_per_run", ModelBudget(model_tokens_per_run=19)),
        ("model_usd_per_run", ModelBudget(model_usd_per_run=1.5)),
        ("model_usd_per_day_per_actor", ModelBudget(model_usd_per_day_per_actor=1.5)),
        ("model_usd_per_day", ModelBudget(model_usd_per_day=2.5)),
    ):
        with pytest.raises(BudgetExceededError) as refused:  # each limit is short of one call's room
            await stores.usage.reserve(start("run-long", "agent-a", "ann"), budget)
        assert refused.value.details["budget"] == key
        held[key] = float(str(refused.value.details["spent"]))
    assert held == {
        "model_tokens_per_run": 10,
        "model_usd_per_run": 1.0,
        "model_usd_per_day_per_actor": 1.0,
        "model_usd_per_day": 2.0,
    }
    roomy = ModelBudget(
        model_tokens_per_run=20, model_usd_per_run=2, model_usd_per_day_per_actor=2, model_usd_per_day=3
    )
    assert await stores.usage.reserve(start("run-long", "agent-a", "ann"), roomy)
