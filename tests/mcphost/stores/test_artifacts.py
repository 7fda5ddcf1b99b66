"""Artifacts on both blob backends: streaming uploads with limits, range reads, verified reads."""

from __future__ import annotations

import errno
import hashlib
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from pathlib import Path
from typing import BinaryIO

import pytest
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.util import await_only

from mcphost.errors import (
    InvalidArgumentError,
    NotFoundError,
    PayloadTooLargeError,
    StorageFullError,
    StorageIntegrityError,
)
from mcphost.stores import ArtifactStore, DatabaseBlobs, DiskBlobs, Stores, open_stores
from mcphost.stores import blobs as blobs_module
from mcphost.stores.artifacts import ArtifactRecord
from mcphost.stores.blobs import CHUNK_SIZE
from mcphost.stores.health import DATA_DIR_MARKER
from mcphost.stores.tables import ArtifactRow, ArtifactSourceRow, BlobChunkRow

DATA = os.urandom(2 * CHUNK_SIZE + 12345)  # three database chunks, the last one partial


@pytest.fixture(params=["disk", "database"])
async def stores(
    database_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncGenerator[Stores, None]:
    """Every store, with artifact blobs on disk or in the database (this module's override)."""
    async with open_stores(database_url, tmp_path / "data", blob_backend=request.param) as opened:
        yield opened


async def _chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def _put(stores: Stores, data: bytes = DATA) -> str:
    record = await stores.artifacts.put_bytes(
        data, name="data.bin", mime_type="application/octet-stream", max_bytes=len(data)
    )
    return record.artifact_id


def _files(root: Path) -> list[Path]:
    """Files under `root` but the empty marker every data_dir holds (`stores/health.py`)."""
    found: Iterable[Path] = root.rglob("*") if root.exists() else []
    return sorted(p for p in found if p.is_file() and p.name != DATA_DIR_MARKER)


async def _count(stores: Stores, table: type[ArtifactRow] | type[BlobChunkRow]) -> int:
    async with stores.db.read() as session:
        return (await session.execute(select(func.count()).select_from(table))).scalar_one()


async def test_an_artifact_reads_back_whole_and_its_ref_matches(stores: Stores) -> None:
    record = await stores.artifacts.put_bytes(
        DATA,
        name="d.bin",
        mime_type="application/x-test",
        max_bytes=10**7,
        owner_run_id="run-1",
        conversation_id="c1",
    )
    assert record.artifact_id.startswith("art_")
    assert record.size == len(DATA)
    assert record.sha256 == hashlib.sha256(DATA).hexdigest()
    assert await stores.artifacts.get(record.artifact_id) == record
    assert await stores.artifacts.read(record.artifact_id) == DATA
    ref = record.to_ref()
    assert (ref.artifact_id, ref.size, ref.sha256, ref.mime_type, ref.name) == (
        record.artifact_id,
        len(DATA),
        record.sha256,
        "application/x-test",
        "d.bin",
    )


@pytest.mark.parametrize(
    ("offset", "length"),
    [
        (0, 1),
        (1, 10),
        (CHUNK_SIZE - 5, 10),  # crosses the first chunk boundary
        (CHUNK_SIZE, CHUNK_SIZE),  # exactly the second chunk
        (CHUNK_SIZE - 1, CHUNK_SIZE + 2),  # touches all three chunks
        (len(DATA) - 3, 100),  # runs past the end: clipped
        (len(DATA), 10),  # at the end: empty
    ],
)
async def test_range_reads_return_exactly_the_requested_bytes(
    stores: Stores, offset: int, length: int
) -> None:
    artifact_id = await _put(stores)
    assert await stores.artifacts.read(artifact_id, offset, length) == DATA[offset : offset + length]
    _, stream = await stores.artifacts.open_range(artifact_id, offset, length)
    assert b"".join([piece async for piece in stream]) == DATA[offset : offset + length]


async def test_a_range_to_the_end_and_a_bad_range(stores: Stores) -> None:
    artifact_id = await _put(stores)
    assert await stores.artifacts.read(artifact_id, 100) == DATA[100:]
    with pytest.raises(InvalidArgumentError, match="past the end"):
        await stores.artifacts.read(artifact_id, len(DATA) + 1, 1)
    with pytest.raises(InvalidArgumentError, match=">= 0"):
        await stores.artifacts.read(artifact_id, -1, 1)


async def test_an_empty_artifact_works(stores: Stores) -> None:
    artifact_id = await _put(stores, b"")
    assert await stores.artifacts.read(artifact_id) == b""
    assert await stores.artifacts.read(artifact_id, 0, 10) == b""


async def test_a_streamed_upload_in_odd_pieces_equals_the_bytes(stores: Stores) -> None:
    record = await stores.artifacts.put_stream(
        _chunks(DATA, 7777), name=None, mime_type="application/octet-stream", max_bytes=len(DATA)
    )
    assert record.sha256 == hashlib.sha256(DATA).hexdigest()
    assert record.size == len(DATA)
    assert await stores.artifacts.read(record.artifact_id) == DATA


async def test_duplicates_share_one_blob(stores: Stores, tmp_path: Path) -> None:
    first, second = await _put(stores), await _put(stores)
    assert first != second
    assert await stores.artifacts.read(second) == DATA
    if isinstance(stores.artifacts.blobs, DiskBlobs):
        assert len(_files(tmp_path / "data" / "blobs")) == 1
    else:
        assert await _count(stores, BlobChunkRow) == 3


async def test_an_upload_past_the_cap_leaves_no_file_and_no_row(stores: Stores, tmp_path: Path) -> None:
    with pytest.raises(PayloadTooLargeError, match="limit of 100000 bytes"):
        await stores.artifacts.put_stream(_chunks(DATA, 4096), name="x", mime_type="a/b", max_bytes=100_000)
    with pytest.raises(PayloadTooLargeError):
        await stores.artifacts.put_bytes(DATA, name="x", mime_type="a/b", max_bytes=100)
    assert _files(tmp_path / "data") == []
    assert await _count(stores, ArtifactRow) == 0
    assert await _count(stores, BlobChunkRow) == 0


async def test_a_failing_source_leaves_nothing_behind(stores: Stores, tmp_path: Path) -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"x" * (CHUNK_SIZE + 1)
        raise OSError("client went away")

    with pytest.raises(OSError, match="client went away"):
        await stores.artifacts.put_stream(broken(), name="x", mime_type="a/b", max_bytes=10**7)
    assert _files(tmp_path / "data") == []
    assert await _count(stores, ArtifactRow) == 0


async def test_a_full_disk_is_storage_full_and_leaves_nothing_behind(
    stores: Stores, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real fault (a full tmpfs under the HTTP API) is in tests/mcphost/test_storage_faults.py; this
    # injected one runs where mounting is not permitted, and covers both blob backends' staging.
    real_write = blobs_module._write_all  # pyright: ignore[reportPrivateUsage] -- the write the fault wraps
    written = 0

    def write_until_full(f: BinaryIO, data: bytes) -> None:
        nonlocal written
        if written + len(data) > CHUNK_SIZE:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written += len(data)
        real_write(f, data)

    monkeypatch.setattr(blobs_module, "_write_all", write_until_full)
    with pytest.raises(StorageFullError, match="is full, so nothing was stored") as caught:
        await stores.artifacts.put_stream(_chunks(DATA, 4096), name="x", mime_type="a/b", max_bytes=10**7)
    assert caught.value.status == 507
    assert caught.value.code == "storage_full"
    assert _files(tmp_path / "data") == []
    assert await _count(stores, ArtifactRow) == 0
    assert await _count(stores, BlobChunkRow) == 0


async def test_unknown_and_expired_artifacts_are_not_found(stores: Stores) -> None:
    with pytest.raises(NotFoundError, match="'art_nope' does not exist"):
        await stores.artifacts.get("art_nope")
    record = await stores.artifacts.put_bytes(
        b"x", name="x", mime_type="a/b", max_bytes=1, expires_at=time.time() - 1
    )
    with pytest.raises(NotFoundError, match="expired"):
        await stores.artifacts.read(record.artifact_id)


async def _corrupt(stores: Stores, sha256: str, *, keep_size: bool) -> None:
    blobs = stores.artifacts.blobs
    if isinstance(blobs, DiskBlobs):
        path = blobs.path_of(sha256)
        data = bytearray(path.read_bytes())
        if keep_size:
            data[CHUNK_SIZE + 1] ^= 0xFF
        else:
            del data[-1]
        path.write_bytes(bytes(data))
        return
    assert isinstance(blobs, DatabaseBlobs)
    async with stores.db.write() as session:
        chunk = (
            await session.execute(
                select(BlobChunkRow.data).where(BlobChunkRow.sha256 == sha256, BlobChunkRow.idx == 2)
            )
        ).scalar_one()
        changed = bytes([chunk[0] ^ 0xFF]) + chunk[1:] if keep_size else chunk[:-1]
        await session.execute(
            update(BlobChunkRow)
            .where(BlobChunkRow.sha256 == sha256, BlobChunkRow.idx == 2)
            .values(data=changed)
        )


async def test_a_corrupted_blob_fails_full_reads_and_first_range_reads(stores: Stores) -> None:
    artifact_id = await _put(stores)
    record = await stores.artifacts.get(artifact_id)
    await _corrupt(stores, record.sha256, keep_size=True)
    with pytest.raises(StorageIntegrityError, match="do not match SHA-256"):
        await stores.artifacts.read(artifact_id)
    # A store that has not verified this blob yet (a fresh process) hashes it once on a range read.
    fresh = ArtifactStore(stores.db, stores.artifacts.blobs)
    with pytest.raises(StorageIntegrityError, match="do not match SHA-256"):
        await fresh.read(artifact_id, 0, 10)
    with pytest.raises(StorageIntegrityError):
        await fresh.open_range(artifact_id)


async def test_range_reads_hash_a_blob_once_but_check_its_size_every_time(stores: Stores) -> None:
    artifact_id = await _put(stores)
    assert await stores.artifacts.read(artifact_id, 5, 5) == DATA[5:10]  # verified and cached
    record = await stores.artifacts.get(artifact_id)
    await _corrupt(stores, record.sha256, keep_size=True)
    assert await stores.artifacts.read(artifact_id, 0, 10) == DATA[:10]  # untouched chunk, cached hash
    await _corrupt(stores, record.sha256, keep_size=False)
    with pytest.raises(StorageIntegrityError, match="expected"):
        await stores.artifacts.read(artifact_id, 0, 10)


async def test_a_missing_blob_is_an_integrity_error(stores: Stores) -> None:
    artifact_id = await _put(stores, b"hello")
    record = await stores.artifacts.get(artifact_id)
    blobs = stores.artifacts.blobs
    if isinstance(blobs, DiskBlobs):
        blobs.path_of(record.sha256).unlink()
    else:
        async with stores.db.write() as session:
            await session.execute(delete(BlobChunkRow))
    with pytest.raises(StorageIntegrityError):
        await stores.artifacts.read(artifact_id)
    with pytest.raises(StorageIntegrityError, match="holds nothing"):
        await stores.artifacts.read(artifact_id, 0, 1)


async def test_a_lazy_artifact_fetched_between_the_lookups_two_reads_is_found_stored(stores: Stores) -> None:
    """A lookup reads the stored artifacts, then the lazy ones. On PostgreSQL each statement reads its own
    snapshot: a fetch committing between the two (the lazy row deleted, the stored one inserted) once
    made the artifact vanish for that reader ("does not exist") while five readers raced its first read."""
    pending = await stores.artifacts.put_lazy(
        origin="chan", locator={"url": "x"}, name="f", mime_type="text/plain", declared_size=1, max_bytes=10
    )
    record = ArtifactRecord(
        artifact_id=pending.artifact_id, name="f", mime_type="text/plain", size=1, sha256="0" * 64,
        owner_run_id=None, conversation_id=None, created_at=pending.created_at, expires_at=pending.expires_at,
    )  # fmt: skip
    moved: list[str] = []

    async def fetch_commits() -> None:
        async with stores.db.write() as session:
            await session.execute(
                delete(ArtifactSourceRow).where(ArtifactSourceRow.artifact_id == record.artifact_id)
            )
            await session.execute(insert(ArtifactRow).values(record.model_dump()))

    def between(_conn: object, _cursor: object, sql: str, *_: object) -> None:
        if "FROM artifact_sources" in sql and not moved:
            moved.append(sql)
            await_only(fetch_commits())  # the read's greenlet: as if another task committed right now

    with stores.db.hooks.added("before_cursor_execute", between):
        found = await stores.artifacts.describe(record.artifact_id)
    assert moved
    if stores.db.dialect == "postgresql":
        assert found == record
    else:  # one snapshot for the whole read transaction: still lazy as it began
        assert found.artifact_id == record.artifact_id
    assert await stores.artifacts.describe(record.artifact_id) == record
