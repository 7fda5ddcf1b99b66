"""A partial index of each conversation's queued and running runs (`ix_runs_conversation_id_active`).

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-07

The turn check of an admission looks for a queued or running run of the conversation. PostgreSQL
planned it on `(conversation_id, created_seq)` with the status as a filter whenever its statistics were
stale (a fresh database, or one growing faster than autovacuum samples it), reading every run of the
conversation at each admission; a partial index holds only the active runs, so the check reads those
whatever the statistics say. Building it reads `runs` once (seconds at millions of runs) and holds its
writers back meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ACTIVE_RUNS = "status IN ('queued', 'running')"
"""`tables.ACTIVE_RUNS` as of this revision."""
ACTIVE_RUNS_POSTGRES = "CAST(status AS text) IN ('queued', 'running')"
"""`tables.ACTIVE_RUNS_POSTGRES` as of this revision."""


def upgrade() -> None:
    op.create_index(
        "ix_runs_conversation_id_active",
        "runs",
        ["conversation_id"],
        postgresql_where=sa.text(ACTIVE_RUNS_POSTGRES),
        sqlite_where=sa.text(ACTIVE_RUNS),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_conversation_id_active", table_name="runs")
