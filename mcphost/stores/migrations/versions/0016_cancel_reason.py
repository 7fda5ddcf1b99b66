"""Why a run was asked to cancel (`runs.cancel_reason`), so the replica that executes it ends it with it.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04

A cancel (or an `interrupt` by a newer event) of a run another process executes is a database write
that process polls for or is notified of (`runs.cancel_requested_at`); the reason given with it travels
in the same row and write, so the run ends `cancelled` with it as a local cancel does. The first reason
written stays. Rows written before this revision, and parks (whose reason is their approval), keep NULL.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.add_column(sa.Column("cancel_reason", sa.String(1000), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("cancel_reason")
