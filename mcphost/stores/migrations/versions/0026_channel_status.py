"""Chat channels' inbound status (`channel_status`) and an index to read their outbox by channel.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-05

`GET /v1/channels` and the console's Channels page show each channel's newest inbound event, how many
it admitted and ignored, and its replies' newest delivery, pending and dead counts and last error. The
inbound side is one row per channel, updated by the inbound route (the event log cannot say which
channel an event came through without a scan); the outbound side is read from `deliveries` by
`(url, status, seq)`, where a channel's rows have `url = channel:<id>`: a count per status and the
newest row of each status are index range reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "channel_status",
        sa.Column("channel_id", sa.String(100), nullable=False),
        sa.Column("accepted", sa.BigInteger(), nullable=False),
        sa.Column("ignored", sa.BigInteger(), nullable=False),
        sa.Column("last_inbound_at", sa.Double(), nullable=True),
        sa.Column("last_event_type", sa.String(100), nullable=True),
        sa.Column("last_source_event_type", sa.String(100), nullable=True),
        sa.Column("last_run_id", sa.String(100), nullable=True),
        sa.Column("last_ignored_at", sa.Double(), nullable=True),
        sa.Column("last_ignored_reason", sa.String(100), nullable=True),
        sa.Column("last_ignored_type", sa.String(100), nullable=True),
        sa.PrimaryKeyConstraint("channel_id", name=op.f("pk_channel_status")),
    )
    op.create_index(op.f("ix_deliveries_url_status_seq"), "deliveries", ["url", "status", "seq"])


def downgrade() -> None:
    op.drop_index(op.f("ix_deliveries_url_status_seq"), table_name="deliveries")
    op.drop_table("channel_status")
