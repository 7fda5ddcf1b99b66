"""Is the storage under a running host still usable? A cheap probe, cached for a second.

Owns `StorageProbe`: what `/healthz` and the HTTP API's storage guard ask before serving. Does not own
how an unhealthy answer becomes HTTP (`mcphost.app`) nor how single store calls fail (`engine.py`).

Invariants:
- A probe costs a few `stat` calls and one `SELECT` (PostgreSQL: also `transaction_read_only`); its answer
  is reused for `ttl_s` (1 s), and concurrent callers share one probe, so `/healthz` stays cheap under
  any polling rate.
- `data_dir` holds an empty marker file (`DATA_DIR_MARKER`, created when the stores open): a folder
  without it was removed or replaced under the running host (inode numbers are reused, so they cannot
  tell). A SQLite file is identified by (device, inode) when the stores open; one removed or replaced is
  unhealthy even though SQLite would go on writing to the unlinked file, losing what it writes.
- The reason is one line an operator can act on; it names paths and the database URL with its password
  hidden, never driver internals beyond the first line.
- A database that cannot be reached is named by the driver's own error (not the client-facing
  `StorageUnavailableError` around it), logged at warning: at most once per `ttl_s`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
from sqlalchemy import text

from mcphost.stores.engine import Database, sqlite_path
from mcphost.stores.faults import first_line, redacted_url, writable

log = logging.getLogger(__name__)

HEALTH_TTL_S = 1.0
DATA_DIR_MARKER = ".mcphost-data-dir"
"""An empty file `open_stores` leaves in `data_dir`: a folder without it is not the one the host opened."""


@dataclass(frozen=True)
class StorageHealth:
    """One probe's answer: `reason` is None when the storage is usable."""

    reason: str | None
    checked_at: float

    @property
    def ok(self) -> bool:
        return self.reason is None


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


class StorageProbe:
    """`check()` says whether `data_dir` and the database are still there and writable."""

    def __init__(self, db: Database, data_dir: Path, *, ttl_s: float = HEALTH_TTL_S) -> None:
        self._db = db
        self._data_dir = data_dir
        self._sqlite = sqlite_path(db.url)
        self._ttl_s = ttl_s
        self._marker: Path | None = data_dir / DATA_DIR_MARKER
        try:
            self._marker.touch(exist_ok=True)
        except OSError:  # a read-only data_dir (a read-only command): only its existence is checked
            self._marker = None
        self._file_id = _identity(self._sqlite) if self._sqlite is not None else None
        self._last: StorageHealth | None = None
        self._lock = anyio.Lock()
        self.probes = 0
        """How many probes ran (the rest were answered from the cache)."""

    async def check(self) -> StorageHealth:
        """The storage's health, probed at most once per `ttl_s`."""
        last = self._last
        if last is not None and time.monotonic() - last.checked_at < self._ttl_s:
            return last
        async with self._lock:
            last = self._last
            if last is not None and time.monotonic() - last.checked_at < self._ttl_s:
                return last
            self.probes += 1
            reason = await anyio.to_thread.run_sync(self._files_reason)
            if reason is None:
                reason = await self._database_reason()
            self._last = StorageHealth(reason=reason, checked_at=time.monotonic())
            return self._last

    def expire(self) -> None:
        """Forget the cached answer: the next `check()` probes again."""
        self._last = None

    def _files_reason(self) -> str | None:
        where = self._data_dir
        if not where.is_dir() or (self._marker is not None and not self._marker.is_file()):
            return (
                f"data_dir {str(where)!r} was removed or replaced under the running host; restore it (or "
                "restart mcphost on a data_dir that exists)."
            )
        if not writable(where):
            return f"data_dir {str(where)!r} is not writable (read-only file system or permissions)."
        if self._sqlite is not None:
            if not self._sqlite.is_file() or _identity(self._sqlite) != self._file_id:
                return (
                    f"the SQLite database {str(self._sqlite)!r} was removed or replaced under the running "
                    "host; what is written now would be lost: restore the file and restart mcphost."
                )
            if not writable(self._sqlite):
                return f"the SQLite database {str(self._sqlite)!r} is not writable (read-only file system or permissions)."
        return None

    async def _database_reason(self) -> str | None:
        url = redacted_url(self._db.url)
        try:
            async with self._db.read() as session:
                if self._db.dialect == "postgresql":
                    read_only = (
                        await session.execute(text("SELECT current_setting('transaction_read_only')"))
                    ).scalar_one()
                    if read_only == "on":
                        return (
                            f"the database {url} is read-only (a standby, or default_transaction_read_only); "
                            "point database_url at the writable primary."
                        )
                else:
                    await session.execute(text("SELECT 1"))
        except Exception as exc:  # any failure to answer is the reason, in one line
            # `read()` turns a driver error into StorageUnavailableError with a fixed message that
            # points at the log: the driver's own error is what an operator needs, here and there.
            cause = exc.__cause__ or exc
            log.warning(
                "storage probe cannot reach the database %s: %s: %s", url, type(cause).__name__, cause
            )
            return f"cannot reach the database {url}: {first_line(cause)}"
        return None
