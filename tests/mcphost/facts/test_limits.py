"""Rate buckets, budgets restored from the audit table, and the refusal-audit budget."""

from __future__ import annotations

import anyio

from mcphost.facts._limits import LimitRegistry, RefusalBudget, RunLimits
from mcphost.facts._results import ToolCallError
from mcphost.stores import AuditEntry, Stores
from tests.mcphost.facts._helpers import admit_run


def limits(
    *,
    rate_per_s: float = 1000.0,
    burst: int = 3,
    call_budget: int | None = None,
    byte_budget: int | None = None,
) -> RunLimits:
    return RunLimits(
        rate_per_s=rate_per_s, burst=burst, call_budget=call_budget, byte_budget=byte_budget, deadline_at=0.0
    )


def refusal(run: RunLimits) -> ToolCallError | None:
    try:
        run.take()
    except ToolCallError as error:
        return error
    return None


async def test_a_bucket_allows_its_burst_then_refills_at_its_rate() -> None:
    run = limits(rate_per_s=5.0, burst=3)
    assert [refusal(run) for _ in range(3)] == [None, None, None]
    empty = refusal(run)
    assert empty is not None
    assert (empty.code, empty.retryable) == ("rate_limited", True)
    assert 0 < empty.details["retry_after_s"] <= 0.2
    await anyio.sleep(0.25)
    assert refusal(run) is None


def test_a_zero_rate_never_refills_and_says_so() -> None:
    run = limits(rate_per_s=0.0, burst=1)
    assert refusal(run) is None
    empty = refusal(run)
    assert empty is not None
    assert empty.retryable is False
    assert empty.details["retry_after_s"] is None


def test_budgets_refuse_once_used_up_and_not_before() -> None:
    calls = limits(call_budget=2)
    assert [refusal(calls) for _ in range(2)] == [None, None]
    spent = refusal(calls)
    assert spent is not None
    assert (spent.code, spent.retryable) == ("rate_limited", False)
    data = limits(byte_budget=100)
    assert refusal(data) is None
    data.record(99)
    assert refusal(data) is None
    data.record(1)
    assert refusal(data) is not None


def _entry(run_id: str, outcome: str, bytes_out: int) -> AuditEntry:
    return AuditEntry.model_validate(
        {
            "run_id": run_id,
            "tool": "history_page",
            "args_digest": "0" * 64,
            "bytes_in": 2,
            "bytes_out": bytes_out,
            "outcome": outcome,
            "code": None if outcome == "ok" else "invalid_argument",
            "duration_ms": 1.0,
        }
    )


async def test_a_new_process_resumes_budgets_from_the_audit_table(stores: Stores) -> None:
    run = await admit_run(stores, limits={"call_budget": 3, "byte_budget": 1000})
    for outcome, size in [("ok", 400), ("error", 50), ("refused", 5000)]:
        await stores.audit.append(_entry(run.run_id, outcome, size))
    resumed = await LimitRegistry(stores.audit).of(run.grant)
    assert (resumed.calls, resumed.bytes_out) == (2, 400)
    assert refusal(resumed) is None
    assert refusal(resumed) is not None  # the third call of the budget was the one above
    unbudgeted = await admit_run(stores)
    fresh = await LimitRegistry(stores.audit).of(unbudgeted.grant)
    assert (fresh.calls, fresh.bytes_out) == (0, 0)


async def test_the_registry_drops_runs_that_ended_or_passed_their_deadline(stores: Stores) -> None:
    registry = LimitRegistry(stores.audit)
    live = await admit_run(stores, conversation_id="c1")
    stale = await admit_run(stores, conversation_id="c2", timeout_s=-120.0)
    ended = await admit_run(stores, conversation_id="c3")
    for run in (live, stale, ended):
        await registry.of(run.grant)
    registry.drop(ended.run_id)
    registry.sweep()
    assert len(registry) == 1
    assert (await registry.of(live.grant)) is (await registry.of(live.grant))


def test_the_refusal_budget_allows_a_burst_per_run_then_counts_what_it_skips() -> None:
    budget = RefusalBudget(rate_per_s=0.0, burst=2)
    assert [budget.allow("a"), budget.allow("a"), budget.allow("a")] == [True, True, False]
    assert budget.allow("b")
    assert budget.skipped == 1
