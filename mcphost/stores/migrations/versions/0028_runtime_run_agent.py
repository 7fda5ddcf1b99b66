"""The agent and workspace of a queued remote run (`runtime_runs.agent_id`, `runtime_runs.workspace`).

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-05

A claim's projection (the agent's secrets, its workspace folder on the claiming runtime, its skills'
files) is built from the agent's config when a runtime claims the run, and sent in the claim answer
only: the queue row names the agent, never a secret. A run whose agent has a workspace is claimed only
by a runtime the host maps that workspace for. Rows queued before this revision have neither (no
projection, any eligible runtime).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runtime_runs", sa.Column("agent_id", sa.String(100), nullable=True))
    op.add_column("runtime_runs", sa.Column("workspace", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runtime_runs") as batch:
        batch.drop_column("workspace")
        batch.drop_column("agent_id")
