"""Schedules created through the API (`schedules`), fire claims (`schedule_fires`) and leases (`leases`).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03

`schedule_fires` has the primary key (schedule_id, fire_at): of the replicas that find one fire due,
exactly one inserts its row and emits the event. `leases` holds named, expiring leases (the retention
job takes one so that one replica at a time collects).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("schedule_id", sa.String(100), primary_key=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
    )
    op.create_table(
        "schedule_fires",
        sa.Column("schedule_id", sa.String(100), primary_key=True),
        sa.Column("fire_at", sa.BigInteger(), primary_key=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("host_id", sa.String(100), nullable=True),
        sa.Column("claimed_at", sa.Double(), nullable=False),
    )
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(100), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leases")
    op.drop_table("schedule_fires")
    op.drop_table("schedules")
