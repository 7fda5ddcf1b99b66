"""Runtimes (`runtimes`), the queue of remote runs (`runtime_runs`) and their posted results
(`runtime_results`).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-04

A runtime is registered with a token whose SHA-256 is kept (never the token). A run of an agent with
`[agents.runtime]` waits in `runtime_runs` until an eligible runtime claims it under a lease and a fence;
the results that runtime posts wait in `runtime_results` until the host executing the run journals them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "runtimes",
        sa.Column("runtime_id", sa.String(100), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("reported_labels", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("capabilities", sa.JSON(), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("last_heartbeat_at", sa.Double(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("runtime_id", name=op.f("pk_runtimes")),
        sa.UniqueConstraint("name", name=op.f("uq_runtimes_name")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_runtimes_token_hash")),
    )
    op.create_table(
        "runtime_runs",
        sa.Column("run_id", sa.String(100), nullable=False),
        sa.Column("host_id", sa.String(100), nullable=False),
        sa.Column("runner_id", sa.String(200), nullable=False),
        sa.Column("selector", sa.JSON(), nullable=False),
        sa.Column("on_lost", sa.String(16), nullable=False),
        sa.Column("context", sa.JSON(), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("deadline_at", sa.Double(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("runtime_id", sa.String(100), nullable=True),
        sa.Column("fence", sa.Integer(), nullable=False),
        sa.Column("lease_until", sa.Double(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("queued_at", sa.Double(), nullable=False),
        sa.Column("cancel_reason", sa.String(1000), nullable=True),
        sa.Column("end_status", sa.String(16), nullable=True),
        sa.Column("received", sa.Integer(), nullable=False),
        sa.Column("end_through", sa.Integer(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_runtime_runs")),
    )
    op.create_index(op.f("ix_runtime_runs_state_queued_at"), "runtime_runs", ["state", "queued_at"])
    op.create_index(op.f("ix_runtime_runs_runtime_id"), "runtime_runs", ["runtime_id"])
    op.create_table(
        "runtime_results",
        sa.Column("run_id", sa.String(100), nullable=False),
        sa.Column("fence", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("nbytes", sa.Integer(), nullable=False),
        sa.Column("dropped", sa.Boolean(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runtime_runs.run_id"],
            name=op.f("fk_runtime_results_run_id_runtime_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "fence", "seq", name=op.f("pk_runtime_results")),
    )


def downgrade() -> None:
    op.drop_table("runtime_results")
    op.drop_index(op.f("ix_runtime_runs_runtime_id"), table_name="runtime_runs")
    op.drop_index(op.f("ix_runtime_runs_state_queued_at"), table_name="runtime_runs")
    op.drop_table("runtime_runs")
    op.drop_table("runtimes")
