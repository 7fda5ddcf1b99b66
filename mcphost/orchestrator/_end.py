"""How a run ends: one pure decision from what happened to it.

Owns `decide_end`, the single place the host decides a run's terminal status, error and usage (the
rules docs/architecture.md lists under "How a run ends"), and `with_cancel_reason`, which keeps why the
host cancelled a run in its error. It does not write anything (the close does, `_closing.py`), log, or
look at the clock: its input is `Happened`, the facts the run's task collected.

Invariants:
- The first settled outcome wins: once the journal holds one (the runner's own terminal result, or a
  violation the host found in the runner's results), nothing that happens later changes it.
- A failure inside the host comes next: a storage error ends the run with its code and fixed message,
  anything else `runtime_error` with `HOST_FAILED` (the exception is logged by the caller, never stored).
- A run whose execution finished ends, in this order: parked, cancelled, past its deadline, its runner
  crashed, then by what its stream said (`runner.error`, `runner.empty_output`, or completed).
- A run whose execution did not finish (it waited in its queue, or was cut off) ends past its deadline,
  cancelled, or `runtime_error` "without an outcome".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mcphost.errors import StorageFullError, StorageUnavailableError, find_error
from mcphost.journal import RunOutcome
from mcphost.models import RunFailure, RunStatus

HOST_FAILED = "The host failed while running this run; the cause is in the host's log under this run id."
STORAGE_ERRORS = (StorageUnavailableError, StorageFullError)
LOST = RunFailure(
    code="host.run_lost",
    message="The host stopped executing this run without recording its end; it was closed by the sweeper.",
)


@dataclass(frozen=True, slots=True)
class Happened:
    """What happened to one run, as its task saw it: the whole input of `decide_end`."""

    settled: RunOutcome | None = None
    """The outcome the journal settled: the runner's `run.completed`/`run.failed`, or a violation."""
    failure: Exception | None = None
    """An exception inside the host (storage, a bug) that stopped the run's task."""
    executed: bool = False
    """The runner was called and its execution finished (its stream read to the end, or cut off)."""
    parked_on: str | None = None
    """The approval the run parks on (`Orchestrator.park`)."""
    cancel_reason: str | None = None
    deadline_passed: bool = False
    """The run's deadline passed: while it waited in its queue, or (`executed`) while it ran."""
    timeout_s: float = 0.0
    """The agent's timeout, quoted when the deadline passed during execution."""
    crash: str | None = None
    """Why the runner's plugin crashed or broke the protocol (`PluginError.message`)."""
    stream_status: str | None = None
    """The plugin's answer to `runner/run` (`completed`/`failed`), None when it gave none."""
    saw_message: bool = False
    """The runner produced at least one message."""


def decide_end(happened: Happened) -> RunOutcome:
    """How the run ends, from what happened to it (the rules of docs/architecture.md, "How a run ends")."""
    if happened.settled is not None:
        return happened.settled
    if happened.failure is not None:
        return host_failure(happened.failure)
    if happened.executed:
        if happened.parked_on is not None:
            return RunOutcome(
                RunStatus.PARKED,
                RunFailure(
                    code="parked",
                    message=f"The run parked on approval {happened.parked_on!r}; its decision starts a "
                    "continuation run of the same conversation.",
                    details={"approval_id": happened.parked_on},
                ),
            )
        if happened.cancel_reason is not None:
            return cancelled(happened.cancel_reason)
        if happened.deadline_passed:
            return RunOutcome.failed(
                "deadline_exceeded", f"The run did not finish within its {happened.timeout_s:g} s deadline."
            )
        if happened.crash is not None:
            return RunOutcome.failed("runner.crashed", happened.crash)
        if happened.stream_status == "failed":
            return RunOutcome.failed(
                "runner.error", "The runner reported failure without a run.failed result."
            )
        if not happened.saw_message:
            return RunOutcome.failed("runner.empty_output", "The runner ended without producing any message.")
        return RunOutcome(RunStatus.COMPLETED)
    if happened.deadline_passed:
        return RunOutcome.failed(
            "deadline_exceeded", "The run's deadline passed while it waited in its queue."
        )
    if happened.cancel_reason is not None:
        return cancelled(happened.cancel_reason)
    return RunOutcome.failed("runtime_error", "The run ended without an outcome.")


def cancelled(reason: str) -> RunOutcome:
    return RunOutcome(RunStatus.CANCELLED, RunFailure(code="cancelled", message=f"Run cancelled: {reason}."))


def host_failure(exc: Exception) -> RunOutcome:
    """The outcome of a run the host itself failed: a code and a short message, never the exception."""
    storage = find_error(exc, STORAGE_ERRORS)
    if storage is not None:
        return RunOutcome.failed(storage.code, storage.message)
    return RunOutcome.failed("runtime_error", HOST_FAILED)


def with_cancel_reason(final: RunOutcome, cancel_reason: str | None) -> RunOutcome:
    """A cancelled run's outcome with why the host cancelled it in its error's details (whatever the
    runner said as it stopped); any other outcome as it is."""
    if final.status is not RunStatus.CANCELLED or not cancel_reason or final.error is None:
        return final
    details = {**final.error.details, "reason": cancel_reason}
    return replace(final, error=final.error.model_copy(update={"details": details}))
