"""`decide_end` as a table: one case per row of docs/architecture.md's "How a run ends"."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from mcphost.errors import StorageFullError, StorageUnavailableError
from mcphost.journal import RunOutcome
from mcphost.models import RunFailure, RunStatus
from mcphost.orchestrator import HOST_FAILED, Happened, decide_end
from mcphost.orchestrator._end import with_cancel_reason

ARCHITECTURE = Path(__file__).resolve().parents[3] / "docs" / "architecture.md"

COMPLETED = RunOutcome(RunStatus.COMPLETED, usage={"input_tokens": 3}, by_runner=True)
EMPTY = RunOutcome(
    RunStatus.FAILED,
    RunFailure(code="runner.empty_output", message="The runner completed without producing any message."),
    by_runner=True,
)
RUNNER_FAILED = RunOutcome(
    RunStatus.FAILED,
    RunFailure(code="model.refused", message="no", details={"retryable": False}),
    by_runner=True,
)
RUNNER_CANCELLED = RunOutcome(
    RunStatus.CANCELLED,
    RunFailure(code="cancelled", message="stopped", details={"retryable": False}),
    by_runner=True,
)
VIOLATION = RunOutcome.failed("payload_too_large", "a message.completed result of 9 bytes exceeds the limit")
EVERYTHING = Happened(
    executed=True,
    parked_on="apr_1",
    cancel_reason="cancelled by request",
    deadline_passed=True,
    crash="the plugin died",
    stream_status="failed",
)
"""Everything else that could happen at once: a settled outcome or a host failure must win over it."""


@dataclass(frozen=True)
class Row:
    row: int
    happened: Happened
    status: RunStatus
    code: str | None
    message: str | None = None


ROWS = [
    Row(1, replace(EVERYTHING, settled=COMPLETED), RunStatus.COMPLETED, None),
    Row(2, replace(EVERYTHING, settled=EMPTY), RunStatus.FAILED, "runner.empty_output"),
    Row(3, replace(EVERYTHING, settled=RUNNER_FAILED), RunStatus.FAILED, "model.refused", "no"),
    Row(3, Happened(settled=RUNNER_CANCELLED, executed=True), RunStatus.CANCELLED, "cancelled", "stopped"),
    Row(4, replace(EVERYTHING, settled=VIOLATION), RunStatus.FAILED, "payload_too_large"),
    Row(
        5,
        replace(EVERYTHING, failure=StorageUnavailableError("The database is unavailable.")),
        RunStatus.FAILED,
        "storage_unavailable",
        "The database is unavailable.",
    ),
    Row(
        5,
        Happened(failure=ExceptionGroup("tg", [StorageFullError("The disk is full.")])),
        RunStatus.FAILED,
        "storage_full",
        "The disk is full.",
    ),
    Row(
        6,
        replace(EVERYTHING, failure=RuntimeError("secret detail")),
        RunStatus.FAILED,
        "runtime_error",
        HOST_FAILED,
    ),
    Row(
        7,
        EVERYTHING,
        RunStatus.PARKED,
        "parked",
        "The run parked on approval 'apr_1'; its decision starts a continuation run of the same conversation.",
    ),
    Row(
        8,
        replace(EVERYTHING, parked_on=None),
        RunStatus.CANCELLED,
        "cancelled",
        "Run cancelled: cancelled by request.",
    ),
    Row(
        9,
        replace(EVERYTHING, parked_on=None, cancel_reason=None, timeout_s=1.5),
        RunStatus.FAILED,
        "deadline_exceeded",
        "The run did not finish within its 1.5 s deadline.",
    ),
    Row(
        10,
        Happened(executed=True, crash="the plugin died", stream_status="failed"),
        RunStatus.FAILED,
        "runner.crashed",
        "the plugin died",
    ),
    Row(
        11,
        Happened(executed=True, stream_status="failed", saw_message=True),
        RunStatus.FAILED,
        "runner.error",
    ),
    Row(12, Happened(executed=True, stream_status="completed"), RunStatus.FAILED, "runner.empty_output"),
    Row(12, Happened(executed=True), RunStatus.FAILED, "runner.empty_output"),
    Row(13, Happened(executed=True, stream_status="completed", saw_message=True), RunStatus.COMPLETED, None),
    Row(
        14,
        Happened(deadline_passed=True, cancel_reason="the host is shutting down"),
        RunStatus.FAILED,
        "deadline_exceeded",
        "The run's deadline passed while it waited in its queue.",
    ),
    Row(
        15,
        Happened(cancel_reason="interrupted"),
        RunStatus.CANCELLED,
        "cancelled",
        "Run cancelled: interrupted.",
    ),
    Row(16, Happened(), RunStatus.FAILED, "runtime_error", "The run ended without an outcome."),
    Row(
        16, Happened(parked_on="apr_2", crash="x", stream_status="failed"), RunStatus.FAILED, "runtime_error"
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[f"row{r.row}-{r.code or r.status}" for r in ROWS])
def test_decide_end_follows_the_documented_rule(row: Row) -> None:
    outcome = decide_end(row.happened)
    assert outcome.status is row.status
    assert (outcome.error.code if outcome.error else None) == row.code
    if row.message is not None:
        assert outcome.error is not None
        assert outcome.error.message == row.message
    if row.happened.settled is not None:
        assert outcome is row.happened.settled  # the first settled outcome wins, unchanged


def test_a_parked_end_names_its_approval() -> None:
    outcome = decide_end(Happened(executed=True, parked_on="apr_9"))
    assert outcome.error is not None
    assert outcome.error.details == {"approval_id": "apr_9"}


def test_the_table_covers_every_row_the_architecture_lists() -> None:
    text = ARCHITECTURE.read_text()
    section = text[text.index("**How a run ends.**") :]
    section = section[: section.index("\n\n", section.index("| # |"))]
    documented = {int(n) for n in re.findall(r"^\| (\d+) \|", section, re.MULTILINE)}
    assert documented == set(range(1, 17))
    assert {row.row for row in ROWS} == documented


def test_a_cancelled_end_keeps_the_hosts_reason_whatever_the_runner_said() -> None:
    kept = with_cancel_reason(RUNNER_CANCELLED, "interrupted by a newer event (run run_2)")
    assert kept.error is not None
    assert kept.error.details == {"retryable": False, "reason": "interrupted by a newer event (run run_2)"}
    assert with_cancel_reason(RUNNER_FAILED, "x") is RUNNER_FAILED
    assert with_cancel_reason(RUNNER_CANCELLED, None) is RUNNER_CANCELLED
