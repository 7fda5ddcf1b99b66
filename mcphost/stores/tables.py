"""The schema: every table as a typed declarative class, and nothing else.

Owns table, column, index and constraint definitions. Does not own queries (the stores do) or schema
changes (`migrations/`: every change here needs a migration; a test compares the two on both dialects).

Conventions:
- Timestamps are epoch seconds (`Double`), the unit `Run` and the protocol use.
- "No conversation" / "no thread" is stored as "" rather than NULL, so the composite indexes
  (conversation_id, thread_id, seq) serve every paging query with plain equality.
- Append-only logs (`events`, `transcript`) and `runs` have an autoincrement integer key (`seq`,
  `created_seq`), `AUTOINCREMENT` on SQLite so it never reuses a value: cursors and FIFO order rely on
  it only ever growing.
- State and storage keys use the "C" collation on PostgreSQL, so key order, keyset paging and prefix
  ranges are byte order on both dialects (SQLite's default BINARY).
- Constraint and index names come from one naming convention, so migrations name them the same way.
- Full-text search objects are the one part of the schema these classes cannot describe, because they
  differ per dialect: SQLite FTS5 virtual tables (with their shadow tables and the triggers that keep
  them in step) and PostgreSQL generated `tsvector` columns with GIN indexes that lead with the scope's
  columns (btree_gin: (kb_id, search_vector), (conversation_id, search_vector): migrations 0004, 0020). Migrations
  create them; `described_by_metadata` tells autogenerate (and the migration test) to leave them out of
  the comparison. Their names are listed here so both places agree.
- `table_of` gives a class's Core `Table`, for the statements the hot path builds once (`engine.core`).
- No `from __future__ import annotations` here, unlike elsewhere: the `Mapped[...]` annotations are real
  types, so mapping the classes at import does not evaluate each as a string (about a tenth of importing
  the stores). A forward reference must be quoted by hand.
- PostgreSQL's column variants use the generic types (`VARCHAR(…, collation="C")`), so the schema does
  not import SQLAlchemy's PostgreSQL dialect on a SQLite host.

Size: past 600 lines because the schema is read in one place: every table of the host (runs and their
facts, deliveries, schedules, approvals, runtimes and their queue, model calls) with its indexes, which
the migration test compares with `migrations/` as a whole.
"""

from collections.abc import Mapping
from typing import Any, cast

from sqlalchemy import (
    JSON,
    VARCHAR,
    BigInteger,
    Boolean,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

SeqType = BigInteger().with_variant(Integer(), "sqlite")
"""Autoincrement keys: BIGSERIAL on PostgreSQL; INTEGER (the rowid alias) on SQLite."""

KeyType = String(200).with_variant(VARCHAR(200, collation="C"), "postgresql")
"""State and storage keys: byte order on both dialects."""

Id = String(200)
"""Ids from outside (events, conversations, actors) match models.ID_PATTERN: at most 200 chars."""

PathType = String(1024).with_variant(VARCHAR(1024, collation="C"), "postgresql")
"""Knowledge document paths: byte order on both dialects, so a path prefix is an index range."""

FULLTEXT_TABLES: tuple[str, ...] = ("kb_chunks_fts", "transcript_fts")
"""SQLite FTS5 virtual tables; FTS5 adds shadow tables named `<table>_<suffix>` next to each."""
FULLTEXT_COLUMNS: frozenset[tuple[str, str]] = frozenset(
    {("kb_chunks", "search_vector"), ("transcript", "search_vector")}
)
"""PostgreSQL generated tsvector columns."""
FULLTEXT_INDEXES: frozenset[str] = frozenset({"ix_kb_chunks_search_vector", "ix_transcript_search_vector"})
"""PostgreSQL GIN indexes on those columns (with the scope's columns in front, migration 0004)."""


def described_by_metadata(name: str | None, type_: str, parent_names: Mapping[str, str | None]) -> bool:
    """Alembic `include_name` hook: False for the dialect-specific full-text objects listed above."""
    if name is None:
        return True
    if type_ == "table":
        return not any(name == t or name.startswith(f"{t}_") for t in FULLTEXT_TABLES)
    if type_ == "column":
        return (str(parent_names.get("table_name")), name) not in FULLTEXT_COLUMNS
    if type_ == "index":
        return name not in FULLTEXT_INDEXES
    return True


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON, Any: JSON}


