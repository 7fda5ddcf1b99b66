"""Persistence: the only package that knows SQL. One store per fact, on SQLite or PostgreSQL.

Owns `Stores` (one attribute per store) and `open_stores`, the one way the host opens them. Does not
own any policy about what is stored (the journal, orchestrator and facts layer decide that).

Every store method opens its own transaction and returns pydantic models, never ORM rows; reads are
O(limit) keyset pages (`Page`). Module map: `engine` (Database, migrations), `tables` (schema),
`events`, `transcript`, `artifacts` + `blobs`, `state`, `storage`, `runs`, `results`, `audit`, `hosts`,
`schedules`, `deliveries`, `approvals`, `recordings`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio

from mcphost.config import ChannelConfig, WebhookConfig
from mcphost.stores import engine
from mcphost.stores._cursor import MAX_RUN_SEQ, CursorCodec, Page
from mcphost.stores.approvals import (
    DEFAULT_APPROVAL_EXPIRY_S,
    ApprovalKind,
    ApprovalRecord,
    ApprovalStatus,
    ApprovalStore,
    Decision,
)
from mcphost.stores.artifacts import ArtifactRecord, ArtifactStore, Fetcher, PendingArtifact
from mcphost.stores.audit import AuditEntry, AuditRecord, AuditStore
from mcphost.stores.blobs import BlobBackend, DatabaseBlobs, DiskBlobs
from mcphost.stores.channels import ChannelActivity, ChannelReply, ChannelStatusStore
from mcphost.stores.conversations import ConversationDeleted, ConversationRecord, ConversationStore
from mcphost.stores.deliveries import (
    DeliveryClaims,
    DeliveryLease,
    DeliveryRecord,
    DeliveryStatus,
    DeliveryStore,
    Outbox,
)
from mcphost.stores.dispatch import DispatchStore
from mcphost.stores.engine import DEFAULT_POOL_SIZE, Database, migrate, sqlite_path, upgrade_database
from mcphost.stores.events import EventKind, EventStore, StoredEvent, event_values
from mcphost.stores.faults import open_failure
from mcphost.stores.health import StorageHealth, StorageProbe
from mcphost.stores.hosts import HostRecord, HostStore
from mcphost.stores.recordings import RecordedCall, RecordedCallEntry, RecordingHeader, RecordingStore
from mcphost.stores.results import ResultStore, StoredResult
from mcphost.stores.runs import GrantRecord, RunStore
from mcphost.stores.runtimes import RuntimeRecord, RuntimeStore
from mcphost.stores.schedules import ScheduleStore, StoredSchedule
from mcphost.stores.secrets import cursor_codec
from mcphost.stores.state import ScopeSnapshot, StateEntry, StateStore
from mcphost.stores.storage import StorageItem, StorageStore, StorageValue
from mcphost.stores.transcript import TranscriptRecord, TranscriptStore
from mcphost.stores.usage import ModelCallStore

BlobBackendName = Literal["disk", "database"]
STALE_STAGING_S = 24 * 3600.0


@dataclass(frozen=True)
class Stores:
    """Every store over one database."""

    db: Database
    cursors: CursorCodec
    """Signs and verifies this installation's cursors (tests mint cursors with it)."""
    events: EventStore
    transcript: TranscriptStore
    artifacts: ArtifactStore
    state: StateStore
    storage: StorageStore
    runs: RunStore
    results: ResultStore
    audit: AuditStore
    hosts: HostStore
    health: StorageProbe
    """Whether `data_dir` and the database are still usable (cached for a second)."""
    schedules: ScheduleStore
    deliveries: DeliveryStore
    approvals: ApprovalStore
    recordings: RecordingStore
    conversations: ConversationStore
    """The conversations list and deleting one with everything it left."""
    runtimes: RuntimeStore
    dispatch: DispatchStore
    """The queue of remote runs (`[agents.runtime]`) and the results their runtimes post."""
    usage: ModelCallStore
    """Host model calls, their budgets and usage totals."""
    channels: ChannelStatusStore
    """What each chat channel last received, and its replies' outbox figures."""


async def _sweep_staging(staging_dir: Path) -> None:
    """Remove uploads a crashed process left half-staged (older than a day, so live ones survive)."""
    folder = anyio.Path(staging_dir)
    if not await folder.exists():
        return
    cutoff = time.time() - STALE_STAGING_S
    async for entry in folder.glob("stage-*.part"):
        if (await entry.stat()).st_mtime < cutoff:
            await entry.unlink(missing_ok=True)


