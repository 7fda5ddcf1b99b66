"""Initial schema: events, transcript, artifacts + blob chunks, state, storage, runs, results, audit, hosts.

Revision ID: 0001
Revises:
Create Date: 2026-12-02

Types are spelled out here rather than imported from `tables.py`: a migration is a frozen record of
one schema version. `tests/mcphost/stores/test_migrations.py` checks that head equals `tables.py`.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEQ = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
KEY = sa.String(200).with_variant(sa.VARCHAR(200, collation="C"), "postgresql")
ID = sa.String(200)


def _time(name: str, *, nullable: bool = False) -> sa.Column[float]:
    return sa.Column(name, sa.Double(), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("seq", SEQ, autoincrement=True, nullable=False),
        sa.Column("event_id", ID, nullable=False),
        sa.Column("event_type", sa.String(100), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("conversation_id", ID, nullable=False),
        sa.Column("thread_id", ID, nullable=False),
        sa.Column("run_id", sa.String(100), nullable=True),
        sa.Column("actor_id", ID, nullable=True),
        sa.Column("source", sa.String(50), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        _time("created_at"),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_events")),
        sa.UniqueConstraint("event_id", name=op.f("uq_events_event_id")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        op.f("ix_events_conversation_id_thread_id_seq"), "events", ["conversation_id", "thread_id", "seq"]
    )
    op.create_index(
        op.f("ix_events_conversation_id_thread_id_event_type_seq"),
        "events",
        ["conversation_id", "thread_id", "event_type", "seq"],
    )
    op.create_index(op.f("ix_events_run_id_seq"), "events", ["run_id", "seq"])

    op.create_table(
        "transcript",
        sa.Column("seq", SEQ, autoincrement=True, nullable=False),
        sa.Column("item_id", ID, nullable=False),
        sa.Column("conversation_id", ID, nullable=False),
        sa.Column("thread_id", ID, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("contents", sa.JSON(), nullable=False),
        sa.Column("artifacts", sa.JSON(), nullable=False),
        sa.Column("event_id", ID, nullable=True),
        sa.Column("run_id", sa.String(100), nullable=True),
        sa.Column("actor_id", ID, nullable=True),
        _time("created_at"),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_transcript")),
        sa.UniqueConstraint("item_id", name=op.f("uq_transcript_item_id")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        op.f("ix_transcript_conversation_id_thread_id_seq"),
        "transcript",
        ["conversation_id", "thread_id", "seq"],
    )
    op.create_index(op.f("ix_transcript_run_id_seq"), "transcript", ["run_id", "seq"])

    op.create_table(
        "artifacts",
        sa.Column("artifact_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(1000), nullable=True),
        sa.Column("mime_type", sa.String(200), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("owner_run_id", sa.String(100), nullable=True),
        sa.Column("conversation_id", ID, nullable=True),
        _time("created_at"),
        _time("expires_at", nullable=True),
        sa.PrimaryKeyConstraint("artifact_id", name=op.f("pk_artifacts")),
    )
    op.create_table(
        "blob_chunks",
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("sha256", "idx", name=op.f("pk_blob_chunks")),
    )

    op.create_table(
        "state",
        sa.Column("scope", sa.String(32), nullable=False),
        sa.Column("owner", sa.String(1000), nullable=False),
        sa.Column("key", KEY, nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        _time("updated_at"),
        sa.PrimaryKeyConstraint("scope", "owner", "key", name=op.f("pk_state")),
    )
    op.create_table(
        "storage",
        sa.Column("area", sa.String(32), nullable=False),
        sa.Column("owner", sa.String(1000), nullable=False),
        sa.Column("key", KEY, nullable=False),
        sa.Column("value", sa.LargeBinary(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        _time("updated_at"),
        sa.PrimaryKeyConstraint("area", "owner", "key", name=op.f("pk_storage")),
    )

    op.create_table(
        "runs",
        sa.Column("created_seq", SEQ, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(100), nullable=False),
        sa.Column("event_id", ID, nullable=False),
        sa.Column("event_type", sa.String(100), nullable=False),
        sa.Column("agent_id", sa.String(100), nullable=True),
        sa.Column("runner_id", sa.String(200), nullable=True),
        sa.Column("conversation_id", ID, nullable=False),
        sa.Column("thread_id", ID, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        _time("created_at"),
        _time("started_at", nullable=True),
        _time("ended_at", nullable=True),
        _time("deadline_at"),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("usage", sa.JSON(), nullable=False),
        sa.Column("host_id", sa.String(100), nullable=True),
        sa.Column("grant", sa.JSON(), nullable=False),
        sa.Column("token_hash", sa.String(128), nullable=False),
        _time("revoked_at", nullable=True),
        _time("cancel_requested_at", nullable=True),
        sa.PrimaryKeyConstraint("created_seq", name=op.f("pk_runs")),
        sa.UniqueConstraint("event_id", name=op.f("uq_runs_event_id")),
        sa.UniqueConstraint("run_id", name=op.f("uq_runs_run_id")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_runs_status_created_seq"), "runs", ["status", "created_seq"])
    op.create_index(
        op.f("ix_runs_conversation_id_status_created_seq"),
        "runs",
        ["conversation_id", "status", "created_seq"],
    )
    op.create_index(op.f("ix_runs_conversation_id_created_seq"), "runs", ["conversation_id", "created_seq"])

    op.create_table(
        "run_results",
        sa.Column("run_id", sa.String(100), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(100), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        _time("created_at"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.run_id"], name=op.f("fk_run_results_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "seq", name=op.f("pk_run_results")),
    )
    op.create_table(
        "audit",
        sa.Column("run_id", sa.String(100), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("tool", sa.String(200), nullable=False),
        sa.Column("args_digest", sa.String(128), nullable=False),
        sa.Column("bytes_in", sa.BigInteger(), nullable=False),
        sa.Column("bytes_out", sa.BigInteger(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("code", sa.String(64), nullable=True),
        sa.Column("duration_ms", sa.Double(), nullable=False),
        _time("created_at"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.run_id"], name=op.f("fk_audit_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "seq", name=op.f("pk_audit")),
    )

    op.create_table(
        "hosts",
        sa.Column("host_id", sa.String(100), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("hostname", sa.String(255), nullable=False),
        _time("started_at"),
        _time("heartbeat_at"),
        sa.PrimaryKeyConstraint("host_id", name=op.f("pk_hosts")),
    )


def downgrade() -> None:
    for table in (
        "hosts",
        "audit",
        "run_results",
        "runs",
        "storage",
        "state",
        "blob_chunks",
        "artifacts",
        "transcript",
        "events",
    ):
        op.drop_table(table)
