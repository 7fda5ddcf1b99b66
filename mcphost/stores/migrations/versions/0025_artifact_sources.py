"""Lazy artifacts (`artifact_sources`): an artifact whose bytes are fetched on first read.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-05

A chat channel's inbound files (Slack `files[]`, Telegram documents and photos, Discord attachments)
become artifacts without being downloaded when the event arrives: this row holds the platform's
locator, the declared size and the per-channel bound until the first read fetches the bytes, inserts
the `artifacts` row and deletes this one. A fetch that failed leaves its error here for the next read
to retry (`error_code = fetch_failed`) or to refuse at once (`too_large`). `artifacts` is unchanged:
a row there still always has its bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "artifact_sources",
        sa.Column("artifact_id", sa.String(64), nullable=False),
        sa.Column("origin", sa.String(200), nullable=False),
        sa.Column("locator", sa.JSON(), nullable=False),
        sa.Column("name", sa.String(1000), nullable=True),
        sa.Column("mime_type", sa.String(200), nullable=False),
        sa.Column("declared_size", sa.BigInteger(), nullable=True),
        sa.Column("max_bytes", sa.BigInteger(), nullable=False),
        sa.Column("conversation_id", sa.String(200), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=True),
        sa.Column("error_code", sa.String(32), nullable=True),
        sa.Column("error", sa.String(1000), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("artifact_id", name=op.f("pk_artifact_sources")),
    )
    op.create_index(op.f("ix_artifact_sources_created_at"), "artifact_sources", ["created_at"])


def downgrade() -> None:
    op.drop_table("artifact_sources")
