"""Indexes for listing runs by agent and by time (`GET /v1/runs?agent=&since=&until=`).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03

`(agent_id, created_seq)` and `(agent_id, status, created_seq)` serve the agent filter the way the
conversation indexes serve theirs: newest first, O(limit) rows per page. `(created_at, created_seq)`
turns a time window into a range of `created_seq` with one index probe per bound (`RunStore.list`).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(op.f("ix_runs_agent_id_created_seq"), "runs", ["agent_id", "created_seq"])
    op.create_index(
        op.f("ix_runs_agent_id_status_created_seq"), "runs", ["agent_id", "status", "created_seq"]
    )
    op.create_index(op.f("ix_runs_created_at_created_seq"), "runs", ["created_at", "created_seq"])


def downgrade() -> None:
    op.drop_index(op.f("ix_runs_created_at_created_seq"), table_name="runs")
    op.drop_index(op.f("ix_runs_agent_id_status_created_seq"), table_name="runs")
    op.drop_index(op.f("ix_runs_agent_id_created_seq"), table_name="runs")
