"""Artifacts: metadata rows plus content-addressed blobs, verified on read.

Owns the `artifacts` table, artifact ids (`art_<ulid>`), size limits on the way in and integrity checks
on the way out. Does not own where bytes live (`blobs.py`) or who may read an artifact (`grants.py`).

Invariants:
- The blob is stored (and fsynced) before its metadata row exists, so a row always has its bytes. A
  failed upload leaves neither a row nor a blob; a crash between the two can leave an unreferenced blob,
  which is harmless (content-addressed) and left for retention to collect.
- Verified on read: a full read hashes the bytes it returns and raises `StorageIntegrityError` when they
  do not match the recorded SHA-256. A range read (and `open_range`) checks the stored size every time
  and hashes the whole blob at most once per store instance (a bounded LRU of verified hashes), so range
  reads are O(length) amortized. A blob altered after that first check keeps its size check only.
- An artifact past `expires_at` reads as not found. A new artifact gets `expires_at` from the caller
  or, without one, `default_ttl_s` after its creation (`[retention] artifacts_days`); None keeps it.
- A row is inserted only while its blob is there: the insert checks the blob under the per-hash lock
  retention takes to delete an unreferenced blob (`BLOB_LOCK`), and stores the bytes again when
  retention removed them in between, so a new artifact sharing an expiring one's bytes keeps them.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterable, AsyncIterator, Callable

import anyio
from pydantic import BaseModel, ConfigDict
from sqlalchemy import insert, select

from mcphost.errors import InvalidArgumentError, NotFoundError, PayloadTooLargeError, StorageIntegrityError
from mcphost.models import new_id
from mcphost.protocol import ArtifactRef
from mcphost.stores._retry import idempotent
from mcphost.stores._sql import lock_in_transaction
from mcphost.stores.blobs import BlobBackend, remove_file, stage
from mcphost.stores.engine import Database
from mcphost.stores.tables import ArtifactRow

BLOB_LOCK = "blob"
"""The `lock_in_transaction` namespace of a blob's hash: held while a row starts referencing the blob
and while retention deletes it."""
VERIFIED_CACHE_SIZE = 4096
_HASH_IN_THREAD = 64 * 1024


class ArtifactRecord(BaseModel):
    """Artifact metadata as stored."""

    model_config = ConfigDict(frozen=True)

    artifact_id: str
    name: str | None
    mime_type: str
    size: int
    sha256: str
    owner_run_id: str | None
    conversation_id: str | None
    created_at: float
    expires_at: float | None

    def to_ref(self) -> ArtifactRef:
        """The protocol handle on this artifact."""
        return ArtifactRef(
            artifact_id=self.artifact_id,
            name=self.name,
            mime_type=self.mime_type,
            size=self.size,
            sha256=self.sha256,
        )


def _record(row: ArtifactRow) -> ArtifactRecord:
    return ArtifactRecord(
        artifact_id=row.artifact_id,
        name=row.name,
        mime_type=row.mime_type,
        size=row.size,
        sha256=row.sha256,
        owner_run_id=row.owner_run_id,
        conversation_id=row.conversation_id,
        created_at=row.created_at,
        expires_at=row.expires_at,
    )


async def _one(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def drop_unreferenced_blob(db: Database, blobs: BlobBackend, sha256: str) -> int:
    """Delete the blob `sha256` in its own write transaction under `BLOB_LOCK` when no artifact row
    references it any more; the bytes freed (0 when one still does). Retention and conversation deletes
    call it after their rows are gone."""
    async with db.write() as session:
        await lock_in_transaction(session, db.dialect, BLOB_LOCK, sha256)
        referenced = await session.scalar(
            select(ArtifactRow.artifact_id).where(ArtifactRow.sha256 == sha256).limit(1)
        )
        if referenced is not None:
            return 0
        return await blobs.delete(sha256, session)


class ArtifactStore:
    """Create artifacts and read them back, verified."""

    def __init__(self, db: Database, blobs: BlobBackend, *, default_ttl_s: float | None = None) -> None:
        assert default_ttl_s is None or default_ttl_s > 0, default_ttl_s
        self._db = db
        self.blobs = blobs
        self.default_ttl_s = default_ttl_s
        self._verified: OrderedDict[str, None] = OrderedDict()

    async def put_bytes(
        self,
        data: bytes,
        *,
        name: str | None,
        mime_type: str,
        max_bytes: int,
        owner_run_id: str | None = None,
        conversation_id: str | None = None,
        expires_at: float | None = None,
    ) -> ArtifactRecord:
        """Store `data` as a new artifact.

        Raises:
            PayloadTooLargeError: when `data` is longer than `max_bytes`.
        """
        if len(data) > max_bytes:
            raise PayloadTooLargeError(
                f"The artifact is {len(data)} bytes; the limit is {max_bytes}. Send a smaller file.",
                details={"max_bytes": max_bytes, "size": len(data)},
            )
        return await self.put_stream(
            _one(data),
            name=name,
            mime_type=mime_type,
            max_bytes=max_bytes,
            owner_run_id=owner_run_id,
            conversation_id=conversation_id,
            expires_at=expires_at,
        )

    async def put_stream(
        self,
        chunks: AsyncIterable[bytes],
        *,
        name: str | None,
        mime_type: str,
        max_bytes: int,
        owner_run_id: str | None = None,
        conversation_id: str | None = None,
        expires_at: float | None = None,
    ) -> ArtifactRecord:
        """Stream bytes into a new artifact, never holding more than one buffer in memory.

        Raises:
            PayloadTooLargeError: past `max_bytes`; nothing is stored.
        """
        staged = await stage(chunks, self.blobs.staging_dir, max_bytes=max_bytes)
        now = time.time()
        if expires_at is None and self.default_ttl_s is not None:
            expires_at = now + self.default_ttl_s
        record = ArtifactRecord(
            artifact_id=new_id("art"),
            name=name,
            mime_type=mime_type,
            size=staged.size,
            sha256=staged.sha256,
            owner_run_id=owner_run_id,
            conversation_id=conversation_id,
            created_at=now,
            expires_at=expires_at,
        )
        try:
            while True:
                await self.blobs.commit(staged)
                async with self._db.write() as session:
                    await lock_in_transaction(session, self._db.dialect, BLOB_LOCK, staged.sha256)
                    if await self.blobs.stored_size(staged.sha256) == staged.size:
                        await session.execute(insert(ArtifactRow).values(record.model_dump()))
                        return record
                # Retention deleted these bytes (an expired artifact had them) after `commit` saw them.
        finally:
            await remove_file(staged.path)

    @idempotent
    async def get(self, artifact_id: str) -> ArtifactRecord:
        """The metadata of an artifact that exists and has not expired."""
        async with self._db.read() as session:
            row = (
                await session.execute(select(ArtifactRow).where(ArtifactRow.artifact_id == artifact_id))
            ).scalar_one_or_none()
        if row is None:
            raise NotFoundError(f"Artifact {artifact_id!r} does not exist; check the id.")
        if row.expires_at is not None and row.expires_at <= time.time():
            raise NotFoundError(f"Artifact {artifact_id!r} has expired; upload it again if you need it.")
        return _record(row)

    async def read(self, artifact_id: str, offset: int = 0, length: int | None = None) -> bytes:
        """Bytes [offset, offset + length) of an artifact (to the end when `length` is None)."""
        record = await self.get(artifact_id)
        start, stop = _bounds(record, offset, length)
        if start == 0 and stop == record.size:
            data = b"".join([piece async for piece in self.blobs.read_range(record.sha256, 0, record.size)])
            if await _sha256(data) != record.sha256:
                self._verified.pop(record.sha256, None)
                raise _corrupt(record)
            self._mark_verified(record.sha256)
            return data
        await self._ensure_verified(record)
        return b"".join([piece async for piece in self.blobs.read_range(record.sha256, start, stop - start)])

    async def open_range(
        self, artifact_id: str, offset: int = 0, length: int | None = None
    ) -> tuple[ArtifactRecord, AsyncIterator[bytes]]:
        """The record and a stream of bytes [offset, offset + length), for HTTP downloads.

        Everything that can fail before the first byte (not found, bad range, integrity) raises here,
        so a response status can be chosen before streaming starts. Iterate the stream to its end (or
        close it with `contextlib.aclosing`) so its file or connection is released promptly.
        """
        record = await self.get(artifact_id)
        start, stop = _bounds(record, offset, length)
        await self._ensure_verified(record)
        return record, self.blobs.read_range(record.sha256, start, stop - start)

    async def _ensure_verified(self, record: ArtifactRecord) -> None:
        stored = await self.blobs.stored_size(record.sha256)
        if stored != record.size:
            self._verified.pop(record.sha256, None)
            raise StorageIntegrityError(
                f"Artifact {record.artifact_id!r} is damaged: its blob holds "
                f"{'nothing' if stored is None else f'{stored} bytes'}, expected {record.size}.",
                details={"artifact_id": record.artifact_id, "sha256": record.sha256},
            )
        if record.sha256 in self._verified:
            self._verified.move_to_end(record.sha256)
            return
        digest = hashlib.sha256()
        async for piece in self.blobs.read_range(record.sha256, 0, record.size):
            await _update(digest.update, piece)
        if digest.hexdigest() != record.sha256:
            raise _corrupt(record)
        self._mark_verified(record.sha256)

    def _mark_verified(self, sha256: str) -> None:
        self._verified[sha256] = None
        self._verified.move_to_end(sha256)
        while len(self._verified) > VERIFIED_CACHE_SIZE:
            self._verified.popitem(last=False)


def _bounds(record: ArtifactRecord, offset: int, length: int | None) -> tuple[int, int]:
    if offset < 0 or (length is not None and length < 0):
        raise InvalidArgumentError(f"offset and length must be >= 0; got offset={offset}, length={length}.")
    if offset > record.size:
        raise InvalidArgumentError(
            f"offset {offset} is past the end of artifact {record.artifact_id!r} ({record.size} bytes)."
        )
    stop = record.size if length is None else min(record.size, offset + length)
    return offset, stop


def _corrupt(record: ArtifactRecord) -> StorageIntegrityError:
    return StorageIntegrityError(
        f"Artifact {record.artifact_id!r} is damaged: its bytes do not match SHA-256 {record.sha256}.",
        details={"artifact_id": record.artifact_id, "sha256": record.sha256},
    )


async def _update(update: Callable[[bytes], None], data: bytes) -> None:
    """Feed `data` to a hash's `update`, in a worker thread when it is large (hashlib releases the GIL)."""
    if len(data) >= _HASH_IN_THREAD:
        await anyio.to_thread.run_sync(update, data)
    else:
        update(data)


async def _sha256(data: bytes) -> str:
    digest = hashlib.sha256()
    await _update(digest.update, data)
    return digest.hexdigest()
