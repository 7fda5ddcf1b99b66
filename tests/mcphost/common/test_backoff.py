"""The back-off between failed attempts: exponential, bounded, jittered at every step, reset by a success."""

from __future__ import annotations

import pytest

from mcphost.common.backoff import Backoff
from mcphost.gateway.status import BACKOFF_INITIAL_S, BACKOFF_MAX_S


def test_the_waits_grow_exponentially_and_stay_within_their_bounds() -> None:
    backoff = Backoff(0.5, 30.0)
    for n in range(1, 40):
        wait = backoff.next()
        base = min(0.5 * 2 ** (n - 1), 30.0 - 0.5)
        assert base <= wait <= base + 0.5
        assert 0.5 <= wait <= 30.0
    assert backoff.failures == 39


def test_the_waits_are_jittered_the_capped_ones_too() -> None:
    firsts: set[float] = set()
    capped: set[float] = set()
    for _ in range(50):
        backoff = Backoff(BACKOFF_INITIAL_S, BACKOFF_MAX_S)
        firsts.add(backoff.next())
        capped.add([backoff.next() for _ in range(20)][-1])
    # 50 draws from a continuous uniform: equal values would mean no jitter at all.
    assert len(firsts) > 40
    assert len(capped) > 40
    assert all(BACKOFF_MAX_S - BACKOFF_INITIAL_S <= w <= BACKOFF_MAX_S for w in capped)


def test_a_reset_starts_again_from_the_initial_wait() -> None:
    backoff = Backoff(0.2, 3.0)
    for _ in range(10):
        backoff.next()
    backoff.reset()
    assert backoff.failures == 0
    assert 0.2 <= backoff.next() <= 0.4


def test_a_huge_number_of_failures_stays_at_the_cap() -> None:
    backoff = Backoff(0.2, 3.0)
    waits = [backoff.next() for _ in range(5000)]  # 2**4999 overflows a float; the wait must not
    assert 1.5 <= waits[-1] <= 3.0


@pytest.mark.parametrize(("initial", "maximum"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0), (float("nan"), 1.0)])
def test_impossible_bounds_are_refused(initial: float, maximum: float) -> None:
    with pytest.raises(ValueError, match="back-off needs"):
        Backoff(initial, maximum)
