"""`Signal`: a wake-up that is never lost, for tasks of one process (the run feeds, `feed.py`; the
streamed chat replies, `replies.py`). Owns nothing else."""

from __future__ import annotations

import anyio
import anyio.lowlevel


class Signal:
    """A wake-up that is never lost: `notify()` wakes every waiter holding a ticket taken before it.

    Take `ticket()` *before* reading the state the signal guards, then `wait(ticket)`: a notify that
    lands between the read and the wait has already set the ticket, so the wait returns at once.
    """

    def __init__(self) -> None:
        self._event = anyio.Event()

    def ticket(self) -> anyio.Event:
        return self._event

    def notify(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    @staticmethod
    async def wait(ticket: anyio.Event, timeout: float) -> None:
        if ticket.is_set():  # notified since the ticket was taken: no deadline to set up
            await anyio.lowlevel.checkpoint()
            return
        with anyio.move_on_after(timeout):
            await ticket.wait()
