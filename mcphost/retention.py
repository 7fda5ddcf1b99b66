"""Retention collection: turning `[retention]` into deletes, the files on disk, and the periodic job.

Owns `Collector` (every configured kind in `RETENTION_KINDS` order: the row kinds through
`stores/retention.py`, run folders and harness-home session files on disk here), the `retention` lease
that lets one host at a time collect, and `run_collector`, the periodic job a serving host runs (a task
owned by `app.open_host`). Does not own the row deletes or which rows a held run references
(`stores/retention.py`), nor the metrics (the caller's `on_collected`).

Invariants:
- With no `*_days` key nothing is collected: the job only sleeps, `mcphost gc` says so.
- One collector at a time across every process sharing the database: `tick` (the job, and `mcphost gc`)
  runs only while holding the `retention` lease, renewed before each kind and released at the end; a
  host that dies holding it blocks collection for at most `LEASE_TERM_S`. Dry runs delete nothing and
  need no lease.
- A run folder (`<harness_dir>/runs/<run_id>/`) goes only when the database knows its run as finished
  before the cutoff and no held run shares its conversation; a folder the database does not know, a
  symlink or a file stays. Harness homes lose only session-history files (`HOME_HISTORY`) not modified
  since the cutoff, and never one naming a session (or folder) a held run's conversation continues.
- Files go in batches of at most `BATCH`, each in a worker thread; sizes are the files' own (`lstat`).
- The job never takes the host down: a failing pass is logged and tried again after the interval, with
  the periodic loops' back-off (`common/periodic.py`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from mcphost.common.periodic import Periodic
from mcphost.config import RETENTION_KINDS, RetentionSettings
from mcphost.stores import Stores
from mcphost.stores.leases import LeaseStore
from mcphost.stores.retention import BATCH, ROW_KINDS, Collected, RetentionStore

log = logging.getLogger(__name__)

DAY_S = 86400.0
LEASE = "retention"
LEASE_TERM_S = 900.0
"""How long a collector holds the lease without renewing it (it renews before each kind)."""
HOME_HISTORY: tuple[str, ...] = (
    ".claude/projects",
    ".claude/todos",
    ".claude/shell-snapshots",
    ".claude/debug",
    ".codex/sessions",
    ".codex/log",
)
"""The folders of a harness home (`<harness_dir>/<name>-home/`) that fill with per-session files."""

OnCollected = Callable[[Collected], Awaitable[None]]


class Collector:
    """Collect every kind `[retention]` gives a maximum age, on this host's behalf (`holder`)."""

    def __init__(
        self,
        stores: Stores,
        settings: RetentionSettings,
        *,
        holder: str,
        on_collected: OnCollected | None = None,
    ) -> None:
        self._store = RetentionStore(stores.db, stores.artifacts.blobs)
        self._leases = LeaseStore(stores.db)
        self.settings = settings
        self._holder = holder
        self._on_collected = on_collected

    async def tick(self) -> list[Collected] | None:
        """Collect every configured kind under the lease; None when another host holds it."""
        if not await self._leases.acquire(LEASE, self._holder, term_s=LEASE_TERM_S):
            return None
        try:
            return await self._collect(dry_run=False, renew=True)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await self._leases.release(LEASE, self._holder)

    async def dry_run(self) -> list[Collected]:
        """What `tick` would delete now; deletes nothing."""
        return await self._collect(dry_run=True, renew=False)

    async def _collect(self, *, dry_run: bool, renew: bool) -> list[Collected]:
        now = time.time()
        done: list[Collected] = []
        for kind in RETENTION_KINDS:
            days = self.settings.days(kind)
            if days is None:
                continue
            if renew and not await self._leases.acquire(LEASE, self._holder, term_s=LEASE_TERM_S):
                log.warning("retention: lost the %r lease before %s; stopping this pass", LEASE, kind)
                break
            cutoff = now - days * DAY_S
            if kind in ROW_KINDS:
                item = await self._store.collect(kind, cutoff, dry_run=dry_run)
            elif kind == "run_folders":
                item = await self._run_folders(cutoff, dry_run=dry_run)
            else:
                assert kind == "harness_homes", kind
                item = await self._harness_homes(cutoff, dry_run=dry_run)
            done.append(item)
            if not dry_run and self._on_collected is not None:
                await self._on_collected(item)
        return done

    async def _run_folders(self, cutoff: float, *, dry_run: bool) -> Collected:
        folders = 0
        freed = 0
        for harness_dir in self.settings.harness_dirs:
            names = await anyio.to_thread.run_sync(_run_folder_names, harness_dir / "runs")
            for start in range(0, len(names), BATCH):
                batch = names[start : start + BATCH]
                removable = await self._store.removable_run_folders(batch, cutoff)
                paths = [harness_dir / "runs" / name for name in batch if name in removable]
                sizes = await anyio.to_thread.run_sync(_remove_trees, paths, dry_run)
                folders += len(paths)
                freed += sizes
        return Collected(kind="run_folders", rows=folders, bytes=freed, cutoff=cutoff)

    async def _harness_homes(self, cutoff: float, *, dry_run: bool) -> Collected:
        held = await self._store.held_sessions()
        marks = {mark for value in held for mark in (value, Path(value).name) if mark}
        files = 0
        freed = 0
        for harness_dir in self.settings.harness_dirs:
            found = await anyio.to_thread.run_sync(_stale_home_files, harness_dir, cutoff, frozenset(marks))
            for start in range(0, len(found), BATCH):
                batch = found[start : start + BATCH]
                freed += await anyio.to_thread.run_sync(_remove_files, batch, dry_run)
                files += len(batch)
            if not dry_run:
                await anyio.to_thread.run_sync(_prune_empty_dirs, harness_dir)
        return Collected(kind="harness_homes", rows=files, bytes=freed, cutoff=cutoff)


