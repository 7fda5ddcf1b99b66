"""Run attempts: an event may have more than one run, numbered, when a host restart failed the first.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03

`runs.attempt` (1 for every existing run) and `runs.previous_run_id` are added, and the uniqueness of
`runs.event_id` becomes the uniqueness of (event_id, attempt): one event still has one run per attempt
number, so two admissions racing to create the same next attempt cannot both succeed. The composite
unique index also serves the lookups by event (latest attempt, attempt chain).

SQLite cannot drop a table constraint, so `runs` is rebuilt (batch mode). The host runs SQLite
migrations with foreign key enforcement off (`engine.migrate`), as SQLite's documented table-rebuild
procedure asks: with it on, dropping the old `runs` table would cascade-delete every `run_results` and
`audit` row.

Downgrade refuses while any event has a second attempt (the old unique constraint cannot hold).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.add_column(sa.Column("attempt", sa.Integer(), server_default=sa.text("1"), nullable=False))
        batch.add_column(sa.Column("previous_run_id", sa.String(100), nullable=True))
        batch.drop_constraint(op.f("uq_runs_event_id"), type_="unique")
        batch.create_unique_constraint(op.f("uq_runs_event_id_attempt"), ["event_id", "attempt"])


def downgrade() -> None:
    retried = op.get_bind().execute(sa.text("SELECT count(*) FROM runs WHERE attempt > 1")).scalar_one()
    if retried:
        raise RuntimeError(
            f"{retried} run(s) are second or later attempts of an event; downgrading below 0003 would "
            "break the one-run-per-event constraint. Delete those runs first if you really mean to."
        )
    with op.batch_alter_table("runs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_constraint(op.f("uq_runs_event_id_attempt"), type_="unique")
        batch.create_unique_constraint(op.f("uq_runs_event_id"), ["event_id"])
        batch.drop_column("previous_run_id")
        batch.drop_column("attempt")
