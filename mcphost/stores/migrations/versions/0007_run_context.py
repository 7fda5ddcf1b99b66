"""The context a run was started with, kept on its row (`runs.context`), token-free.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03

Written in the transaction that moves the run to `running` (`RunStore.try_start`), so every host
replica serves the same `run_context`, `mcphost://run/context`, `instructions` and `knowledge_list`.
Rows of runs started before this revision keep NULL: the facts server answers their context requests
with `not_found` (`facts/_context.py`). Adding a nullable column rewrites nothing on either dialect.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("context", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("context")