@asynccontextmanager
async def open_stores(
    database_url: str,
    data_dir: Path,
    *,
    blob_backend: BlobBackendName = "disk",
    migrate: bool = True,
    cursor_secret: str | None = None,
    webhooks: Sequence[WebhookConfig] = (),
    channels: Mapping[str, ChannelConfig] | None = None,
    approval_expiry_s: float = DEFAULT_APPROVAL_EXPIRY_S,
    artifact_ttl_s: float | None = None,
    pool_size: int = DEFAULT_POOL_SIZE,
) -> AsyncGenerator[Stores, None]:
    """Open every store over `database_url`, with blobs under `data_dir/blobs` or in the database.

    Creates `data_dir` (and a SQLite file's folder) when missing and, unless `migrate=False`, brings the
    schema to the newest migration first. The engine is disposed on exit. `webhooks` are the outbound
    webhooks whose outbox rows the runs and results stores write with the facts they announce, and
    `channels` the chat channels whose events' runs are answered in place the same way;
    `approval_expiry_s` how long an approval stays pending;
    `artifact_ttl_s` how long a new artifact lives when its creator names no expiry (None: forever);
    `pool_size` how many PostgreSQL connections the process keeps (a fixed pool).

    Raises:
        ConfigError: when the storage cannot be opened, created or written (a missing PostgreSQL database,
            a refused port, a read-only file, `data_dir` under a regular file): one line naming the URL
            (password hidden) and what to do (`faults.open_failure`). The CLI exits 2 on it.
    """
    try:
        await anyio.Path(data_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        failure = open_failure(exc, database_url=database_url, data_dir=data_dir, stage="data_dir")
        if failure is None:
            raise
        raise failure from exc
    path = sqlite_path(database_url)
    db = Database(database_url, pool_size=pool_size)
    try:
        try:
            if path is not None:
                await anyio.Path(path.parent).mkdir(parents=True, exist_ok=True)
            if migrate:
                await engine.migrate(db)
            blobs: BlobBackend = (
                DiskBlobs(data_dir / "blobs")
                if blob_backend == "disk"
                else DatabaseBlobs(db, data_dir / "tmp")
            )
            await _sweep_staging(blobs.staging_dir)
            cursors = await cursor_codec(db, cursor_secret)
        except Exception as exc:
            failure = open_failure(exc, database_url=database_url, data_dir=data_dir, stage="database")
            if failure is None:
                raise
            raise failure from exc
        outbox = Outbox(webhooks, channels or {})
        runs = RunStore(db, cursors, outbox)
        approvals = ApprovalStore(db, cursors, outbox, expiry_s=approval_expiry_s)
        yield Stores(
            db=db,
            cursors=cursors,
            events=EventStore(db, cursors),
            transcript=TranscriptStore(db, cursors),
            artifacts=ArtifactStore(db, blobs, default_ttl_s=artifact_ttl_s),
            state=StateStore(db, cursors),
            storage=StorageStore(db, cursors),
            runs=runs,
            results=ResultStore(db, outbox, approvals),
            audit=AuditStore(db),
            hosts=HostStore(db, runs),
            health=StorageProbe(db, data_dir),
            schedules=ScheduleStore(db),
            deliveries=DeliveryStore(db, cursors),
            approvals=approvals,
            recordings=RecordingStore(db),
            conversations=ConversationStore(db, cursors, blobs),
            runtimes=RuntimeStore(db),
            dispatch=DispatchStore(db),
            usage=ModelCallStore(db),
            channels=ChannelStatusStore(db),
        )
    finally:
        with anyio.CancelScope(shield=True):
            await db.dispose()


__all__ = [
    "DEFAULT_APPROVAL_EXPIRY_S",
    "MAX_RUN_SEQ",
    "ApprovalKind",
    "ApprovalRecord",
    "ApprovalStatus",
    "ApprovalStore",
    "ArtifactRecord",
    "ArtifactStore",
    "AuditEntry",
    "AuditRecord",
    "AuditStore",
    "BlobBackend",
    "BlobBackendName",
    "ChannelActivity",
    "ChannelReply",
    "ChannelStatusStore",
    "ConversationDeleted",
    "ConversationRecord",
    "ConversationStore",
    "CursorCodec",
    "Database",
    "DatabaseBlobs",
    "Decision",
    "DeliveryClaims",
    "DeliveryLease",
    "DeliveryRecord",
    "DeliveryStatus",
    "DeliveryStore",
    "DiskBlobs",
    "DispatchStore",
    "EventKind",
    "EventStore",
    "Fetcher",
    "GrantRecord",
    "HostRecord",
    "HostStore",
    "ModelCallStore",
    "Page",
    "PendingArtifact",
    "RecordedCall",
    "RecordedCallEntry",
    "RecordingHeader",
    "RecordingStore",
    "ResultStore",
    "RunStore",
    "RuntimeRecord",
    "RuntimeStore",
    "ScheduleStore",
    "ScopeSnapshot",
    "StateEntry",
    "StateStore",
    "StorageHealth",
    "StorageItem",
    "StorageProbe",
    "StorageStore",
    "StorageValue",
    "StoredEvent",
    "StoredResult",
    "StoredSchedule",
    "Stores",
    "TranscriptRecord",
    "TranscriptStore",
    "event_values",
    "migrate",
    "open_stores",
    "upgrade_database",
]
