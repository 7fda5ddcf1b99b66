"""The runs this process holds: one `ActiveRun` per run with its phase, in one `ActiveRuns` registry.

Owns a run's in-process state from its admission until this process forgets it — its phase, the
cancel scope and request, the park, the context with its token, the result feed, the unrecorded end —
and the rules by which its phase moves. It does not decide anything about a run's stored status (the
runs store and `_closing.py` do) nor how a run ends (`_end.py`).

Invariants:
- A run's phase moves only along `TRANSITIONS`; any other move raises `IllegalTransition` and changes
  nothing.
- `ActiveRuns.forget` is the one place a run leaves the registry, and only from a phase in which nothing
  of this process still holds it: admitting (its admission did not create it, or failed), unfinished
  (the sweeper wrote its end, or another process did) or ended.
- At most `RECENT_ENDS` ended runs are kept (the oldest is forgotten first); an ended run keeps only the
  run as recorded at its end, its context and feed are let go at its close.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from mcphost.feed import ResultFeed
from mcphost.journal import RunJournal, RunOutcome
from mcphost.models import Run
from mcphost.orchestrator import _tuning as tuning
from mcphost.protocol import AgentRunContext

if TYPE_CHECKING:
    from mcphost.orchestrator._execution import ExecutingRunner


class RunPhase(enum.Enum):
    """Where a run is in this process."""

    ADMITTING = "admitting"
    """`submit` is storing it; the sweeper leaves it alone."""
    QUEUED = "queued"
    """A task of this process holds it, waiting for a slot and for its conversation's turn."""
    EXECUTING = "executing"
    """Started (`running` in the store): its runner is being called."""
    CLOSING = "closing"
    """Its end is being decided and written."""
    UNFINISHED = "unfinished"
    """Its close could not write its end: the sweeper writes the outcome it keeps."""
    RELEASED = "released"
    """Executing on a runtime when this process stopped: left running there, unfinished, for the next
    host to adopt (`Orchestrator.release_remote`); the sweeper leaves it alone."""
    ENDED = "ended"
    """Ended recently, its end written: `wait` answers from memory."""


TRANSITIONS: dict[RunPhase, frozenset[RunPhase]] = {
    RunPhase.ADMITTING: frozenset({RunPhase.QUEUED, RunPhase.EXECUTING}),
    RunPhase.QUEUED: frozenset({RunPhase.EXECUTING, RunPhase.CLOSING}),
    RunPhase.EXECUTING: frozenset({RunPhase.CLOSING, RunPhase.RELEASED}),
    RunPhase.CLOSING: frozenset({RunPhase.ENDED, RunPhase.UNFINISHED}),
    RunPhase.UNFINISHED: frozenset(),
    RunPhase.RELEASED: frozenset(),
    RunPhase.ENDED: frozenset(),
}
"""The legal moves of a run's phase (leaving the registry is `ActiveRuns.forget`)."""
HELD = frozenset({RunPhase.QUEUED, RunPhase.EXECUTING, RunPhase.CLOSING})
"""The phases in which a task of this process holds the run (`active_run_ids`)."""
FORGETTABLE = frozenset({RunPhase.ADMITTING, RunPhase.UNFINISHED, RunPhase.ENDED})


class IllegalTransition(RuntimeError):  # noqa: N818  (a programming error, never shown to a client)
    """Raised when a run's phase is asked to move where `TRANSITIONS` does not allow."""


