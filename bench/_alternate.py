"""Alternating measurement: baseline and subject take turns in one process, so drift hits both alike.

Owns the round loop every benchmark uses. Round i runs baseline then subject when i is even and
subject then baseline when it is odd (ABBA), so neither side always runs on a cache or a CPU frequency
the other warmed. `interleave` does the same call by call, for operations of a few milliseconds. Warm-up rounds run the same way and are thrown away. A time budget can end the loop
early (never before `min_rounds`), which keeps `--quick` inside its bound on a slow machine.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

Side = Callable[[], Awaitable[Sequence[float]]]
"""One round of one side: returns that round's samples (one or many)."""


@dataclass
class Samples:
    baseline: list[float]
    subject: list[float]
    rounds: int


async def alternate(
    baseline: Side,
    subject: Side,
    *,
    rounds: int,
    warmup: int = 1,
    budget_s: float | None = None,
    min_rounds: int = 3,
) -> Samples:
    """Run `warmup` discarded rounds, then up to `rounds` measured rounds, alternating the order."""
    for i in range(warmup):
        await _round(i, baseline, subject)
    out = Samples([], [], 0)
    started = time.perf_counter()
    for i in range(rounds):
        b, s = await _round(i, baseline, subject)
        out.baseline.extend(b)
        out.subject.extend(s)
        out.rounds += 1
        spent = time.perf_counter() - started
        if budget_s is not None and spent > budget_s and out.rounds >= min_rounds:
            break
    return out


async def _round(i: int, baseline: Side, subject: Side) -> tuple[Sequence[float], Sequence[float]]:
    if i % 2 == 0:
        b = await baseline()
        s = await subject()
    else:
        s = await subject()
        b = await baseline()
    return b, s


async def timed_ms(fn: Callable[[], Awaitable[object]]) -> float:
    """Wall time of one call of `fn`, in milliseconds."""
    start = time.perf_counter_ns()
    await fn()
    return (time.perf_counter_ns() - start) / 1e6


async def interleave(
    baseline: Callable[[], Awaitable[object]],
    subject: Callable[[], Awaitable[object]],
    calls: int,
    into: Samples,
) -> None:
    """`calls` timed calls of each, one at a time in ABBA order, appended to `into`.

    For short operations: alternating call by call, a burst of outside load hits both sides alike
    instead of one side's whole block."""
    for i in range(calls):
        if i % 2 == 0:
            into.baseline.append(await timed_ms(baseline))
            into.subject.append(await timed_ms(subject))
        else:
            into.subject.append(await timed_ms(subject))
            into.baseline.append(await timed_ms(baseline))
    into.rounds += 1


def repeat(fn: Callable[[], Awaitable[object]], times: int) -> Side:
    """A side that calls `fn` `times` times per round and returns each call's latency in ms."""

    async def side() -> list[float]:
        return [await timed_ms(fn) for _ in range(times)]

    return side
