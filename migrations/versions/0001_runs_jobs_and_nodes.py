"""runs, jobs and nodes

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduler_jobs",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("cron", sa.String(length=200), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_scheduler_jobs")),
    )
    op.create_table(
        "scheduler_nodes",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(length=32), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_scheduler_nodes")),
    )
    op.create_table(
        "scheduler_runs",
        sa.Column("job", sa.String(length=200), nullable=False),
        sa.Column("period", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=16), nullable=True),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=True),
        sa.Column("lease_seconds", sa.Float(), nullable=False),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=True),
        sa.Column("error_type", sa.String(length=200), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("error_traceback", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("job", "period", name=op.f("pk_scheduler_runs")),
        sa.UniqueConstraint("id", name=op.f("uq_scheduler_runs_id")),
    )
    with op.batch_alter_table("scheduler_runs", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_scheduler_runs_holder_status"), ["holder", "status"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_scheduler_runs_job_status"), ["job", "status"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_scheduler_runs_status_lease_expires_at"),
            ["status", "lease_expires_at"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("scheduler_runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_scheduler_runs_status_lease_expires_at"))
        batch_op.drop_index(batch_op.f("ix_scheduler_runs_job_status"))
        batch_op.drop_index(batch_op.f("ix_scheduler_runs_holder_status"))

    op.drop_table("scheduler_runs")
    op.drop_table("scheduler_nodes")
    op.drop_table("scheduler_jobs")
