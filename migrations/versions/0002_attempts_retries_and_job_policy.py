"""attempts, retries and job policy

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduler_attempts",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("job", sa.String(length=200), nullable=False),
        sa.Column("period", sa.DateTime(timezone=True), nullable=False),
        sa.Column("node", sa.String(length=200), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=16), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=True),
        sa.Column("error_type", sa.String(length=200), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("error_traceback", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("run_id", "attempt", name=op.f("pk_scheduler_attempts")),
    )
    with op.batch_alter_table("scheduler_attempts", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_scheduler_attempts_job_period"), ["job", "period"], unique=False
        )

    with op.batch_alter_table("scheduler_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lease_seconds", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("timeout_seconds", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("retries", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("alert_after_seconds", sa.Float(), nullable=True))

    with op.batch_alter_table("scheduler_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index(batch_op.f("ix_scheduler_runs_retry_at"), ["retry_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("scheduler_runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_scheduler_runs_retry_at"))
        batch_op.drop_column("retry_at")

    with op.batch_alter_table("scheduler_jobs", schema=None) as batch_op:
        batch_op.drop_column("alert_after_seconds")
        batch_op.drop_column("retries")
        batch_op.drop_column("timeout_seconds")
        batch_op.drop_column("lease_seconds")

    with op.batch_alter_table("scheduler_attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_scheduler_attempts_job_period"))

    op.drop_table("scheduler_attempts")
