"""Per-run call limits: a token bucket for the call rate, and the optional call and byte budgets.

Owns `RunLimits` (one run's counters) and `LimitRegistry` (all runs of this process). Does not decide
what a call is or write the audit (the call pipeline does).

Invariants:
- Rate: a bucket of `grant.rate_burst` tokens refilled at `grant.rate_per_s`; every audited call takes
  one token before anything else is checked, so refused calls count too. An empty bucket refuses with
  `rate_limited` (retryable, with `retry_after_s`). The bucket lives in this process: behind a load
  balancer each replica enforces the rate for the calls it serves (sticky routing by path keeps one
  run on one replica).
- Budgets (`grant.call_budget`, `grant.byte_budget`, either optional): a call that is not refused takes
  one call from the budget when admitted (so concurrent calls cannot overshoot the call budget); bytes
  are counted after a call succeeds, so the byte budget may be overshot by the last call. Once either
  is used up every further call is `rate_limited` (not retryable). When a run with budgets is first
  seen, its counters start from the audit table (`AuditStore.usage`), so a second process continues
  counting where the first left off.
- Counters of a run are dropped when the run ends (`drop`) or after its deadline (`sweep`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from mcphost.facts._results import ToolCallError
from mcphost.models import RunGrant
from mcphost.stores.audit import AuditStore

SWEEP_GRACE_S = 60.0


@dataclass
class RunLimits:
    """One run's rate bucket and budget counters."""

    rate_per_s: float
    burst: int
    call_budget: int | None
    byte_budget: int | None
    deadline_at: float
    tokens: float = 0.0
    refilled_at: float = field(default_factory=time.monotonic)
    calls: int = 0
    bytes_out: int = 0

    def __post_init__(self) -> None:
        self.tokens = float(self.burst)

    def take(self) -> None:
        """Admit one call or raise the `rate_limited` failure that says why not."""
        now = time.monotonic()
        self.tokens = min(float(self.burst), self.tokens + (now - self.refilled_at) * self.rate_per_s)
        self.refilled_at = now
        if self.tokens < 1.0:
            wait = (1.0 - self.tokens) / self.rate_per_s if self.rate_per_s > 0 else math.inf
            raise ToolCallError(
                "rate_limited",
                f"This run may make {self.rate_per_s:g} calls per second (bursts of {self.burst}); "
                f"slow down and retry in {wait:.2f} s.",
                retryable=math.isfinite(wait),
                details={"retry_after_s": round(wait, 3) if math.isfinite(wait) else None},
            )
        self.tokens -= 1.0
        if self.call_budget is not None and self.calls >= self.call_budget:
            raise ToolCallError(
                "rate_limited",
                f"This run has used its budget of {self.call_budget} calls; no more facts calls are allowed.",
                retryable=False,
                details={"call_budget": self.call_budget},
            )
        if self.byte_budget is not None and self.bytes_out >= self.byte_budget:
            raise ToolCallError(
                "rate_limited",
                f"This run has read {self.bytes_out} bytes, its budget is {self.byte_budget}; "
                "no more facts calls are allowed.",
                retryable=False,
                details={"byte_budget": self.byte_budget},
            )
        self.calls += 1

    def record(self, bytes_out: int) -> None:
        """Count the bytes a successful call returned."""
        self.bytes_out += bytes_out


class LimitRegistry:
    """The `RunLimits` of every run this process serves."""

    def __init__(self, audit: AuditStore) -> None:
        self._audit = audit
        self._runs: dict[str, RunLimits] = {}

    async def of(self, grant: RunGrant) -> RunLimits:
        """The run's limits, created (budgets restored from the audit table) on first use."""
        limits = self._runs.get(grant.run_id)
        if limits is not None:
            return limits
        calls = bytes_out = 0
        if grant.call_budget is not None or grant.byte_budget is not None:
            calls, bytes_out = await self._audit.usage(grant.run_id)
        # Another call of the same run may have created them while we awaited.
        return self._runs.setdefault(
            grant.run_id,
            RunLimits(
                rate_per_s=grant.rate_per_s,
                burst=grant.rate_burst,
                call_budget=grant.call_budget,
                byte_budget=grant.byte_budget,
                deadline_at=grant.deadline_at,
                calls=calls,
                bytes_out=bytes_out,
            ),
        )

    def record(self, run_id: str, bytes_out: int) -> None:
        """Count the bytes a successful call of the run returned."""
        limits = self._runs.get(run_id)
        if limits is not None:
            limits.record(bytes_out)

    def drop(self, run_id: str) -> None:
        self._runs.pop(run_id, None)

    def sweep(self) -> None:
        """Forget runs whose deadline passed more than a minute ago."""
        cutoff = time.time() - SWEEP_GRACE_S
        for run_id in [r for r, limits in self._runs.items() if limits.deadline_at < cutoff]:
            del self._runs[run_id]

    def __len__(self) -> int:
        return len(self._runs)


class RefusalBudget:
    """How many refused HTTP requests per run get an audit row: `rate_per_s` with bursts of `burst`.

    Refusals happen before a token is known to be good, so without this anyone who knows a run id could
    make the host write audit rows as fast as it can take requests. Past the budget a refusal is still
    refused, only not audited (and counted in `skipped`)."""

    def __init__(self, rate_per_s: float = 5.0, burst: int = 20, max_runs: int = 10_000) -> None:
        self._rate_per_s = rate_per_s
        self._burst = burst
        self._max_runs = max_runs
        self._buckets: dict[str, tuple[float, float]] = {}
        self.skipped = 0

    def allow(self, run_id: str) -> bool:
        now = time.monotonic()
        tokens, at = self._buckets.pop(run_id, (float(self._burst), now))
        tokens = min(float(self._burst), tokens + (now - at) * self._rate_per_s)
        allowed = tokens >= 1.0
        self._buckets[run_id] = (tokens - 1.0 if allowed else tokens, now)
        if len(self._buckets) > self._max_runs:
            del self._buckets[next(iter(self._buckets))]
        if not allowed:
            self.skipped += 1
        return allowed
