"""Human approvals (`approvals`).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

One row per decision a person is asked for: a host tool or fact write an agent marks `ask`, or an
`action.requested` result with an idempotency key (unique per agent and key, `action_key`).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column(
            "seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("approval_id", sa.String(100), nullable=False),
        sa.Column("run_id", sa.String(100), nullable=False),
        sa.Column("agent_id", sa.String(100), nullable=True),
        sa.Column("conversation_id", sa.String(200), nullable=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("action_key", sa.String(400), nullable=True),
        sa.Column("note", sa.String(2000), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.Column("decided_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_approvals")),
        sa.UniqueConstraint("approval_id", name=op.f("uq_approvals_approval_id")),
        sa.UniqueConstraint("action_key", name=op.f("uq_approvals_action_key")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_approvals_status_expires_at"), "approvals", ["status", "expires_at"])
    op.create_index(op.f("ix_approvals_run_id"), "approvals", ["run_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_approvals_run_id"), table_name="approvals")
    op.drop_index(op.f("ix_approvals_status_expires_at"), table_name="approvals")
    op.drop_table("approvals")
