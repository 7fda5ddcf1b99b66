"""Model budgets: reserved in the database before the upstream is called, so racing calls cannot overspend."""

from __future__ import annotations

import anyio
import httpx2
import pytest

from mcphost.llm import ModelConfig
from mcphost.stores import Stores
from mcphost.stores.usage import ModelBudget, ModelCallRecord
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
