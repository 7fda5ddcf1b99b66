"""Run grants as the facts server sees them: read from the `runs` table, cached briefly, ended locally.

Owns `GrantCache` and `RunAccess` (the authenticated run a request belongs to). Does not decide what a
grant allows (`grants.py` built it; the handlers read it) nor check tokens (`server.py` does).

Invariants:
- The `runs` table is the source of truth, so every host process sharing the database serves every run.
  A cached record is used for at most `ttl_s`: a grant revoked by another process stops working here
  within that time. Unknown runs are not cached (a run admitted a moment later is found at once).
- `end(run_id)` makes this process treat the run as ended immediately and for good, whatever the
  database says: its record reads back revoked. Ended ids are kept for `ENDED_KEEP_S` (by then the
  database has revoked the grant too) and at most `MAX_ENDED` of them.
- Both maps are bounded (`max_entries`, `MAX_ENDED`), oldest evicted first.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

from mcphost.errors import RunNotFoundError
from mcphost.stores import GrantRecord
from mcphost.stores.runs import RunStore

ENDED_KEEP_S = 3600.0
MAX_ENDED = 100_000


@dataclass(frozen=True)
class RunAccess:
    """The run an authenticated request belongs to, as found when the request arrived."""

    run_id: str
    record: GrantRecord
    session_id: str | None = None
    """The warm session the request came through (`/sessions/{session_id}/mcp`), else None."""


class GrantCache:
    """Grant records by run id, read through to the runs store."""

    def __init__(self, runs: RunStore, *, ttl_s: float = 2.0, max_entries: int = 10_000) -> None:
        if ttl_s < 0 or max_entries < 1:
            raise ValueError(f"ttl_s must be >= 0 and max_entries >= 1; got {ttl_s}, {max_entries}")
        self._runs = runs
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._records: OrderedDict[str, tuple[GrantRecord, float]] = OrderedDict()
        self._ended: OrderedDict[str, float] = OrderedDict()

    async def get(self, run_id: str) -> GrantRecord | None:
        """The run's grant record, or None when the run does not exist. Store errors propagate."""
        now = time.monotonic()
        cached = self._records.get(run_id)
        if cached is not None and cached[1] > now:
            record = cached[0]
        else:
            try:
                record = await self._runs.grant(run_id)
            except RunNotFoundError:
                self._records.pop(run_id, None)
                return None
            self._records[run_id] = (record, time.monotonic() + self._ttl_s)
            self._records.move_to_end(run_id)
            while len(self._records) > self._max_entries:
                self._records.popitem(last=False)
        if run_id in self._ended and not record.revoked:
            return record.model_copy(update={"revoked": True})
        return record

    def end(self, run_id: str) -> None:
        """Treat the run as ended from now on and forget its cached record."""
        self._records.pop(run_id, None)
        self._ended[run_id] = time.monotonic()
        self._ended.move_to_end(run_id)
        while len(self._ended) > MAX_ENDED:
            self._ended.popitem(last=False)

    def sweep(self) -> None:
        """Drop expired records and ended ids old enough for the database to know."""
        now = time.monotonic()
        for run_id in [r for r, (_, expires) in self._records.items() if expires <= now]:
            del self._records[run_id]
        while self._ended and next(iter(self._ended.values())) < now - ENDED_KEEP_S:
            self._ended.popitem(last=False)
