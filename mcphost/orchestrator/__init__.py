"""The run orchestrator: admission, the run state machine, deadline, cancel and result delivery.

Owns the lifetime of every run this host process executes (DESIGN §3). One `Orchestrator` is entered
with `async with orchestrator.running():`, which owns the task group of all runs, the cancel poller and
host liveness; nothing of a run outlives it. Its parts:

- `_core.py`: `Orchestrator`, the state machine — every move of a run's phase, cancel, park, recovery.
- `_active.py`: `ActiveRun` (all of one run's in-process state and its `RunPhase`) and `ActiveRuns`.
- `_admission.py`: the checks before anything is stored, the run and grant, the context builder.
- `_execution.py`: the runner call through the `RunnerExecution` seam, the deadline, the cancel watch,
  the pump.
- `_end.py`: `decide_end`, the one pure decision of how a run ends.
- `_closing.py`: the terminal write with its retries, the revocation, the sweeper.
- `_tuning.py`: the periods and bounds (set them there: the modules read them at use).
The readers of a run's results and end are `feed.RunReader`.

Invariants:
- Admission is all-or-nothing: binding, runner and runner config are resolved before anything is
  stored, so an event that cannot run changes nothing; the runs row and the event's inbound event-log
  row are written in one transaction. A repeated `event_id` returns its latest run, unless that run
  failed `host.restarted`: then it is admitted again as the next attempt (`runs.admit`).
- A run admitted while a slot of `max_concurrent_runs` is free is started by its admission transaction
  when `try_start` would start it (`_start_at_once`, `RunStart`), holding that slot; otherwise it is
  admitted `queued`, the slot is given back and `_wait_turn` starts it later. A started run holds its
  slot until its close is over (its end written, or left to the sweeper as `UNFINISHED`), so the runs
  this process has stored `running` never outnumber `max_concurrent_runs`, save those whose end could
  not be written (nothing executes them any more).
- At start-up, runs a stopped host left `running` fail `host.restarted`; the ones it left `queued` are
  adopted and run here (`_resume`) in their original queue order, with their original deadline.
- Everything after the grant is built sits inside one try/finally: whatever fails, the run gets a
  terminal status with a reason and its grant is revoked, under a shielded, bounded scope.
- A run's in-process phase is named (`RunPhase`) and moves only along `_active.TRANSITIONS`; one
  registry (`ActiveRuns`) holds every run this process knows, and `ActiveRuns.forget` is the one way out.
- How a run ends is decided in one place, `decide_end`, from what happened (`Happened`), by the close.
- Conversation concurrency is decided by the database (`runs.admit` / `runs.try_start`), so the
  `enqueue`/`reject`/`interrupt` policies hold across host processes sharing one PostgreSQL.
- The deadline counts from admission: an event that waited in its conversation's queue past its
  agent's timeout is stale and fails with `deadline_exceeded` without starting.
- Results are persisted before they are published. A reader of a run active on this process takes them
  from the run's in-memory feed (`feed.py`), in the order persisted; readers of other processes' runs,
  of ended runs, or further behind than the feed keeps read the store. Either way a reader that
  resumes after sequence N gets every later result exactly once.
- Waiting on another process (following or waiting for its run, a queued run behind its run, a cancel
  it wrote for a run here) is woken by its notifications on PostgreSQL (`stores/wakeups.py`, `_woken`)
  and polled only as a safety net (`NOTIFIED_RECHECK_S`); without a listening connection (SQLite, or
  while it reconnects) at `QUEUE_POLL_S` / `CANCEL_POLL_S`.
- No run stays `queued`/`running` without an executor on its live host. The terminal write (the
  journal's terminal result, then `RunStore.finish`) is idempotent and retried with jittered
  exponential back-off for up to `TERMINAL_RETRY_S` when storage fails; a run whose end still could not
  be written is remembered with its outcome (`UNFINISHED`), and the sweeper (every `SWEEP_S`) writes it
  later. The sweeper also fails (`host.run_lost`) any other active run this host owns that no task of
  this process holds (admitted, then the admission's caller failed), so a conversation's queue never
  wedges until a restart. Readers of such a run poll the store and end when the sweeper ends it.
- What a client sees of a host failure is a code and a short message (`HOST_FAILED`, or a storage
  error's fixed message); the exception itself is logged with the run id, never stored in the run.
- A run's context is built once, as it starts, inside the transaction that moves it to `running`
  (`runs.try_start`, which also appends the run's user input): the runs store keeps it without its
  token, for every replica's facts server; the copy with the token lives in memory only while the run
  is active on this process (`context(run_id)`, the facts server's context provider). `on_run_closing`
  callbacks run once per executed run as its close begins (its phase `CLOSING`, so `executing(run_id)`
  is already false), before its end is written, bounded by `CLOSING_BOUND_S`. `on_run_end`
  callbacks run once per run, after its terminal status is written and its grant revoked, inside the
  shielded, bounded close; a failing callback is logged and does not stop the others.
- A recorded run (`grant.record`) has its recording header (envelope, token-free context, agent entry)
  written after it started and before its runner is called, so every MCP call it makes is recorded.
- A run parks (`park`, asked by the facts server when a call of a runner that parks needs a
  person's decision) like a cancel: `runner/cancel` and `CANCEL_GRACE_S` for the runner to stop its
  CLI (so the continuation never shares the session folder with a CLI still stopping), but what the
  runner sends from then on is dropped and the run ends `parked`; its grant is revoked as for any end.
  What continues it is not this package's business (`continuations.py` submits the continuation as
  an ordinary event).
- Inspection grants (runs without a runner, `inspection.py`) end through this package too: `cancel`
  revokes one at once, and the grant sweeper (every `GRANT_SWEEP_S`) completes those past their
  deadline; `on_run_end` runs for them as for any run. Within a host process, nothing else writes a
  run's status.
"""

from __future__ import annotations

from mcphost.orchestrator._active import ActiveRun, ActiveRuns, IllegalTransition, RunPhase
from mcphost.orchestrator._core import Admission, IngestVia, Orchestrator
from mcphost.orchestrator._end import HOST_FAILED, LOST, STORAGE_ERRORS, Happened, decide_end
from mcphost.orchestrator._execution import ExecutingPlugin, RunnerExecution
from mcphost.orchestrator._tuning import (
    CANCEL_GRACE_S,
    CANCEL_POLL_S,
    CLOSE_BOUND_S,
    LOCAL_RECHECK_S,
    NOTIFIED_RECHECK_S,
    QUEUE_POLL_S,
    RECENT_ENDS,
    RESULTS_PAGE,
    SWEEP_S,
    TERMINAL_DRAIN_S,
    TERMINAL_RETRY_S,
)

__all__ = [
    "CANCEL_GRACE_S",
    "CANCEL_POLL_S",
    "CLOSE_BOUND_S",
    "HOST_FAILED",
    "LOCAL_RECHECK_S",
    "LOST",
    "NOTIFIED_RECHECK_S",
    "QUEUE_POLL_S",
    "RECENT_ENDS",
    "RESULTS_PAGE",
    "STORAGE_ERRORS",
    "SWEEP_S",
    "TERMINAL_DRAIN_S",
    "TERMINAL_RETRY_S",
    "ActiveRun",
    "ActiveRuns",
    "Admission",
    "ExecutingPlugin",
    "Happened",
    "IllegalTransition",
    "IngestVia",
    "Orchestrator",
    "RunPhase",
    "RunnerExecution",
    "decide_end",
]
