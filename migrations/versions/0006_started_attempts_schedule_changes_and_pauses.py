"""started attempts, schedule changes and pause history

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scheduler_runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("started_attempts", sa.Integer(), nullable=False, server_default="0")
        )
    # Before this revision every attempt counted; keep counting the ones that are known.
    op.execute(
        "UPDATE scheduler_runs SET started_attempts = CASE WHEN started_at IS NULL "
        "THEN attempt - 1 ELSE attempt END"
    )
    with op.batch_alter_table("scheduler_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("schedule_changed_at", sa.DateTime(timezone=True)))
        batch_op.add_column(sa.Column("previous_cron", sa.String(length=200)))
        batch_op.add_column(sa.Column("previous_timezone", sa.String(length=64)))
    op.create_table(
        "scheduler_pauses",
        sa.Column("job", sa.String(length=200), nullable=False),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resumed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("job", "paused_at", name=op.f("pk_scheduler_pauses")),
    )
    # The one pause each job remembered so far.
    op.execute(
        "INSERT INTO scheduler_pauses (job, paused_at, resumed_at) "
        "SELECT name, paused_at, CASE WHEN paused THEN NULL ELSE resumed_at END "
        "FROM scheduler_jobs WHERE paused_at IS NOT NULL "
        "AND (paused OR resumed_at > paused_at)"
    )


def downgrade() -> None:
    op.drop_table("scheduler_pauses")
    with op.batch_alter_table("scheduler_jobs", schema=None) as batch_op:
        batch_op.drop_column("previous_timezone")
        batch_op.drop_column("previous_cron")
        batch_op.drop_column("schedule_changed_at")
    with op.batch_alter_table("scheduler_runs", schema=None) as batch_op:
        batch_op.drop_column("started_attempts")
