"""Process-group helpers for plugin processes: liveness checks, signals and bounded waits.

Used by `mcphost.plugins.process`. Every wait here is bounded by its caller's timeout.
"""

from __future__ import annotations

import logging
import os
import signal
from contextlib import suppress

import anyio
import anyio.abc

logger = logging.getLogger("mcphost.plugins")

_GROUP_POLL = 0.02
BROKEN_BEFORE_INITIALIZE = "broken before initialize"
"""The failure recorded when a process broke before answering `initialize`."""


# -- process lifecycle ---------------------------------------------------------------------------------


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # EPERM never proves the group is gone
    return True


def signal_group(pgid: int, signum: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


async def wait_group_gone(pgid: int, timeout: float) -> bool:
    """Poll the group (no event exists for it) until it is gone or the timeout passes."""
    with anyio.move_on_after(timeout):
        while True:
            if not group_alive(pgid):
                return True
            await anyio.sleep(_GROUP_POLL)
    return False


async def wait_exit(process: anyio.abc.Process, timeout: float) -> bool:
    with anyio.move_on_after(timeout):
        await process.wait()
    return process.returncode is not None


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


def describe_end(failure: str | None, broken: str | None, exited: str | None) -> str:
    """Why a process ended, from what the host saw: a failed start, a broken pipe, or its own stop."""
    if failure == BROKEN_BEFORE_INITIALIZE:
        return f"{exited or 'closed its stdout'} before answering 'initialize'"
    if failure is not None:
        return failure
    if broken == "closed its stdout":
        return exited or broken
    if broken is not None:
        return f"{broken} and {exited}" if exited else broken
    return "was shut down"


async def release_process(process: anyio.abc.Process) -> None:
    """Close our ends of the pipes and the asyncio transport, which would otherwise warn at GC."""
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await stream.aclose()
    # Nothing public exposes the transport (the `mcp` SDK's stdio client does the same walk).
    transport = getattr(process, "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with suppress(PermissionError):
            close()
