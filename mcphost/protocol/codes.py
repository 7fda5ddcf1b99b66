"""The one error vocabulary of PROTOCOL §5, shared by MCP tool errors and `run.failed` codes."""

from __future__ import annotations

from typing import Literal, get_args

ErrorCode = Literal[
    "unauthorized",
    "not_found",
    "deadline_exceeded",
    "payload_too_large",
    "rate_limited",
    "budget_exceeded",
    "invalid_argument",
    "conflict",
    "runtime_error",
    "storage_unavailable",
    "storage_full",
    "cancelled",
    "approval_denied",
    "approval_pending",
    "parked",
    "runner.error",
    "runner.empty_output",
    "runner.crashed",
    "runner.not_found",
    "runner.mcp_unavailable",
    "runner.timeout",
    "host.restarted",
    "host.run_lost",
]
"""Every code a host or runner may report. `host.restarted` marks runs a dead host left behind;
`budget_exceeded` a host model call refused because an `[agents.budget]` model budget is spent;
`host.run_lost` runs a live host stopped executing without recording their end (closed by its sweeper);
`storage_unavailable` a database that failed or refused the operation, `storage_full` one whose disk is
full (both: retry later); `approval_denied` a call marked `ask` that a person denied or left to expire; `approval_pending` the
answer to such a call in a run that parks (its runner cannot wait: the decision continues the run in a
new one) and `parked` the `run.failed` code of a run that ended so."""

ERROR_CODES: frozenset[str] = frozenset(get_args(ErrorCode))


def is_error_code(value: str) -> bool:
    """True when `value` is a known code or a runner-side `runner.*` extension."""
    return value in ERROR_CODES or value.startswith("runner.")
