"""Jittered exponential back-off between attempts, computed by tenacity's wait strategies.

Owns the wait before the next attempt of something that failed (connecting to an upstream tool server,
reconnecting `mcphost send`'s stream) and its reset after a success. Does not own the loop, the clock or
the sleeping: callers keep their own state machines and ask only "how long now?".

Invariants:
- The n-th wait since the last reset is `min(initial_s * 2**(n-1), max_s - jitter_s) + uniform(0, jitter_s)`
  (tenacity's `wait_exponential` plus `wait_random`): never above `max_s`, never below `initial_s` unless
  that is more than `max_s - jitter_s`, and jittered at every step, the capped ones included, so peers
  that failed together do not retry in lockstep.
- `jitter_s` defaults to `initial_s` and is at most half of `max_s`.
"""

from __future__ import annotations

from tenacity import RetryCallState, Retrying, wait_exponential, wait_random


class Backoff:
    """The waits between failed attempts: exponential from `initial_s` to `max_s`, each jittered."""

    def __init__(self, initial_s: float, max_s: float, *, jitter_s: float | None = None) -> None:
        if not 0 < initial_s <= max_s:
            raise ValueError(f"back-off needs 0 < initial_s <= max_s, got {initial_s!r} and {max_s!r}")
        jitter = min(initial_s if jitter_s is None else jitter_s, max_s / 2)
        if jitter < 0:
            raise ValueError(f"back-off jitter must not be negative, got {jitter_s!r}")
        self.initial_s = initial_s
        self.max_s = max_s
        self.jitter_s = jitter
        wait = wait_exponential(multiplier=initial_s, max=max_s - jitter) + wait_random(0, jitter)
        self._wait = wait
        # tenacity's strategies read only `attempt_number` from the call state; one lives here for them.
        self._state = RetryCallState(Retrying(wait=wait), fn=None, args=(), kwargs={})

    @property
    def failures(self) -> int:
        """Waits handed out since the last reset."""
        return self._state.attempt_number - 1

    def next(self) -> float:
        """The wait before the next attempt (seconds); each call counts one more failure."""
        delay = self._wait(self._state)
        self._state.attempt_number += 1
        return delay

    def reset(self) -> None:
        """A success: the next wait is the initial one again."""
        self._state.attempt_number = 1
