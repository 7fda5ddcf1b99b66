"""`idempotent`: a store method whose connection was dropped is retried, up to `ATTEMPTS` in all."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy.exc import DisconnectionError

from mcphost.stores._retry import ATTEMPTS, idempotent


class Flaky:
    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.failures = failures
        self.calls = 0
        self.error = error

    @idempotent
    async def read(self, value: int) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error or DisconnectionError(f"dropped #{self.calls}")
        return value * 2


def _retry_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "lost its database connection" in r.getMessage()]


async def test_a_call_that_succeeds_runs_once_and_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    flaky = Flaky(failures=0)
    assert await flaky.read(21) == 42
    assert flaky.calls == 1
    assert _retry_lines(caplog) == []


async def test_dropped_connections_are_retried_and_each_retry_is_logged_with_its_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="mcphost.stores._retry")
    flaky = Flaky(failures=2)
    assert await flaky.read(5) == 10
    assert flaky.calls == 3
    lines = _retry_lines(caplog)
    assert [line.split("(")[1].split(")")[0] for line in lines] == [
        f"attempt 1 of {ATTEMPTS}",
        f"attempt 2 of {ATTEMPTS}",
    ]
    assert "Flaky.read" in lines[0]
    assert "dropped #1" in lines[0]
    assert "dropped #2" in lines[1]


async def test_the_last_failure_is_raised_after_every_attempt() -> None:
    flaky = Flaky(failures=ATTEMPTS + 5)
    with pytest.raises(DisconnectionError, match=f"dropped #{ATTEMPTS}$"):
        await flaky.read(1)
    assert flaky.calls == ATTEMPTS


async def test_any_other_error_is_raised_at_once() -> None:
    flaky = Flaky(failures=1, error=ValueError("not a connection problem"))
    with pytest.raises(ValueError, match="not a connection problem"):
        await flaky.read(1)
    assert flaky.calls == 1