metadata = Base.metadata


class EventRow(Base):
    """The append-only event log."""

    __tablename__ = "events"
    __table_args__ = (
        Index(None, "conversation_id", "thread_id", "seq"),
        Index(None, "conversation_id", "thread_id", "event_type", "seq"),
        Index(None, "run_id", "seq"),
        Index(None, "created_at"),
        {"sqlite_autoincrement": True},
    )

    seq: Mapped[int] = mapped_column(SeqType, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(Id, unique=True)
    event_type: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(16))
    conversation_id: Mapped[str] = mapped_column(Id)
    thread_id: Mapped[str] = mapped_column(Id)
    run_id: Mapped[str | None] = mapped_column(String(100))
    actor_id: Mapped[str | None] = mapped_column(Id)
    source: Mapped[str] = mapped_column(String(50))
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[float] = mapped_column(Double)


class TranscriptRow(Base):
    """The conversation view projected from events."""

    __tablename__ = "transcript"
    __table_args__ = (
        Index(None, "conversation_id", "thread_id", "seq"),
        Index(None, "run_id", "seq"),
        Index(None, "created_at"),
        {"sqlite_autoincrement": True},
    )

    seq: Mapped[int] = mapped_column(SeqType, primary_key=True, autoincrement=True)
    item_id: Mapped[str] = mapped_column(Id, unique=True)
    conversation_id: Mapped[str] = mapped_column(Id)
    thread_id: Mapped[str] = mapped_column(Id)
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str] = mapped_column(Text)
    contents: Mapped[list[Any]]
    artifacts: Mapped[list[Any]]
    event_id: Mapped[str | None] = mapped_column(Id)
    run_id: Mapped[str | None] = mapped_column(String(100))
    actor_id: Mapped[str | None] = mapped_column(Id)
    created_at: Mapped[float] = mapped_column(Double)


class ConversationRow(Base):
    """One row per conversation that has had a run: its newest activity, for listing conversations
    newest first (migration 0021). Written by run admission, in the admission's transaction."""

    __tablename__ = "conversations"
    __table_args__ = (
        Index(None, "last_run_seq"),
        Index(None, "agent_id", "last_run_seq"),
        Index(None, "actor_id", "last_run_seq"),
    )

    conversation_id: Mapped[str] = mapped_column(Id, primary_key=True)
    created_at: Mapped[float] = mapped_column(Double)
    """When its first run was admitted."""
    last_activity_at: Mapped[float] = mapped_column(Double)
    """When its newest run was admitted."""
    last_run_seq: Mapped[int] = mapped_column(BigInteger)
    """The `created_seq` of its newest run: the listing's order and cursor (it only grows)."""
    last_run_id: Mapped[str] = mapped_column(String(100))
    agent_id: Mapped[str | None] = mapped_column(String(100))
    """The agent of its newest run."""
    actor_id: Mapped[str | None] = mapped_column(Id)
    """The actor of the newest event that named one."""
    runs: Mapped[int] = mapped_column(Integer)
    """How many runs it has had (attempts included)."""


class ArtifactRow(Base):
    """Artifact metadata. The bytes live in a blob backend, addressed by `sha256`."""

    __tablename__ = "artifacts"

    artifact_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(1000))
    mime_type: Mapped[str] = mapped_column(String(200))
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    owner_run_id: Mapped[str | None] = mapped_column(String(100))
    conversation_id: Mapped[str | None] = mapped_column(Id)
    created_at: Mapped[float] = mapped_column(Double)
    expires_at: Mapped[float | None] = mapped_column(Double)


class ArtifactSourceRow(Base):
    """A lazy artifact: the id is handed out before its bytes exist; they are fetched from `locator` by
    `origin`'s fetcher on first read, then the `artifacts` row is inserted and this one deleted."""

    __tablename__ = "artifact_sources"

    artifact_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    origin: Mapped[str] = mapped_column(String(200))
    locator: Mapped[dict[str, Any]] = mapped_column(JSON)
    name: Mapped[str | None] = mapped_column(String(1000))
    mime_type: Mapped[str] = mapped_column(String(200))
    declared_size: Mapped[int | None] = mapped_column(BigInteger)
    max_bytes: Mapped[int] = mapped_column(BigInteger)
    conversation_id: Mapped[str | None] = mapped_column(Id)
    created_at: Mapped[float] = mapped_column(Double, index=True)
    expires_at: Mapped[float | None] = mapped_column(Double)
    error_code: Mapped[str | None] = mapped_column(String(32))
    error: Mapped[str | None] = mapped_column(String(1000))
    attempts: Mapped[int] = mapped_column(Integer, default=0)


