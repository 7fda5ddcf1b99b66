"""The SQLite writer thread: one long-lived thread that runs the write transactions, one at a time.

Owns the thread and the hand-off between it and the event loop: `call` puts the function on the
thread's queue with the caller's context variables and awaits its result on the loop; the thread runs
one function at a time, in the order they came, and settles the caller's future through
`call_soon_threadsafe`. Does not own what the functions do (`engine.Database._write_on_thread`), the
writers' queue on the loop or the shielding of a transaction's caller (`engine.Database._writer_turn`).

Why not `anyio.to_thread.run_sync`: per call it enters a cancel scope, takes a capacity limiter on
behalf of the task, picks an idle worker or starts one, and goes through a `queue.Queue` (a lock and a
condition) each way, about a tenth of a SQLite run's write transaction on the loop. Here a call is a
future, a `SimpleQueue.put` and one `call_soon_threadsafe`.

Invariants:
- One function at a time, in submission order: the functions share one `sqlite3` connection, which is
  never used by two threads at once.
- A caller that awaits `call` gets the function's return value or its exception, raised on the loop;
  the function runs in a copy of the caller's context (as `anyio.to_thread.run_sync` runs it).
- The thread starts on the first call and ends on `stop` (after the functions queued before it have
  run); a call after `stop` starts a new one. It is a daemon thread: an interpreter that exits without
  `stop` is not held up by it.
- A result for a loop that has closed meanwhile is dropped (nobody is waiting for it any more).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar, TypeVarTuple

T = TypeVar("T")
Args = TypeVarTuple("Args")
_Job = tuple[
    contextvars.Context, Callable[..., Any], tuple[Any, ...], asyncio.AbstractEventLoop, asyncio.Future[Any]
]


class WriterThread:
    """A thread that runs the functions it is given one at a time (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        """The running thread's queue (each thread has its own: a stopping one takes no new call)."""
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    async def call(self, function: Callable[[*Args], T], *args: *Args) -> T:
        """`function(*args)` run on the thread; its result, or its exception raised here."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._started().put((contextvars.copy_context(), function, args, loop, future))
        return await future

    def stop(self) -> None:
        """End the thread once the functions queued so far have run, and wait for it (no-op when none)."""
        with self._guard:
            thread, self._thread = self._thread, None
            if thread is None:
                return
            self._jobs.put(None)
        thread.join()

    def _started(self) -> queue.SimpleQueue[_Job | None]:
        """The running thread's queue, starting a thread when none runs."""
        if self._thread is None:
            with self._guard:
                if self._thread is None:
                    self._jobs = queue.SimpleQueue()
                    thread = threading.Thread(
                        target=self._main, args=(self._jobs,), name=self._name, daemon=True
                    )
                    thread.start()
                    self._thread = thread
        return self._jobs

    @staticmethod
    def _main(jobs: queue.SimpleQueue[_Job | None]) -> None:
        while (job := jobs.get()) is not None:
            context, function, args, loop, future = job
            try:
                result = context.run(function, *args)
            except BaseException as exc:  # handed to the caller, raised there
                _settle(loop, future, None, exc)
            else:
                _settle(loop, future, result, None)
            del job, context, function, args, future  # nothing of a finished call outlives it here


def _settle(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], result: Any, error: BaseException | None
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed: nobody awaits the result any more
        loop.call_soon_threadsafe(_resolve, future, result, error)


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled (never inside a shielded transaction)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
