"""Start-up with the cyclic garbage collector paused, then the start-up's objects frozen out of its way.

A command-line process imports the server stack (SQLAlchemy, pydantic models, the MCP SDK, uvicorn):
hundreds of thousands of container objects that live until the process ends. With the collector on,
every few hundred allocations start a collection and the older generations are traversed again and
again while those imports run, and at exit the interpreter's final collections traverse the whole heap
once more; together about a third of the CPU of a cold `mcphost run`. So the console script pauses the
collector (`pause`) before it imports anything, and once the host is up (`resume`) moves every object
alive into the permanent generation (`gc.freeze`) and turns the collector back on: later collections
see only what the run or the server allocates since, and the exit skips the frozen heap.

Invariants: `resume` after `pause` always turns the collector back on (the command line calls it in a
`finally`); without `pause` (the library used in-process, the tests) both do nothing. Frozen objects
are still freed by reference counting; only cycles among them would outlive their use, and the
start-up's modules, classes and schemas live for the whole process anyway.
"""

from __future__ import annotations

import gc

_paused = False


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
        gc.freeze()
        gc.enable()