class BlobChunkRow(Base):
    """Blob bytes for the database backend: fixed-size chunks of one content-addressed blob."""

    __tablename__ = "blob_chunks"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class StateRow(Base):
    """Small JSON values by (scope, owner, key); `size` is the serialized value's length in bytes."""

    __tablename__ = "state"

    scope: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner: Mapped[str] = mapped_column(String(1000), primary_key=True)
    key: Mapped[str] = mapped_column(KeyType, primary_key=True)
    value: Mapped[Any]
    size: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[float] = mapped_column(Double)


class StorageRow(Base):
    """Larger byte values by (area, owner, key)."""

    __tablename__ = "storage"

    area: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner: Mapped[str] = mapped_column(String(1000), primary_key=True)
    key: Mapped[str] = mapped_column(KeyType, primary_key=True)
    value: Mapped[bytes] = mapped_column(LargeBinary)
    size: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[float] = mapped_column(Double)


class RunRow(Base):
    """One row per run. `run_id` is the natural key every lookup uses; `created_seq` is the integer
    primary key because SQLite can only autoincrement its rowid, and FIFO order needs a counter."""

    __tablename__ = "runs"
    __table_args__ = (
        Index(None, "status", "created_seq"),
        Index(None, "conversation_id", "status", "created_seq"),
        Index(None, "conversation_id", "created_seq"),
        Index(None, "agent_id", "created_seq"),
        Index(None, "agent_id", "status", "created_seq"),
        Index(None, "created_at", "created_seq"),
        Index(None, "warm_session_id", "created_seq"),
        Index(None, "created_by", "created_seq"),
        Index(None, "ended_at"),
        UniqueConstraint("event_id", "attempt"),
        {"sqlite_autoincrement": True},
    )

    created_seq: Mapped[int] = mapped_column(SeqType, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(100), unique=True)
    event_id: Mapped[str] = mapped_column(Id)
    attempt: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    """Runs of one event are numbered 1, 2, …; (event_id, attempt) is unique, so two admissions racing
    to create the same next attempt cannot both win."""
    previous_run_id: Mapped[str | None] = mapped_column(String(100))
    event_type: Mapped[str] = mapped_column(String(100))
    agent_id: Mapped[str | None] = mapped_column(String(100))
    runner_id: Mapped[str | None] = mapped_column(String(200))
    conversation_id: Mapped[str] = mapped_column(Id)
    thread_id: Mapped[str] = mapped_column(Id)
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Double)
    started_at: Mapped[float | None] = mapped_column(Double)
    ended_at: Mapped[float | None] = mapped_column(Double)
    deadline_at: Mapped[float] = mapped_column(Double)
    error: Mapped[dict[str, Any] | None]
    usage: Mapped[dict[str, Any]]
    host_id: Mapped[str | None] = mapped_column(String(100))
    grant: Mapped[dict[str, Any]]
    token_hash: Mapped[str] = mapped_column(String(128))
    revoked_at: Mapped[float | None] = mapped_column(Double)
    cancel_requested_at: Mapped[float | None] = mapped_column(Double)
    cancel_reason: Mapped[str | None] = mapped_column(String(1000))
    """Why the run was asked to cancel (the first reason given; migration 0016), so the process that
    executes it ends it with that reason; NULL without one."""
    context: Mapped[dict[str, Any] | None]
    """The run's `AgentRunContext` without its token, written as the run starts (`try_start`); NULL
    while queued, and for runs started before migration 0007."""
    warm_session_id: Mapped[str | None] = mapped_column(String(40))
    """The warm session whose endpoint this run serves (`ses_…`, written with `context` as the run
    starts); NULL without one. The session's current run is its running run (`stores/warm.py`)."""
    created_by: Mapped[str | None] = mapped_column(String(100))
    """The name of the API key whose event created the run (migration 0014); NULL without one. A
    `sender` key lists its runs through `(created_by, created_seq)`."""


