"""What both clients are configured with: the server, the key, time limits and the stream's reconnects.

Owns the defaults (`MCPHOST_URL`, `MCPHOST_API_KEY`), the request headers, the event ids the client
makes and the back-off between reconnects. Standard library only (the back-off's tenacity is imported
on the first reconnect).
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcphost.common.backoff import Backoff

DEFAULT_URL = "http://127.0.0.1:8787"
RECONNECTS = 5
"""A dropped result stream is resumed at most this many times in a row (a result received resets it)."""
BACKOFF_INITIAL_S = 0.2
BACKOFF_MAX_S = 3.0
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_event_id() -> str:
    """`evt_<ULID>`: time-ordered like the host's own ids (48-bit milliseconds, 80 random bits)."""
    value = (time.time_ns() // 1_000_000) << 80 | secrets.randbits(80)
    return "evt_" + "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


@dataclass(frozen=True, slots=True)
class Options:
    base_url: str
    headers: dict[str, str]
    timeout_s: float
    reconnects: int

    @classmethod
    def of(cls, base_url: str | None, api_key: str | None, timeout_s: float, reconnects: int) -> Options:
        url = (base_url or os.environ.get("MCPHOST_URL") or DEFAULT_URL).rstrip("/")
        key = api_key if api_key is not None else os.environ.get("MCPHOST_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return cls(url, headers, timeout_s, reconnects)


class Waits:
    """The waits between reconnects of one stream (`mcphost.common.backoff`, jittered exponential)."""

    def __init__(self) -> None:
        self._backoff: Backoff | None = None

    def next(self) -> float:
        if self._backoff is None:
            from mcphost.common.backoff import Backoff

            self._backoff = Backoff(BACKOFF_INITIAL_S, BACKOFF_MAX_S)
        return self._backoff.next()

    def reset(self) -> None:
        if self._backoff is not None:
            self._backoff.reset()
