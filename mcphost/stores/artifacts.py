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
- A lazy artifact (`put_lazy`, a chat channel's inbound file) has an id but no `artifacts` row until
  its first read: its `artifact_sources` row holds the platform's locator, the declared size and the
  bound. `describe` answers for it without fetching; `get` (and so every read) fetches it once through
  the fetcher registered for its origin (`fetchers`), streaming into a blob cut at the bound, then
  inserts the `artifacts` row and deletes the source row in one transaction (a second fetcher racing
  it finds the row gone and keeps the first one's). A fetch that failed records its error and the next
  read tries again; a file over the bound (declared, or found while streaming) is refused at once on
  every later read and never fetched again. Fetches of one artifact in one process are serialized.
- A row is inserted only while its blob is there: the insert checks the blob under the per-hash lock
  retention takes to delete an unreferenced blob (`BLOB_LOCK`), and stores the bytes again when
  retention removed them in between, so a new artifact sharing an expiring one's bytes keeps them.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Literal

import anyio
from pydantic import BaseModel, ConfigDict
from sqlalchemy import delete, insert, select, update

from mcphost.errors import (
    ArtifactFetchError,
    InvalidArgumentError,
    NotFoundError,
    PayloadTooLargeError,
    StorageIntegrityError,
)
from mcphost.models import new_id
from mcphost.protocol import ArtifactRef, JSONObject
from mcphost.stores._retry import idempotent
from mcphost.stores._sql import lock_in_transaction
from mcphost.stores.blobs import BlobBackend, StagedBlob, remove_file, stage
from mcphost.stores.engine import Database
from mcphost.stores.tables import ArtifactRow, ArtifactSourceRow

BLOB_LOCK = "blob"
"""The `lock_in_transaction` namespace of a blob's hash: held while a row starts referencing the blob
and while retention deletes it."""
VERIFIED_CACHE_SIZE = 4096
_HASH_IN_THREAD = 64 * 1024

Fetcher = Callable[[JSONObject], AsyncIterator[bytes]]
"""A lazy artifact's origin: its locator in, its bytes out as they arrive; raises `ArtifactFetchError`
when the platform does not give them."""


class ArtifactRecord(BaseModel):
    """Artifact metadata as stored."""

    model_config = ConfigDict(frozen=True, defer_build=True)

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


class PendingArtifact(BaseModel):
    """A lazy artifact not fetched yet (`artifact_sources`): what its platform declared, and the last
    fetch's failure."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    artifact_id: str
    origin: str
    """Whose fetcher gets the bytes: the channel id."""
    locator: JSONObject
    name: str | None
    mime_type: str
    declared_size: int | None
    max_bytes: int
    conversation_id: str | None
    created_at: float
    expires_at: float | None
    error_code: Literal["too_large", "fetch_failed"] | None = None
    error: str | None = None
    attempts: int = 0
    owner_run_id: None = None
    """No run owns an inbound file; its conversation does (the same read rule as `ArtifactRecord`)."""

    def to_ref(self) -> ArtifactRef:
        """The protocol handle: the declared size, no hash yet."""
        return ArtifactRef(
            artifact_id=self.artifact_id, name=self.name, mime_type=self.mime_type, size=self.declared_size
        )


def _pending(row: ArtifactSourceRow) -> PendingArtifact:
    return PendingArtifact.model_validate(
        {column: getattr(row, column) for column in PendingArtifact.model_fields if column != "owner_run_id"}
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
        self.fetchers: dict[str, Fetcher] = {}
        """Lazy artifacts' origins (channel id → its fetcher), registered by whoever serves them."""
        self._fetching: dict[str, anyio.Lock] = {}

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
        await self._insert(staged, record)
        return record

    async def _insert(self, staged: StagedBlob, record: ArtifactRecord, *, source: str | None = None) -> bool:
        """Commit `staged` and insert `record` (deleting lazy artifact `source`'s row in the same
        transaction); False when `source` was gone (another fetch inserted it first). Removes the
        staging file either way."""
        try:
            while True:
                await self.blobs.commit(staged)
                async with self._db.write() as session:
                    await lock_in_transaction(session, self._db.dialect, BLOB_LOCK, staged.sha256)
                    if await self.blobs.stored_size(staged.sha256) == staged.size:
                        if source is not None:
                            gone = await session.execute(
                                delete(ArtifactSourceRow).where(ArtifactSourceRow.artifact_id == source)
                            )
                            if not gone.rowcount:  # pyright: ignore[reportAttributeAccessIssue,reportUnknownMemberType]  # a DML result
                                return False
                        await session.execute(insert(ArtifactRow).values(record.model_dump()))
                        return True
                # Retention deleted these bytes (an expired artifact had them) after `commit` saw them.
        finally:
            await remove_file(staged.path)

    @idempotent
    async def _lookup(self, artifact_id: str) -> ArtifactRecord | PendingArtifact | None:
        stored = select(ArtifactRow).where(ArtifactRow.artifact_id == artifact_id)
        async with self._db.read() as session:
            row = (await session.execute(stored)).scalar_one_or_none()
            if row is not None:
                return _record(row)
            source = (
                await session.execute(
                    select(ArtifactSourceRow).where(ArtifactSourceRow.artifact_id == artifact_id)
                )
            ).scalar_one_or_none()
            if source is None:
                # PostgreSQL reads each statement at a snapshot of its own (read committed): a first
                # read's fetch that committed between the two moved the artifact from its source row to
                # a stored one (never back), so it is looked for there once more.
                row = (await session.execute(stored)).scalar_one_or_none()
                return None if row is None else _record(row)
        return _pending(source)

    async def describe(self, artifact_id: str) -> ArtifactRecord | PendingArtifact:
        """An artifact that exists and has not expired, stored or still lazy; fetches nothing."""
        found = await self._lookup(artifact_id)
        if found is None:
            raise NotFoundError(f"Artifact {artifact_id!r} does not exist; check the id.")
        if found.expires_at is not None and found.expires_at <= time.time():
            raise NotFoundError(f"Artifact {artifact_id!r} has expired; upload it again if you need it.")
        return found

    async def get(self, artifact_id: str) -> ArtifactRecord:
        """The metadata of an artifact that exists and has not expired; a lazy one is fetched first.

        Raises:
            NotFoundError: no such artifact, or it expired.
            PayloadTooLargeError: a lazy artifact larger than its bound.
            ArtifactFetchError: a lazy artifact its platform did not give (the next call tries again).
        """
        found = await self.describe(artifact_id)
        return found if isinstance(found, ArtifactRecord) else await self._fetch(found)

    async def put_lazy(
        self,
        *,
        origin: str,
        locator: JSONObject,
        name: str | None,
        mime_type: str,
        declared_size: int | None,
        max_bytes: int,
        conversation_id: str | None = None,
        expires_at: float | None = None,
    ) -> PendingArtifact:
        """A new lazy artifact: an id now, its bytes fetched from `locator` by `origin`'s fetcher on first
        read. One declared larger than `max_bytes` is recorded as `too_large` and never fetched."""
        now = time.time()
        if expires_at is None and self.default_ttl_s is not None:
            expires_at = now + self.default_ttl_s
        too_large = declared_size is not None and declared_size > max_bytes
        pending = PendingArtifact(
            artifact_id=new_id("art"), origin=origin, locator=locator, name=name, mime_type=mime_type,
            declared_size=declared_size, max_bytes=max_bytes, conversation_id=conversation_id,
            created_at=now, expires_at=expires_at, error_code="too_large" if too_large else None,
            error=f"the platform declared {declared_size} bytes; this channel's max_attachment_bytes is "
            f"{max_bytes}" if too_large else None,
        )  # fmt: skip
        async with self._db.write() as session:
            await session.execute(
                insert(ArtifactSourceRow).values(pending.model_dump(exclude={"owner_run_id"}))
            )
        return pending

    async def _fetch(self, pending: PendingArtifact) -> ArtifactRecord:
        artifact_id = pending.artifact_id
        if pending.error_code == "too_large":
            raise _too_large(pending, pending.error or "")
        fetcher = self.fetchers.get(pending.origin)
        if fetcher is None:
            raise ArtifactFetchError(
                f"Artifact {artifact_id!r} is a file of channel {pending.origin!r}, which this host does not "
                f"serve; configure [channels.{pending.origin}] to fetch it.",
                details={"artifact_id": artifact_id, "origin": pending.origin},
            )
        lock = self._fetching.setdefault(artifact_id, anyio.Lock())
        try:
            async with lock:
                found = await self._lookup(artifact_id)
                if not isinstance(found, PendingArtifact):  # fetched (or deleted) while this one waited
                    return await self.get(artifact_id)
                try:
                    staged = await stage(
                        fetcher(pending.locator), self.blobs.staging_dir, max_bytes=pending.max_bytes
                    )
                except PayloadTooLargeError:
                    why = f"its bytes ran past this channel's max_attachment_bytes ({pending.max_bytes})"
                    await self._failed(artifact_id, "too_large", why)
                    raise _too_large(pending, why) from None
                except ArtifactFetchError as exc:
                    await self._failed(artifact_id, "fetch_failed", exc.message)
                    raise
                record = ArtifactRecord(
                    artifact_id=artifact_id, name=pending.name, mime_type=pending.mime_type, size=staged.size,
                    sha256=staged.sha256, owner_run_id=None, conversation_id=pending.conversation_id,
                    created_at=pending.created_at, expires_at=pending.expires_at,
                )  # fmt: skip
                if not await self._insert(staged, record, source=artifact_id):
                    return await self.get(artifact_id)  # another host fetched it first
                return record
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._fetching.pop(artifact_id, None)

    async def _failed(self, artifact_id: str, code: str, error: str) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            async with self._db.write() as session:
                await session.execute(
                    update(ArtifactSourceRow)
                    .where(ArtifactSourceRow.artifact_id == artifact_id)
                    .values(error_code=code, error=error[:1000], attempts=ArtifactSourceRow.attempts + 1)
                )

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


def _too_large(pending: PendingArtifact, why: str) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"Artifact {pending.artifact_id!r} ({pending.name or 'an attached file'}) is not fetched: {why}. "
        "Ask the sender for a smaller file, or raise max_attachment_bytes in the channel's configuration.",
        details={"artifact_id": pending.artifact_id, "max_bytes": pending.max_bytes, "reason": "too_large"},
    )


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
