"""Indexes for a database of tens of millions of rows: the retention pass and history search stay flat.

Revision ID: 0020
Revises: 0016
Create Date: 2026-12-05

Found by `EXPLAIN` on a generated database (`tests/mcphost/stores/test_query_plans.py`,
`bench.pg_scale`):
- The event log, the transcript and audit are collected oldest first by `created_at < cutoff`
  (`stores/retention.py`); without an index on `created_at` every batch of 500 rows was a sequential
  scan of the whole table. Run results and recordings go by their run's end: `(ended_at)` on runs.
  Both dialects.
- PostgreSQL: the transcript's GIN index becomes (conversation_id, search_vector), without thread_id.
  Nearly every row has thread "", so the thread's entry in the index listed the whole table and a search
  in a long conversation read it all (46 ms at 500k rows, 30x the 10k-row figure at 1M); the thread is
  now a filter on the conversation's matching rows. SQLite's FTS5 scope token is unchanged.

On a big existing PostgreSQL database these indexes take a while to build and block writes to their
table meanwhile: create them beforehand with `CREATE INDEX CONCURRENTLY` under the same names (the
transcript's GIN index under another name, then drop the old one and rename), and this revision finds
the B-tree ones there.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = (
    ("ix_events_created_at", "events", "created_at"),
    ("ix_transcript_created_at", "transcript", "created_at"),
    ("ix_audit_created_at", "audit", "created_at"),
    ("ix_runs_ended_at", "runs", "ended_at"),
)


def _transcript_gin(columns: str) -> None:
    op.execute("DROP INDEX IF EXISTS ix_transcript_search_vector")
    op.execute(f"CREATE INDEX ix_transcript_search_vector ON transcript USING gin ({columns})")


def upgrade() -> None:
    for name, table, column in INDEXES:
        op.create_index(name, table, [column], if_not_exists=True)
    if op.get_bind().dialect.name == "postgresql":
        _transcript_gin("conversation_id, search_vector")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _transcript_gin("conversation_id, thread_id, search_vector")
    for name, table, _ in reversed(INDEXES):
        op.drop_index(name, table_name=table)