@dataclass(eq=False)  # identity: also the borrower token of the capacity limiter
class ActiveRun:
    """All the in-process state of one run of this process."""

    run_id: str
    conversation_id: str | None
    runner: ExecutingRunner
    phase: RunPhase = RunPhase.ADMITTING
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    cancel_reason: str | None = None
    cancel_requested: bool = False
    """Its cancel or park was asked for (`request_cancel`)."""
    on_cancel: Callable[[], None] | None = None
    """While its runner executes: what stops it (`_execution.execute`), called by `request_cancel`."""
    runner_called: bool = False
    """Its runner's call has begun (`_execution.execute`; a plugin's request is written in that step)."""
    parked_on: str | None = None
    """The approval the run parks on (`park`): it stops and ends `parked`, whatever it says after."""
    deadline_passed: bool = False
    """Its deadline passed while it waited in its queue."""
    context: AgentRunContext | None = None
    """The context it started with, token included (built in its start transaction)."""
    recording: AgentRunContext | None = None
    """A recorded run's token-free context, until its recording header is written."""
    feed: ResultFeed | None = None
    """Its persisted results for this process's readers, from its hand-over to a task until its close."""
    closing_called: bool = False
    """Its `on_run_closing` callbacks ran: as its end was written with its last results, or as it closed."""
    unfinished: tuple[RunJournal, RunOutcome] | None = None
    """`UNFINISHED`: the journal and the outcome the sweeper is to write."""
    ended: Run | None = None
    """`ENDED`: the run as recorded at its end."""

    def request_cancel(self) -> None:
        """Ask for its runner to be stopped, once: at once while it executes (`on_cancel`), else as its
        execution starts. A callback rather than a task per run waiting for an event: nearly every run
        ends without one, and a task costs its start and its cancellation."""
        if self.cancel_requested:
            return
        self.cancel_requested = True
        if self.on_cancel is not None:
            self.on_cancel()

    def move(self, to: RunPhase) -> None:
        """Move to phase `to`; `IllegalTransition` when `TRANSITIONS` does not allow it."""
        if to not in TRANSITIONS[self.phase]:
            raise IllegalTransition(f"run {self.run_id}: {self.phase.value} → {to.value} is not a legal move")
        self.phase = to


class ActiveRuns:
    """The registry of this process's runs, by run id (one entry per run, whatever its phase)."""

    def __init__(self) -> None:
        self._runs: dict[str, ActiveRun] = {}
        self._ended: dict[str, None] = {}
        """The ended runs' ids, oldest first (for the `RECENT_ENDS` bound)."""

    def admit(self, run: ActiveRun) -> None:
        """Add a run being admitted."""
        if run.phase is not RunPhase.ADMITTING or run.run_id in self._runs:
            raise IllegalTransition(f"run {run.run_id}: admitted twice, or not as admitting")
        self._runs[run.run_id] = run

    def move(self, run: ActiveRun, to: RunPhase) -> None:
        """Move a run of the registry to phase `to` (checked)."""
        run.move(to)
        if to is RunPhase.ENDED:
            self._ended[run.run_id] = None
            while len(self._ended) > tuning.RECENT_ENDS:
                self.forget(self._runs[next(iter(self._ended))])

    def forget(self, run: ActiveRun) -> None:
        """The one way out of the registry, from a phase nothing of this process still holds."""
        if run.phase not in FORGETTABLE:
            raise IllegalTransition(f"run {run.run_id}: cannot be forgotten while {run.phase.value}")
        if self._runs.get(run.run_id) is run:
            del self._runs[run.run_id]
        self._ended.pop(run.run_id, None)

    def get(self, run_id: str) -> ActiveRun | None:
        return self._runs.get(run_id)

    def phase(self, run_id: str) -> RunPhase | None:
        run = self._runs.get(run_id)
        return None if run is None else run.phase

    def held(self, run_id: str) -> ActiveRun | None:
        """The run when a task of this process holds it (queued, executing or closing), else None."""
        run = self._runs.get(run_id)
        return run if run is not None and run.phase in HELD else None

    def in_phase(self, *phases: RunPhase) -> Iterator[ActiveRun]:
        """The runs in one of `phases` (a snapshot: the registry may change while it is used)."""
        return iter([run for run in self._runs.values() if run.phase in phases])

    def __len__(self) -> int:
        return len(self._runs)
