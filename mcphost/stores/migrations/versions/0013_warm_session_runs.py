"""The warm session a run serves (`runs.warm_session_id`), so every replica finds a session's run.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04

A run of an agent with `warm = true` records, in its start transaction, the warm session whose
endpoint (`/sessions/{session_id}/mcp`) it serves; the session's current run is its running run with
that id. `(warm_session_id, created_seq)` finds it with one index probe: the running run is the session's
newest started one (a conversation's runs start in `created_seq` order). Runs started before this
revision, and runs without a warm session, keep NULL. The key that signs session tokens is a `secrets`
row (migration 0005's table), created by the first host that needs it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.add_column(sa.Column("warm_session_id", sa.String(40), nullable=True))
    op.create_index(op.f("ix_runs_warm_session_id_created_seq"), "runs", ["warm_session_id", "created_seq"])


def downgrade() -> None:
    op.drop_index(op.f("ix_runs_warm_session_id_created_seq"), table_name="runs")
    with op.batch_alter_table("runs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("warm_session_id")
