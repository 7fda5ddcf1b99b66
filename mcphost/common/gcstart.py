"""Start-up with the cyclic garbage collector paused, then the start-up's objects frozen out of its way.

A command-line process imports the server stack (SQLAlchemy, pydantic models, the MCP SDK, uvicorn):
hundreds of thousands of container objects that live until the process ends. With the collector on,
every few hundred allocations start a collection and the older generations are traversed again and
again while those imports run, and at exit the interpreter's final collections traverse the whole heap
once more; together about a third of the CPU of a cold `mcphost run`. So the console script pauses the
collector (`pause`) before it imports anything, and once the host is up (`resume`) moves every object
alive into the permanent generation (`gc.freeze`) and turns the collector back on: later collections
see only what the run or the server allocates since, and the exit skips the frozen heap.

A serving host then allocates per request and per run, and part of what it frees is in reference cycles
(futures, tasks, cancel scopes and the exceptions that cross them), which only the collector frees. With
the default first-generation threshold (700) a collection ran every few hundred allocations, several
times per run, and every tenth of the tenth traversed all that the host had built since start-up: about
7 % of a served echo run's CPU. `resume` raises the threshold to `GEN0_THRESHOLD`: a collection now
finds mostly garbage, the short-lived objects having been freed by reference counting meanwhile, and
the older generations are traversed a tenth as often; the cycles wait at most that many allocations
(tens of MB at worst) to be freed.

Why 100,000 and not 10,000: the count that starts a collection is allocations minus deallocations since
the last one, floored at zero, so with many runs in flight it wanders up and down with their working
set, and a low threshold is crossed by that wandering alone: at 10,000, 64 echo runs in flight set off
84 first-generation collections in 15 s (about 130 µs of a 3.5 ms run's CPU; each one stalls the event
loop for several ms) that found almost nothing to free (a cycle or two each). At 50,000 and at 100,000
none ran in the same 15 s. Side by side (`bench.revisions`, SQLite, c = 64) the host CPU per run was
0.92x and 0.96x of 10,000's, where the same tree against itself gave 0.99x.

Invariants: `resume` after `pause` always turns the collector back on (the command line calls it in a
`finally`); without `pause` (the library used in-process, the tests) both do nothing. Frozen objects
are still freed by reference counting; only cycles among them would outlive their use, and the
start-up's modules, classes and schemas live for the whole process anyway.
"""

from __future__ import annotations

import gc

_paused = False
GEN0_THRESHOLD = 100_000
"""Net allocations between two first-generation collections once the host is up (CPython's default: 700)."""


def pause() -> None:
    """Turn the collector off for the start-up (no-op when it is already off)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Freeze what the start-up built and turn the collector back on, once, if `pause` turned it off."""
    global _paused
    if _paused:
        _paused = False
        collect_less()
        gc.enable()


def collect_less() -> None:
    """Freeze every object alive into the permanent generation and collect every `GEN0_THRESHOLD`
    allocations from now on: what `resume` does for the host, and a serving plugin for itself."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, older, oldest)
