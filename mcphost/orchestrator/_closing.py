"""Closing a run: its end decided (`decide_end`), written, its grant revoked, its readers and its
conversation's queue woken; and the sweeper that writes the ends a close could not.

Owns the close path, the only place a run of this process gets its terminal status: the run's task
calls `close` whatever happened, and the sweeper (`sweep`) ends the runs this host owns that no task
holds. It does not execute anything (`_execution.py`) nor admit (`_admission.py`).

Invariants:
- The terminal write (the journal's terminal result, then `RunStore.finish`) is idempotent and retried
  with jittered exponential back-off for up to `TERMINAL_RETRY_S` on storage errors; the first outcome
  the journal settled wins, and a cancel keeps why the host cancelled in the run's error.
- A run executing on this process whose runner's own terminal result settles its end (completed, or
  failed by the runner) and that the host did not ask to stop has its end written with that result's
  batch (`ending_gate`, `RunJournal.end_with`): its close begins there, and then writes nothing.
- A close whose write still failed leaves the run `UNFINISHED` with its outcome (the sweeper writes it)
  and revokes its grant anyway; a close that wrote it leaves the run `ENDED`. Either way its context and
  feed are let go and its feed is closed with the run as recorded.
- `on_run_closing` callbacks run once per run of this process, as its close begins (`begin_close`)
  and before its end is written (bounded by `CLOSING_BOUND_S`; e.g. the model proxy writing the run's usage rows).
- `on_run_end` callbacks run once per run, after its end is written (or given up to the sweeper); a
  failing one is logged and does not stop the others.
- The sweeper never touches a run that is being admitted or held by a task of this process.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import anyio
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

from mcphost import tracing
from mcphost.errors import find_error
from mcphost.journal import RunJournal, RunOutcome
from mcphost.models import Run, RunStatus
from mcphost.orchestrator import _tuning as tuning
from mcphost.orchestrator._active import ActiveRun, ActiveRuns, RunPhase
from mcphost.orchestrator._end import LOST, STORAGE_ERRORS, Happened, decide_end, with_cancel_reason
from mcphost.stores import Stores

logger = logging.getLogger("mcphost.orchestrator")

OnRunEnd = Callable[[str, Run | None], Awaitable[None]]
OnRunClosing = Callable[[str], Awaitable[None]]


async def close(
    active: ActiveRun,
    journal: RunJournal,
    happened: Happened,
    *,
    stores: Stores,
    runs: ActiveRuns,
    on_run_end: Sequence[OnRunEnd],
    on_run_closing: Sequence[OnRunClosing] = (),
) -> RunOutcome:
    """End the run: decide and record its end, revoke, wake its readers; the outcome recorded (or to be)."""
    run_id = active.run_id
    runs.move(active, RunPhase.CLOSING)
    await begin_close(active, on_run_closing)
    outcome = decide_end(happened)
    ended = journal.ended_run  # written with the runner's last results (`ending_gate`)
    if ended is not None and journal.outcome is not None:
        outcome = journal.outcome
    try:
        if ended is None:
            with anyio.move_on_after(tuning.TERMINAL_RETRY_S):
                outcome, ended = await record_end(stores, run_id, journal, outcome, active.cancel_reason)
    except Exception:
        logger.exception("run %s: could not record its end; the sweeper will retry", run_id)
    finally:
        active.context = None
        active.recording = None
        if ended is None:
            ended = await revoke_after_failed_close(stores, run_id)
            active.unfinished = (journal, outcome)
            runs.move(active, RunPhase.UNFINISHED)
        else:
            active.ended = ended
            runs.move(active, RunPhase.ENDED)
        await run_callbacks(on_run_end, run_id, ended)
        feed, active.feed = active.feed, None
        if feed is not None:
            feed.close(ended)
        logger.info(
            "run %s ended %s%s%s",
            run_id,
            outcome.status,
            f" ({outcome.error.code})" if outcome.error else "",
            "" if active.phase is RunPhase.ENDED else "; its end is not recorded yet",
        )
    return outcome


async def begin_close(active: ActiveRun, on_run_closing: Sequence[OnRunClosing]) -> None:
    """The close of `active` begins: its `on_run_closing` callbacks, once per run, bounded by
    `CLOSING_BOUND_S` (its end is recorded after them either way)."""
    if active.closing_called:
        return
    active.closing_called = True
    with anyio.move_on_after(tuning.CLOSING_BOUND_S) as waited:
        await run_closing_callbacks(on_run_closing, active.run_id)
    if waited.cancelled_caught:
        logger.warning(
            "run %s: its closing callbacks took over %g s; recording its end",
            active.run_id,
            tuning.CLOSING_BOUND_S,
        )


def ending_gate(active: ActiveRun, on_run_closing: Sequence[OnRunClosing]) -> Callable[[], Awaitable[bool]]:
    """`RunJournal.end_with` for a run executing on this process: its end is written with the batch of
    the runner's terminal result unless the host asked it to stop (a cancel or a park, whose reason its
    close records), and its close begins there (`begin_close`), so the end comes after its closing
    callbacks as always."""

    async def gate() -> bool:
        if active.cancel_reason is not None or active.parked_on is not None:
            return False
        with anyio.CancelScope(shield=True):  # bounded: a deadline now must not skip them
            await begin_close(active, on_run_closing)
        return True

    return gate


async def run_closing_callbacks(callbacks: Sequence[OnRunClosing], run_id: str) -> None:
    """Run the `on_run_closing` callbacks of a run whose close began; a failing one does not stop the others."""
    for callback in list(callbacks):
        try:
            await callback(run_id)
        except Exception:
            logger.exception("run %s: an on_run_closing callback failed", run_id)


async def run_callbacks(callbacks: Sequence[OnRunEnd], run_id: str, run: Run | None) -> None:
    """Run the `on_run_end` callbacks of an ended run; a failing one does not stop the others."""
    for callback in list(callbacks):
        try:
            await callback(run_id, run)
        except Exception:
            logger.exception("run %s: an on_run_end callback failed", run_id)


async def record_end(
    stores: Stores, run_id: str, journal: RunJournal, outcome: RunOutcome, cancel_reason: str | None
) -> tuple[RunOutcome, Run]:
    """Write the terminal result and the terminal status, retrying storage failures with back-off.

    Both writes are idempotent, so a retry after a write that did land changes nothing. The first
    outcome the journal settled wins; a cancel keeps why the host cancelled in the run's error.
    """
    async for attempt in AsyncRetrying(
        stop=stop_after_delay(tuning.TERMINAL_RETRY_S),
        wait=wait_random_exponential(multiplier=0.1, max=2.0),
        retry=retry_if_exception(lambda exc: isinstance(exc, STORAGE_ERRORS)),
        sleep=anyio.sleep,
        before_sleep=lambda state: _log_terminal_retry(run_id, state),
        reraise=True,
    ):
        with attempt:
            final = with_cancel_reason(await end_journal(run_id, journal, outcome), cancel_reason)
            ended = await stores.runs.finish(
                run_id, final.status, error=final.error, usage=final.usage or None
            )
            if ended.status is not final.status:
                logger.warning(
                    "run %s had already ended %s; not moved to %s", run_id, ended.status, final.status
                )
            return final, ended
    raise AssertionError("unreachable: tenacity re-raises the last failure")


async def end_journal(run_id: str, journal: RunJournal, outcome: RunOutcome) -> RunOutcome:
    """The journal's terminal result; a storage failure is raised (to retry), any other logged."""
    try:
        return await journal.end(outcome)
    except STORAGE_ERRORS:
        raise
    except Exception:
        # The status must still end (the stream's `event: end` carries it).
        logger.exception("run %s: its terminal result could not be stored", run_id)
        return journal.outcome or outcome


