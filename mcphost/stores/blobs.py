"""Blob storage: content-addressed bytes behind one small protocol, on disk or in the database.

Owns staging (streaming incoming bytes to a temporary file while hashing and counting them) and the two
backends. Does not own artifact metadata, ids or integrity policy (`artifacts.py`).

Invariants:
- A blob is addressed by the SHA-256 of its bytes; storing bytes that are already stored is a no-op,
  so duplicates share one copy.
- `stage` leaves nothing behind when it fails (too large, the source raises, cancelled, the disk is
  full): the temporary file is removed under a shield. A staged file is fsynced before a backend takes it.
- A failed disk write is an operator's error, not a bug: a full disk (ENOSPC, EDQUOT) raises
  `StorageFullError` (HTTP 507), anything else (data_dir gone, read-only, not permitted)
  `StorageUnavailableError` (503); both name the folder and say that nothing was stored.
- `DiskBlobs` keeps `root/<aa>/<bb>/<sha256>`. The staged file lives in `root/.tmp` (the final
  directory depends on the hash, known only at the end, so "the same directory" is the same
  filesystem) and is moved into place with an atomic rename followed by a directory fsync: a reader
  sees either no blob or the whole blob.
- `DatabaseBlobs` keeps fixed-size chunks (`CHUNK_SIZE`) keyed (sha256, idx) and writes all chunks of a
  blob in one transaction, so chunk 0 existing means the blob is complete; a range read touches only
  the chunks it covers. An empty blob is one empty chunk.
- Reading never trusts the stored bytes: backends report what they find (`stored_size`) and raise
  `StorageIntegrityError` on a missing chunk or a short file; hash checks are `artifacts.py`'s job.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar

import anyio
from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from mcphost.errors import (
    HostError,
    PayloadTooLargeError,
    StorageFullError,
    StorageIntegrityError,
    StorageUnavailableError,
)
from mcphost.stores._sql import insert_ignoring
from mcphost.stores.engine import Database
from mcphost.stores.faults import is_disk_full
from mcphost.stores.tables import BlobChunkRow

CHUNK_SIZE = 256 * 1024
"""Chunk size of `DatabaseBlobs` rows, and the write buffer of `stage`."""
READ_SIZE = 256 * 1024
"""The largest piece a backend yields at once when streaming."""
_DB_BATCH_CHUNKS = 8
T = TypeVar("T")


@dataclass(frozen=True)
class StagedBlob:
    """Bytes written to a temporary file, with their hash and size."""

    path: Path
    sha256: str
    size: int


async def remove_file(path: Path) -> None:
    """Delete `path` if it exists, even while the caller is being cancelled."""
    with anyio.CancelScope(shield=True):
        await anyio.Path(path).unlink(missing_ok=True)


def _make_staging_file(staging_dir: Path) -> tuple[int, str]:
    staging_dir.mkdir(parents=True, exist_ok=True)
    return tempfile.mkstemp(dir=staging_dir, prefix="stage-", suffix=".part")


def _write_all(f: BinaryIO, data: bytes) -> None:
    f.write(data)


def _sync_close(f: BinaryIO) -> None:
    f.flush()
    os.fsync(f.fileno())
    f.close()


def write_failure(exc: OSError, where: Path, received: int | None = None) -> HostError:
    """The error an operator can act on for a failed write under `where`: a full disk (507) or storage
    that is gone, read-only or not permitted (503)."""
    got = f" ({received} bytes received)" if received is not None else ""
    if is_disk_full(exc):
        return StorageFullError(
            f"The disk holding {where} is full, so nothing was stored{got}. Free space on it (or raise "
            "the quota) and retry.",
            details={"path": str(where)},
        )
    return StorageUnavailableError(
        f"Cannot write under {where}: {exc.strerror or exc}, so nothing was stored{got}. Check that "
        "data_dir exists and is writable by mcphost.",
        details={"path": str(where)},
    )


async def _on_disk(where: Path, received: int | None, fn: Callable[..., T], *args: object) -> T:
    try:
        return await anyio.to_thread.run_sync(fn, *args)
    except OSError as exc:
        raise write_failure(exc, where, received) from exc


async def stage(chunks: AsyncIterable[bytes], staging_dir: Path, *, max_bytes: int) -> StagedBlob:
    """Stream `chunks` to a new file in `staging_dir`, hashing as it goes.

    Raises:
        PayloadTooLargeError: past `max_bytes` (nothing is left behind).
        StorageFullError: the disk has no room left (nothing is left behind).
        StorageUnavailableError: the staging folder cannot be created or written.
    """
    fd, name = await _on_disk(staging_dir, None, _make_staging_file, staging_dir)
    path = Path(name)
    f = os.fdopen(fd, "wb")
    digest = hashlib.sha256()
    size = 0
    buffer = bytearray()
    try:
        async for chunk in chunks:
            size += len(chunk)
            if size > max_bytes:
                raise PayloadTooLargeError(
                    f"The upload exceeds the limit of {max_bytes} bytes; send a smaller file.",
                    details={"max_bytes": max_bytes},
                )
            buffer += chunk
            if len(buffer) >= CHUNK_SIZE:
                data = bytes(buffer)
                buffer.clear()
                digest.update(data)
                await _on_disk(staging_dir, size, _write_all, f, data)
        digest.update(buffer)
        await _on_disk(staging_dir, size, _write_all, f, bytes(buffer))
        await _on_disk(staging_dir, size, _sync_close, f)
    except BaseException:
        with contextlib.suppress(OSError):  # closing flushes: on a full disk that fails again
            f.close()
        await remove_file(path)
        raise
    return StagedBlob(path=path, sha256=digest.hexdigest(), size=size)


class BlobBackend(Protocol):
    """Where blob bytes live."""

    @property
    def staging_dir(self) -> Path:
        """Where `stage` should write files this backend will `commit`."""
        ...

    async def commit(self, staged: StagedBlob) -> None:
        """Store the staged bytes (the caller removes `staged.path` afterwards; it may commit again)."""
        ...

    async def stored_size(self, sha256: str) -> int | None:
        """The size of the stored blob, or None when it is missing. O(1)."""
        ...

    def read_range(self, sha256: str, offset: int, length: int) -> AsyncIterator[bytes]:
        """The stored bytes [offset, offset + length), in pieces of at most `READ_SIZE`."""
        ...

    async def delete(self, sha256: str, session: AsyncSession) -> int:
        """Remove the stored blob inside the caller's write transaction `session`; the bytes it held (0
        when it was missing). The caller has checked, in that transaction and under `BLOB_LOCK`, that no
        artifact references it."""
        ...


class DiskBlobs:
    """Blobs as files under `root/<aa>/<bb>/<sha256>`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def staging_dir(self) -> Path:
        return self.root / ".tmp"

    def path_of(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256[2:4] / sha256

    async def commit(self, staged: StagedBlob) -> None:
        target = self.path_of(staged.sha256)

        def _move() -> None:
            if target.exists() and target.stat().st_size == staged.size:
                return  # already stored: duplicates share one file
            target.parent.mkdir(parents=True, exist_ok=True)
            # A link, renamed into place: the staged file stays for the caller (who may commit it again).
            linked = staged.path.with_name(staged.path.name + ".commit")
            linked.unlink(missing_ok=True)
            os.link(staged.path, linked)
            os.replace(linked, target)
            dir_fd = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

        await _on_disk(target.parent, staged.size, _move)

    async def stored_size(self, sha256: str) -> int | None:
        try:
            return (await anyio.Path(self.path_of(sha256)).stat()).st_size
        except FileNotFoundError:
            return None

    async def delete(self, sha256: str, session: AsyncSession) -> int:
        del session  # the file goes now; the caller's transaction only serializes it with new references
        path = self.path_of(sha256)

        def _unlink() -> int:
            try:
                size = path.stat().st_size
                path.unlink()
            except FileNotFoundError:
                return 0
            return size

        return await anyio.to_thread.run_sync(_unlink)

    async def read_range(self, sha256: str, offset: int, length: int) -> AsyncIterator[bytes]:
        try:
            f = await anyio.open_file(self.path_of(sha256), "rb")
        except FileNotFoundError:
            raise StorageIntegrityError(f"Blob {sha256} is missing from {self.root}.") from None
        async with f:
            await f.seek(offset)
            remaining = length
            while remaining > 0:
                data = await f.read(min(remaining, READ_SIZE))
                if not data:
                    raise StorageIntegrityError(f"Blob {sha256} is shorter than its recorded size.")
                remaining -= len(data)
                yield data


class DatabaseBlobs:
    """Blobs as `CHUNK_SIZE` rows of the `blob_chunks` table."""

    def __init__(self, db: Database, staging_dir: Path) -> None:
        self._db = db
        self._staging_dir = staging_dir

    @property
    def staging_dir(self) -> Path:
        return self._staging_dir

    async def commit(self, staged: StagedBlob) -> None:
        async with self._db.read() as session:
            exists = await session.execute(
                select(BlobChunkRow.idx).where(BlobChunkRow.sha256 == staged.sha256, BlobChunkRow.idx == 0)
            )
            if exists.first() is not None:
                return
        async with await anyio.open_file(staged.path, "rb") as f, self._db.write() as session:
            idx = 0
            while True:
                data = await f.read(CHUNK_SIZE)
                if idx > 0 and not data:
                    break
                values = {"sha256": staged.sha256, "idx": idx, "data": data}
                await session.execute(
                    insert_ignoring(self._db.dialect, BlobChunkRow, values, ["sha256", "idx"])
                )
                idx += 1
                if len(data) < CHUNK_SIZE:
                    break

    async def stored_size(self, sha256: str) -> int | None:
        async with self._db.read() as session:
            last = (
                await session.execute(
                    select(BlobChunkRow.idx, func.length(BlobChunkRow.data))
                    .where(BlobChunkRow.sha256 == sha256)
                    .order_by(BlobChunkRow.idx.desc())
                    .limit(1)
                )
            ).one_or_none()
        return None if last is None else last[0] * CHUNK_SIZE + int(last[1])

    async def delete(self, sha256: str, session: AsyncSession) -> int:
        size = await session.scalar(
            select(func.sum(func.length(BlobChunkRow.data))).where(BlobChunkRow.sha256 == sha256)
        )
        await session.execute(delete(BlobChunkRow).where(BlobChunkRow.sha256 == sha256))
        return int(size or 0)

    async def read_range(self, sha256: str, offset: int, length: int) -> AsyncIterator[bytes]:
        if length <= 0:
            return
        first, last = offset // CHUNK_SIZE, (offset + length - 1) // CHUNK_SIZE
        for start in range(first, last + 1, _DB_BATCH_CHUNKS):
            stop = min(start + _DB_BATCH_CHUNKS - 1, last)
            # One short transaction per batch: a slow reader never holds a connection open.
            async with self._db.read() as session:
                rows = (
                    await session.execute(
                        select(BlobChunkRow.idx, BlobChunkRow.data)
                        .where(
                            BlobChunkRow.sha256 == sha256,
                            BlobChunkRow.idx >= start,
                            BlobChunkRow.idx <= stop,
                        )
                        .order_by(BlobChunkRow.idx)
                    )
                ).all()
            if [r.idx for r in rows] != list(range(start, stop + 1)):
                raise StorageIntegrityError(f"Blob {sha256} is missing chunks {start}-{stop}.")
            for idx, data in rows:
                lo = max(offset - idx * CHUNK_SIZE, 0)
                hi = min(offset + length - idx * CHUNK_SIZE, CHUNK_SIZE)
                piece = bytes(data[lo:hi])
                if len(piece) != hi - lo:
                    raise StorageIntegrityError(f"Blob {sha256} chunk {idx} is shorter than expected.")
                yield piece
