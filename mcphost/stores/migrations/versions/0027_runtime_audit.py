"""A remote run's runtime audit: claim timings and lease renewals on `runtime_runs`, and `runtime_audit`,
where they are kept once the run ends.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-05

While a run is queued or claimed, its `runtime_runs` row counts the lease renewals of the current claim
and says when it was claimed and when its first result arrived. When the host drops the row (the run
ended), those facts, the runtime that held it and the events (claims, requeues, losses, output, end) are
copied into `runtime_audit`, one row per run, deleted with the run.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runtime_runs") as batch:
        batch.add_column(sa.Column("runtime_name", sa.String(64), nullable=True))
        batch.add_column(sa.Column("claimed_at", sa.Double(), nullable=True))
        batch.add_column(sa.Column("first_result_at", sa.Double(), nullable=True))
        batch.add_column(sa.Column("renewals", sa.Integer(), nullable=False, server_default=sa.text("0")))
        batch.add_column(sa.Column("last_renewal_at", sa.Double(), nullable=True))
    op.create_table(
        "runtime_audit",
        sa.Column("run_id", sa.String(100), nullable=False),
        sa.Column("runtime_id", sa.String(100), nullable=True),
        sa.Column("runtime_name", sa.String(64), nullable=True),
        sa.Column("fence", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("queued_at", sa.Double(), nullable=False),
        sa.Column("claimed_at", sa.Double(), nullable=True),
        sa.Column("first_result_at", sa.Double(), nullable=True),
        sa.Column("renewals", sa.Integer(), nullable=False),
        sa.Column("last_renewal_at", sa.Double(), nullable=True),
        sa.Column("ended_at", sa.Double(), nullable=False),
        sa.Column("end_status", sa.String(16), nullable=True),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.run_id"], name=op.f("fk_runtime_audit_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_runtime_audit")),
    )


def downgrade() -> None:
    op.drop_table("runtime_audit")
    with op.batch_alter_table("runtime_runs") as batch:
        for column in ("last_renewal_at", "renewals", "first_result_at", "claimed_at", "runtime_name"):
            batch.drop_column(column)