def _run_folder_names(runs: Path) -> list[str]:
    try:
        with os.scandir(runs) as entries:
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _tree_size(path: Path) -> int:
    size = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                size += os.lstat(os.path.join(root, name)).st_size
    return size


def _remove_trees(paths: list[Path], dry_run: bool) -> int:
    freed = 0
    for path in paths:
        freed += _tree_size(path)
        if not dry_run:
            shutil.rmtree(path, ignore_errors=True)
    return freed


def _history_dirs(harness_dir: Path) -> Iterator[Path]:
    try:
        homes = sorted(p for p in harness_dir.glob("*-home") if p.is_dir() and not p.is_symlink())
    except OSError:
        return
    for home in homes:
        for part in HOME_HISTORY:
            folder = home / part
            if folder.is_dir() and not folder.is_symlink():
                yield folder


def _stale_home_files(harness_dir: Path, cutoff: float, held: frozenset[str]) -> list[Path]:
    found: list[Path] = []
    for folder in _history_dirs(harness_dir):
        for root, _dirs, names in os.walk(folder):
            for name in names:
                path = Path(root, name)
                if any(mark in str(path.relative_to(folder)) for mark in held):
                    continue
                try:
                    if path.lstat().st_mtime < cutoff:
                        found.append(path)
                except FileNotFoundError:
                    pass
    return found


def _remove_files(paths: list[Path], dry_run: bool) -> int:
    freed = 0
    for path in paths:
        try:
            freed += path.lstat().st_size
            if not dry_run:
                path.unlink()
        except FileNotFoundError:
            pass
    return freed


def _prune_empty_dirs(harness_dir: Path) -> None:
    """Remove folders the file deletes left empty below each history folder (never the folder itself)."""
    for folder in _history_dirs(harness_dir):
        for root, _dirs, _names in os.walk(folder, topdown=False):
            if Path(root) != folder:
                with contextlib.suppress(OSError):  # not empty
                    os.rmdir(root)


async def run_collector(
    collector: Collector, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """The periodic job, until cancelled: a pass at start and every `interval_s` after, while any kind
    has a maximum age (without one it returns at once)."""
    if not collector.settings.enabled:
        task_status.started()
        return

    async def tick() -> None:
        done = await collector.tick()
        if done is None:
            log.debug("retention: another host holds the %r lease; skipping this pass", LEASE)
        for item in done or ():
            log.info("retention: %s: %d deleted, %d bytes", item.kind, item.rows, item.bytes)

    loop = Periodic("the retention pass", tick, interval_s=collector.settings.interval_s)
    await loop.run(task_status=task_status)
