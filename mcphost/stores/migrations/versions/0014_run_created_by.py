"""Which API key created a run (`runs.created_by`), so a `sender` key sees only its own runs.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04

`[[api_keys]]` give keys roles; a run created by a `sender` key's event records the key's name, and the
key lists and reads only runs with its name. `(created_by, created_seq)` serves its newest-first pages
with one index range. Runs admitted before this revision, and runs from hooks, schedules and
continuations, keep NULL: no sender sees them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.add_column(sa.Column("created_by", sa.String(100), nullable=True))
    op.create_index(op.f("ix_runs_created_by_created_seq"), "runs", ["created_by", "created_seq"])


def downgrade() -> None:
    op.drop_index(op.f("ix_runs_created_by_created_seq"), table_name="runs")
    with op.batch_alter_table("runs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("created_by")
