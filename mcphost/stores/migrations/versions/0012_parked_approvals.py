"""Approvals that park their run (`approvals.parked`, `continuation_run_id`, `used_by_run_id`).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03

A harness run whose call is marked `ask` (or whose CLI asks the user a question) ends `parked`; its
approval is `parked`, names the continuation run its decision started once one did, and, for an
approved call, the run whose call used the approval (at most one).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("approvals", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.add_column(sa.Column("parked", sa.Boolean(), server_default=sa.false(), nullable=False))
        batch.add_column(sa.Column("continuation_run_id", sa.String(100), nullable=True))
        batch.add_column(sa.Column("used_by_run_id", sa.String(100), nullable=True))
    op.create_index(
        op.f("ix_approvals_parked_continuation_run_id"), "approvals", ["parked", "continuation_run_id"]
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_approvals_parked_continuation_run_id"), table_name="approvals")
    with op.batch_alter_table("approvals", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("used_by_run_id")
        batch.drop_column("continuation_run_id")
        batch.drop_column("parked")
