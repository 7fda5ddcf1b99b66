"""Recorded runs (`recordings`, `recorded_calls`).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

A run of an agent with `record = true` (or an event with `options.record`) keeps its envelope, its
token-free context and the agent entry it was bound to (`recordings`), and every per-run MCP request
with its answer, numbered per run (`recorded_calls`). Both go with the run (cascade) and with its
results under `[retention] run_results_days`.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "recordings",
        sa.Column("run_id", sa.String(100), nullable=False),
        sa.Column("agent_id", sa.String(100), nullable=False),
        sa.Column("runner_id", sa.String(200), nullable=False),
        sa.Column("envelope", sa.JSON(), nullable=False),
        sa.Column("context", sa.JSON(), nullable=False),
        sa.Column("agent", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.run_id"], name=op.f("fk_recordings_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_recordings")),
    )
    op.create_table(
        "recorded_calls",
        sa.Column("run_id", sa.String(100), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("tool", sa.String(200), nullable=False),
        sa.Column("arguments", sa.JSON(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("answer", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["recordings.run_id"],
            name=op.f("fk_recorded_calls_run_id_recordings"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "seq", name=op.f("pk_recorded_calls")),
    )


def downgrade() -> None:
    op.drop_table("recorded_calls")
    op.drop_table("recordings")
