"""failure streaks: the streak an event tells of, and pauses the scheduler made

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs (nullable, no default): nothing is rewritten, and SQLite's batch
    # copy is not needed. NULL reason: an operator's pause, as every earlier one was.
    op.add_column("scheduler_events", sa.Column("streak", sa.Integer()))
    op.add_column("scheduler_jobs", sa.Column("pause_reason", sa.Text()))
    op.add_column("scheduler_pauses", sa.Column("reason", sa.Text()))
    op.add_column("scheduler_schedules", sa.Column("pause_reason", sa.Text()))
    where = sa.text("pause_reason IS NOT NULL AND deleted_at IS NULL")
    op.create_index(
        "ix_scheduler_schedules_failure_paused",
        "scheduler_schedules",
        ["job"],
        postgresql_where=where,
        sqlite_where=where,
    )


def downgrade() -> None:
    op.drop_index("ix_scheduler_schedules_failure_paused", table_name="scheduler_schedules")
    op.drop_column("scheduler_schedules", "pause_reason")
    op.drop_column("scheduler_pauses", "reason")
    op.drop_column("scheduler_jobs", "pause_reason")
    op.drop_column("scheduler_events", "streak")
