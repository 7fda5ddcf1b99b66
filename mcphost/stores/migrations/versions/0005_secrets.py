"""Installation secrets (`secrets`): the key cursors are signed with, shared by every replica.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03

The table starts empty; the first host that opens the stores generates the cursor secret into it
(`stores/secrets.py`), race-safely, so every replica on the same database signs and verifies cursors
with the same key.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "secrets",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(200), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("secrets")
