"""When each audited MCP call began (`audit.started_at`), so a run's calls can be drawn on a time axis.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05

`created_at` is when the row was written, which is after the call ended and, with batched audit writes,
shared by several calls; the console's run timeline places each call from its start and its
`duration_ms`. Rows written before this revision keep NULL (the console falls back to `created_at`
minus the duration).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("audit") as batch:
        batch.add_column(sa.Column("started_at", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audit") as batch:
        batch.drop_column("started_at")