async def revoke_after_failed_close(stores: Stores, run_id: str) -> Run | None:
    """The end was not recorded by this close: make sure the grant is revoked anyway."""
    try:
        await stores.runs.revoke(run_id)
        return await stores.runs.get(run_id)
    except Exception:
        logger.exception("run %s: could not revoke its grant", run_id)
        return None


async def sweep(stores: Stores, runs: ActiveRuns, host_id: str) -> list[str]:
    """End the runs this host owns that none of its tasks holds; their ids.

    A run whose close could not write its end gets the outcome it was closing with; any other is failed
    with `host.run_lost`. Runs that are executing, being admitted, or released to the next host
    (executing on a runtime), are never touched, nor are those whose close wrote their end after the
    read (`ENDED`: at many runs in flight, most of what the read found has ended by the time the loop
    looks at it, and each would cost a write that changes nothing).
    """
    remembered = list(runs.in_phase(RunPhase.UNFINISHED))  # before the read: a close may fail meanwhile
    owned = await stores.runs.active_on(host_id)
    ended: list[str] = []
    for run_id in owned:
        active = runs.get(run_id)
        phase = None if active is None else active.phase
        if phase in (
            RunPhase.ADMITTING,
            RunPhase.QUEUED,
            RunPhase.EXECUTING,
            RunPhase.CLOSING,
            RunPhase.RELEASED,
            RunPhase.ENDED,
        ):
            continue
        unfinished = active.unfinished if active is not None else None
        journal, outcome = unfinished or (None, RunOutcome(RunStatus.FAILED, LOST))
        try:
            if journal is not None:
                outcome = await end_journal(run_id, journal, outcome)
            run = await stores.runs.finish(
                run_id, outcome.status, error=outcome.error, usage=outcome.usage or None
            )
        except Exception as exc:
            logger.warning("run %s: the sweeper could not end it yet: %s", run_id, exc.__cause__ or exc)
            continue
        if active is not None and active.phase is RunPhase.UNFINISHED:
            runs.forget(active)
        if not _ended_as(run, outcome):
            # The read raced the run's own close: it ended (its way) between `active_on` and `finish`.
            logger.debug("run %s ended on its own while the sweeper looked at it (%s)", run_id, run.status)
            continue
        ended.append(run_id)
        logger.warning(
            "run %s had no executor on this host; the sweeper ended it %s%s",
            run_id,
            run.status,
            f" ({run.error.code})" if run.error else "",
        )
    still_owned = set(owned)
    for active in remembered:
        if active.run_id not in still_owned and active.phase is RunPhase.UNFINISHED:
            runs.forget(active)  # no longer active: ended by someone else meanwhile
    return ended


