"""Host model calls (`model_calls`): one row per call attempt of a host model, with its usage and cost.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-04

The per-run model endpoints reserve a row before they call the upstream (the budgets of
`[agents.budget]` count it at its reservation) and finish it with the tokens and cost the upstream
reported; a fallback's failed attempts get rows of their own. `GET /v1/usage` and `mcphost usage`
total them. No foreign key to `runs`: usage is kept when retention deletes a run.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "model_calls",
        sa.Column("call_id", sa.String(40), nullable=False),
        sa.Column("run_id", sa.String(100), nullable=False),
        sa.Column("agent_id", sa.String(100), nullable=False),
        sa.Column("actor_id", sa.String(400), nullable=True),
        sa.Column("conversation_id", sa.String(400), nullable=True),
        sa.Column("model_id", sa.String(64), nullable=False),
        sa.Column("upstream_model", sa.String(200), nullable=False),
        sa.Column("response_model", sa.String(200), nullable=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("api", sa.String(16), nullable=False),
        sa.Column("streamed", sa.Boolean(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(1000), nullable=True),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Double(), nullable=False),
        sa.Column("reserved_tokens", sa.BigInteger(), nullable=False),
        sa.Column("reserved_usd", sa.Double(), nullable=False),
        sa.Column("latency_ms", sa.Double(), nullable=True),
        sa.Column("ttft_ms", sa.Double(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.PrimaryKeyConstraint("call_id", name=op.f("pk_model_calls")),
    )
    op.create_index(op.f("ix_model_calls_run_id"), "model_calls", ["run_id"])
    op.create_index(op.f("ix_model_calls_agent_id_day"), "model_calls", ["agent_id", "day"])
    op.create_index(op.f("ix_model_calls_created_at"), "model_calls", ["created_at"])


def downgrade() -> None:
    op.drop_table("model_calls")
