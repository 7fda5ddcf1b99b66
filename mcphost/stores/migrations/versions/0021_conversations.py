"""Conversations listed newest activity first: the `conversations` table.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04

`GET /v1/conversations` pages conversations by their newest run. Grouping `runs` by conversation would
read every run of every conversation for one page, so admission keeps one row per conversation (its
newest run's `created_seq`, agent and actor) and `(last_run_seq)`, `(agent_id, last_run_seq)` and
`(actor_id, last_run_seq)` serve each page with one index range. The rows of conversations that had
runs before this revision are filled in from `runs` (and the actor from the newest run's event).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("conversation_id", sa.String(200), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("last_activity_at", sa.Double(), nullable=False),
        sa.Column("last_run_seq", sa.BigInteger(), nullable=False),
        sa.Column("last_run_id", sa.String(100), nullable=False),
        sa.Column("agent_id", sa.String(100), nullable=True),
        sa.Column("actor_id", sa.String(200), nullable=True),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("conversation_id", name=op.f("pk_conversations")),
    )
    op.create_index(op.f("ix_conversations_last_run_seq"), "conversations", ["last_run_seq"])
    op.create_index(
        op.f("ix_conversations_agent_id_last_run_seq"), "conversations", ["agent_id", "last_run_seq"]
    )
    op.create_index(
        op.f("ix_conversations_actor_id_last_run_seq"), "conversations", ["actor_id", "last_run_seq"]
    )
    op.execute(
        """
        INSERT INTO conversations
            (conversation_id, created_at, last_activity_at, last_run_seq, last_run_id, agent_id, actor_id, runs)
        SELECT r.conversation_id, agg.first_at, r.created_at, r.created_seq, r.run_id, r.agent_id,
               (SELECT e.actor_id FROM events e WHERE e.event_id = r.event_id), agg.n
        FROM runs r
        JOIN (SELECT MIN(created_at) AS first_at, MAX(created_seq) AS last_seq, COUNT(*) AS n
              FROM runs WHERE conversation_id <> '' GROUP BY conversation_id) agg
          ON r.created_seq = agg.last_seq
        """
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_conversations_actor_id_last_run_seq"), table_name="conversations")
    op.drop_index(op.f("ix_conversations_agent_id_last_run_seq"), table_name="conversations")
    op.drop_index(op.f("ix_conversations_last_run_seq"), table_name="conversations")
    op.drop_table("conversations")