def _ended_as(run: Run, outcome: RunOutcome) -> bool:
    """The run ended with the outcome the sweeper wrote (`finish` keeps the first terminal status)."""
    code = None if run.error is None else run.error.code
    return run.status is outcome.status and code == (None if outcome.error is None else outcome.error.code)


def _log_terminal_retry(run_id: str, state: RetryCallState) -> None:
    failure = state.outcome.exception() if state.outcome is not None else None
    logger.warning(
        "run %s: could not record its end (attempt %d); retrying: %s",
        run_id,
        state.attempt_number,
        getattr(failure, "__cause__", None) or failure,
    )


def trace_end(run_span: tracing.Span, ended: RunOutcome) -> None:
    """The run span's end: its status, and its error code when it did not complete."""
    status = str(ended.status)
    tracing.event(run_span, "ended", {tracing.RUN_STATUS: status})
    tracing.annotate(run_span, {tracing.RUN_STATUS: status})
    if ended.status is RunStatus.FAILED:
        tracing.fail(run_span, ended.error.code if ended.error else "failed")
    elif ended.error is not None:
        tracing.annotate(run_span, {tracing.ERROR_TYPE: ended.error.code})


def log_host_failure(run_id: str, exc: Exception) -> None:
    """Log a failure inside the host with the run id (the run's error says only a code and a short message)."""
    storage = find_error(exc, STORAGE_ERRORS)
    if storage is not None:
        logger.warning("run %s failed on storage: %s", run_id, storage.__cause__ or storage.message)
    else:
        logger.exception("run %s failed inside the host", run_id)
