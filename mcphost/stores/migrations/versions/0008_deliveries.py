"""The outbox of outbound webhooks (`deliveries`).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03

One row per (configured webhook, announced fact), written in the same transaction as the fact (a run's
end, a stored result); the sender claims due rows with a lease (`claimed_until`) and ends each
`delivered` or `dead`.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "deliveries",
        sa.Column(
            "seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("delivery_id", sa.String(100), nullable=False),
        sa.Column("url", sa.String(2000), nullable=False),
        sa.Column("type", sa.String(100), nullable=False),
        sa.Column("run_id", sa.String(100), nullable=True),
        sa.Column("agent_id", sa.String(100), nullable=True),
        sa.Column("conversation_id", sa.String(200), nullable=True),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.Column("next_attempt_at", sa.Double(), nullable=False),
        sa.Column("claimed_until", sa.Double(), nullable=False),
        sa.Column("claimed_by", sa.String(100), nullable=True),
        sa.Column("last_error", sa.String(500), nullable=True),
        sa.Column("delivered_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_deliveries")),
        sa.UniqueConstraint("delivery_id", name=op.f("uq_deliveries_delivery_id")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_deliveries_status_next_attempt_at"), "deliveries", ["status", "next_attempt_at"])
    op.create_index(op.f("ix_deliveries_run_id"), "deliveries", ["run_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_deliveries_run_id"), table_name="deliveries")
    op.drop_index(op.f("ix_deliveries_status_next_attempt_at"), table_name="deliveries")
    op.drop_table("deliveries")