class RunResultRow(Base):
    """Every accepted result of a run, by host sequence."""

    __tablename__ = "run_results"

    run_id: Mapped[str] = mapped_column(
        String(100), ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    type: Mapped[str] = mapped_column(String(100))
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[float] = mapped_column(Double)


class AuditRow(Base):
    """Every per-run MCP call, numbered per run."""

    __tablename__ = "audit"
    __table_args__ = (Index(None, "created_at"),)

    run_id: Mapped[str] = mapped_column(
        String(100), ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    tool: Mapped[str] = mapped_column(String(200))
    args_digest: Mapped[str] = mapped_column(String(128))
    bytes_in: Mapped[int] = mapped_column(BigInteger)
    bytes_out: Mapped[int] = mapped_column(BigInteger)
    outcome: Mapped[str] = mapped_column(String(16))
    code: Mapped[str | None] = mapped_column(String(64))
    duration_ms: Mapped[float] = mapped_column(Double)
    created_at: Mapped[float] = mapped_column(Double)
    started_at: Mapped[float | None] = mapped_column(Double)


class HostRow(Base):
    """A host process that is (or was) running runs."""

    __tablename__ = "hosts"

    host_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    pid: Mapped[int] = mapped_column(Integer)
    hostname: Mapped[str] = mapped_column(String(255))
    started_at: Mapped[float] = mapped_column(Double)
    heartbeat_at: Mapped[float] = mapped_column(Double)


class SecretRow(Base):
    """A secret of this installation, created once and shared by every host on the database."""

    __tablename__ = "secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[float] = mapped_column(Double)


class DeliveryRow(Base):
    """The outbox of outbound webhooks: one row per (webhook URL, announced fact), written in the
    transaction of the fact it announces and sent by `delivery.py` until delivered or dead."""

    __tablename__ = "deliveries"
    __table_args__ = (
        Index(None, "status", "next_attempt_at"),
        Index(None, "run_id"),
        Index(None, "url", "status", "seq"),
        {"sqlite_autoincrement": True},
    )

    seq: Mapped[int] = mapped_column(SeqType, primary_key=True, autoincrement=True)
    delivery_id: Mapped[str] = mapped_column(String(100), unique=True)
    """The Standard Webhooks `webhook-id` (`msg_<ulid>`): the same on every attempt."""
    url: Mapped[str] = mapped_column(String(2000))
    type: Mapped[str] = mapped_column(String(100))
    run_id: Mapped[str | None] = mapped_column(String(100))
    agent_id: Mapped[str | None] = mapped_column(String(100))
    conversation_id: Mapped[str | None] = mapped_column(Id)
    body: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Double)
    expires_at: Mapped[float] = mapped_column(Double)
    """No attempt starts after this (`max_age_s` after creation or redelivery): the row goes dead."""
    next_attempt_at: Mapped[float] = mapped_column(Double)
    claimed_until: Mapped[float] = mapped_column(Double)
    """A host's lease on the row while it sends; another host claims it only after this."""
    claimed_by: Mapped[str | None] = mapped_column(String(100))
    last_error: Mapped[str | None] = mapped_column(String(500))
    delivered_at: Mapped[float | None] = mapped_column(Double)


class ApprovalRow(Base):
    """A human decision a run waits for or an action needs: a host tool or fact write marked `ask`
    (`kind` `tool`), an `action.requested` result with an `idempotency_key` (`kind` `action`), or a
    harness CLI's question to the user (`kind` `interaction`)."""

    __tablename__ = "approvals"
    __table_args__ = (
        Index(None, "status", "expires_at"),
        Index(None, "run_id"),
        Index(None, "parked", "continuation_run_id"),
        {"sqlite_autoincrement": True},
    )

    seq: Mapped[int] = mapped_column(SeqType, primary_key=True, autoincrement=True)
    approval_id: Mapped[str] = mapped_column(String(100), unique=True)
    run_id: Mapped[str] = mapped_column(String(100))
    agent_id: Mapped[str | None] = mapped_column(String(100))
    conversation_id: Mapped[str | None] = mapped_column(Id)
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    request: Mapped[dict[str, Any]]
    action_key: Mapped[str | None] = mapped_column(String(400), unique=True)
    """`<agent_id>/<idempotency_key>` of an action: one approval, and one execution, per key."""
    note: Mapped[str | None] = mapped_column(String(2000))
    created_at: Mapped[float] = mapped_column(Double)
    expires_at: Mapped[float] = mapped_column(Double)
    """Still `pending` past this, the approval counts as `expired` (a denial)."""
    decided_at: Mapped[float | None] = mapped_column(Double)
    parked: Mapped[bool] = mapped_column(Boolean, server_default=false())
    """Its run parked on it (a harness runner): the decision (or expiry) starts a continuation run."""
    continuation_run_id: Mapped[str | None] = mapped_column(String(100))
    """The run its decision started (`parked` only), once admitted."""
    used_by_run_id: Mapped[str | None] = mapped_column(String(100))
    """The run whose call this approved `tool` request let through (`parked` only; at most one)."""


class KbDocumentRow(Base):
    """One ingested document of a knowledge base: where it came from and the hash it was ingested at."""

    __tablename__ = "kb_documents"
    __table_args__ = (UniqueConstraint("kb_id", "path"), {"sqlite_autoincrement": True})

    doc_id: Mapped[int] = mapped_column(SeqType, primary_key=True, autoincrement=True)
    kb_id: Mapped[str] = mapped_column(String(100))
    path: Mapped[str] = mapped_column(PathType)
    title: Mapped[str] = mapped_column(String(1000))
    format: Mapped[str] = mapped_column(String(16))
    content_hash: Mapped[str] = mapped_column(String(64))
    chunker: Mapped[str] = mapped_column(String(32))
    """The chunker version the chunks were made with; a new version re-chunks unchanged files."""
    size: Mapped[int] = mapped_column(BigInteger)
    chunk_count: Mapped[int] = mapped_column(Integer)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata")
    ingested_at: Mapped[float] = mapped_column(Double)


class KbChunkRow(Base):
    """One retrievable passage. `chunk_id` is the FTS5 rowid on SQLite, so it is never reused."""

    __tablename__ = "kb_chunks"
    __table_args__ = (Index(None, "doc_id", "ordinal"), {"sqlite_autoincrement": True})

    chunk_id: Mapped[int] = mapped_column(SeqType, primary_key=True, autoincrement=True)
    doc_id: Mapped[int] = mapped_column(SeqType, ForeignKey("kb_documents.doc_id", ondelete="CASCADE"))
    kb_id: Mapped[str] = mapped_column(String(100))
    """Copied from the document: the full-text scope token is built from it."""
    ordinal: Mapped[int] = mapped_column(Integer)
    heading: Mapped[str] = mapped_column(Text)
    """The heading path, joined with " > " (indexed with a higher weight than the text)."""
    text: Mapped[str] = mapped_column(Text)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata")


class ScheduleRow(Base):
    """A schedule created through the API (`[[schedules]]` of the config file are not stored here)."""

    __tablename__ = "schedules"

    schedule_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    spec: Mapped[dict[str, Any]]
    """The `ScheduleSpec` as JSON."""
    paused: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[float] = mapped_column(Double)
    updated_at: Mapped[float] = mapped_column(Double)


class ScheduleFireRow(Base):
    """The claim of one fire: (schedule_id, fire_at) is the primary key, so of the replicas that find a
    fire due exactly one inserts its row and emits its event. Only a schedule's newest claim is kept."""

    __tablename__ = "schedule_fires"

    schedule_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    fire_at: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    """Epoch seconds of the fire (not of the claim)."""
    outcome: Mapped[str] = mapped_column(String(16))
    """`fired` (its event was submitted) or `skipped` (a misfire under `misfire = "skip"`)."""
    host_id: Mapped[str | None] = mapped_column(String(100))
    claimed_at: Mapped[float] = mapped_column(Double)


class LeaseRow(Base):
    """A named, expiring lease held by one host at a time (the retention job's)."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(100))
    expires_at: Mapped[float] = mapped_column(Double)


class RecordingRow(Base):
    """A recorded run (`record = true`): what it started from, for export and replay."""

    __tablename__ = "recordings"

    run_id: Mapped[str] = mapped_column(
        String(100), ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    agent_id: Mapped[str] = mapped_column(String(100))
    runner_id: Mapped[str] = mapped_column(String(200))
    envelope: Mapped[dict[str, Any]]
    context: Mapped[dict[str, Any]]
    """The run's context as stored on the run: without its token."""
    agent: Mapped[dict[str, Any]]
    """The `[[agents]]` entry the run was bound to, as it was then."""
    created_at: Mapped[float] = mapped_column(Double)


class RecordedCallRow(Base):
    """Every per-run MCP request of a recorded run with its answer, numbered per run."""

    __tablename__ = "recorded_calls"

    run_id: Mapped[str] = mapped_column(
        String(100), ForeignKey("recordings.run_id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    tool: Mapped[str] = mapped_column(String(200))
    arguments: Mapped[dict[str, Any]]
    outcome: Mapped[str] = mapped_column(String(16))
    answer: Mapped[dict[str, Any]]
    created_at: Mapped[float] = mapped_column(Double)


class RuntimeRow(Base):
    """A registered runtime (`mcphost runtimes add`): its token's hash, labels, state and liveness."""

    __tablename__ = "runtimes"

    runtime_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    """SHA-256 hex of the runtime token (printed once by `runtimes add`, never stored)."""
    labels: Mapped[dict[str, Any]]
    """The labels an operator gave it; they win over the ones it reports."""
    reported_labels: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(String(16))
    """online | draining | disabled: what the operator allows (liveness is `last_heartbeat_at`)."""
    capabilities: Mapped[dict[str, Any]]
    slots: Mapped[int] = mapped_column(Integer)
    last_heartbeat_at: Mapped[float | None] = mapped_column(Double)
    created_at: Mapped[float] = mapped_column(Double)


class RuntimeRunRow(Base):
    """A run of a remote agent while it is executed through the queue: queued, then claimed by one
    runtime under a lease and a fence, until its executor on the host drops it."""

    __tablename__ = "runtime_runs"
    __table_args__ = (Index(None, "state", "queued_at"), Index(None, "runtime_id"))

    run_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    host_id: Mapped[str] = mapped_column(String(100))
    """The host whose orchestrator executes the run (and reads its results)."""
    runner_id: Mapped[str] = mapped_column(String(200))
    selector: Mapped[dict[str, Any]]
    on_lost: Mapped[str] = mapped_column(String(16))
    context: Mapped[dict[str, Any]]
    """The run's context without its token; a claim gets it with the claim's fenced token."""
    token_hash: Mapped[str] = mapped_column(String(64))
    deadline_at: Mapped[float] = mapped_column(Double)
    agent_id: Mapped[str | None] = mapped_column(String(100))
    """The run's agent (its projection is built from its config when a runtime claims the run)."""
    workspace: Mapped[str | None] = mapped_column(String(64))
    """The agent's workspace name: only a runtime the host maps it for claims the run."""
    state: Mapped[str] = mapped_column(String(16))
    """queued | claimed"""
    runtime_id: Mapped[str | None] = mapped_column(String(100))
    fence: Mapped[int] = mapped_column(Integer)
    """Bumped by every claim and requeue: what a runtime sends must carry the current one."""
    lease_until: Mapped[float] = mapped_column(Double)
    attempts: Mapped[int] = mapped_column(Integer)
    queued_at: Mapped[float] = mapped_column(Double)
    cancel_reason: Mapped[str | None] = mapped_column(String(1000))
    end_status: Mapped[str | None] = mapped_column(String(16))
    """The runner's answer (`completed`, `failed`, `cancelled`), posted by the runtime."""
    received: Mapped[int] = mapped_column(Integer)
    """The last result number stored for the current fence (the next batch starts after it)."""
    end_through: Mapped[int] = mapped_column(Integer)
    """The last result sequence of the current fence, known once the end is posted."""
    events: Mapped[list[Any]]
    """Claim, requeue, loss, output and end events with their times and runtimes (the run's runtime
    audit, copied into `runtime_audit` when the row is dropped)."""
    runtime_name: Mapped[str | None] = mapped_column(String(64))
    """The name of the runtime of the current claim (kept by the audit after the runtime is removed)."""
    claimed_at: Mapped[float | None] = mapped_column(Double)
    """When the current claim was made."""
    first_result_at: Mapped[float | None] = mapped_column(Double)
    """When the current claim's first result arrived."""
    renewals: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    """Heartbeats that renewed the current claim's lease."""
    last_renewal_at: Mapped[float | None] = mapped_column(Double)


class RuntimeAuditRow(Base):
    """Where a remote run ran, kept once it ended: the last claim's runtime, fence and timings, and the
    events of every claim (`runtime_runs.events`)."""

    __tablename__ = "runtime_audit"

    run_id: Mapped[str] = mapped_column(
        String(100), ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    runtime_id: Mapped[str | None] = mapped_column(String(100))
    runtime_name: Mapped[str | None] = mapped_column(String(64))
    fence: Mapped[int] = mapped_column(Integer)
    attempts: Mapped[int] = mapped_column(Integer)
    queued_at: Mapped[float] = mapped_column(Double)
    claimed_at: Mapped[float | None] = mapped_column(Double)
    first_result_at: Mapped[float | None] = mapped_column(Double)
    renewals: Mapped[int] = mapped_column(Integer)
    last_renewal_at: Mapped[float | None] = mapped_column(Double)
    ended_at: Mapped[float] = mapped_column(Double)
    end_status: Mapped[str | None] = mapped_column(String(16))
    events: Mapped[list[Any]]


class RuntimeResultRow(Base):
    """One result a runtime posted for the fence it held, until the host's executor journals it."""

    __tablename__ = "runtime_results"

    run_id: Mapped[str] = mapped_column(
        String(100), ForeignKey("runtime_runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    fence: Mapped[int] = mapped_column(Integer, primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    nbytes: Mapped[int] = mapped_column(Integer)
    dropped: Mapped[bool] = mapped_column(Boolean)
    result: Mapped[dict[str, Any]]


class ModelCallRow(Base):
    """One call (one attempt) of a host model by a run: tokens, cost, timing, outcome.

    A call is reserved before the upstream is asked (`status` `reserved`, `reserved_*` what it may
    cost at most) and finished with what it cost; a budget counts a reserved row at its reservation
    and a finished one at its cost. No foreign key to `runs`: usage outlives retention of runs."""

    __tablename__ = "model_calls"
    __table_args__ = (
        Index(None, "run_id"),
        Index(None, "agent_id", "day"),
        Index(None, "created_at"),
    )

    call_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(100))
    agent_id: Mapped[str] = mapped_column(String(100))
    actor_id: Mapped[str | None] = mapped_column(String(400))
    conversation_id: Mapped[str | None] = mapped_column(String(400))
    model_id: Mapped[str] = mapped_column(String(64))
    upstream_model: Mapped[str] = mapped_column(String(200))
    response_model: Mapped[str | None] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))
    api: Mapped[str] = mapped_column(String(16))
    streamed: Mapped[bool] = mapped_column(Boolean)
    attempt: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    http_status: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(String(1000))
    input_tokens: Mapped[int] = mapped_column(BigInteger)
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    cached_tokens: Mapped[int] = mapped_column(BigInteger)
    cost_usd: Mapped[float] = mapped_column(Double)
    reserved_tokens: Mapped[int] = mapped_column(BigInteger)
    reserved_usd: Mapped[float] = mapped_column(Double)
    latency_ms: Mapped[float | None] = mapped_column(Double)
    ttft_ms: Mapped[float | None] = mapped_column(Double)
    created_at: Mapped[float] = mapped_column(Double)
    day: Mapped[str] = mapped_column(String(10))
    """The UTC day of `created_at` (`YYYY-MM-DD`): what the daily budgets and `group_by=day` count by."""


class ChannelStatusRow(Base):
    """One row per `[channels.<id>]` that has had inbound traffic (migration 0026): counters and the
    newest admitted and ignored event, written by the inbound route (`stores/channels.py`)."""

    __tablename__ = "channel_status"

    channel_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    accepted: Mapped[int] = mapped_column(BigInteger)
    """Verified events admitted as a new run."""
    ignored: Mapped[int] = mapped_column(BigInteger)
    """Verified events answered 200 without a run (a kind not mapped, not selected, no agent)."""
    last_inbound_at: Mapped[float | None] = mapped_column(Double)
    last_event_type: Mapped[str | None] = mapped_column(String(100))
    last_source_event_type: Mapped[str | None] = mapped_column(String(100))
    last_run_id: Mapped[str | None] = mapped_column(String(100))
    last_ignored_at: Mapped[float | None] = mapped_column(Double)
    last_ignored_reason: Mapped[str | None] = mapped_column(String(100))
    last_ignored_type: Mapped[str | None] = mapped_column(String(100))
    """The ignored event's `source_event_type` (None: a kind the adapter does not map)."""


def table_of(row: type[Base]) -> Table[Any]:
    """The Core `Table` of a row class (for statements built once, executed on a connection)."""
    table = row.__table__
    assert isinstance(table, Table), f"{row.__name__} is not mapped to a table"
    return cast("Table[Any]", table)
