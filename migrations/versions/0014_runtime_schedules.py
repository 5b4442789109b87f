"""schedules created at run time

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_DUE = "next_due_at IS NOT NULL AND NOT paused AND deleted_at IS NULL"


def upgrade() -> None:
    op.create_table(
        "scheduler_schedules",
        sa.Column(
            "key",
            sa.String(length=190).with_variant(sa.String(length=190, collation="C"), "postgresql"),
            nullable=False,
        ),
        sa.Column("job", sa.String(length=200), nullable=False),
        sa.Column("trigger", sa.String(length=8), nullable=False),
        sa.Column("cron", sa.String(length=200), nullable=True),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("every_seconds", sa.Integer(), nullable=True),
        sa.Column("start_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("once_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("args", sa.Text(), nullable=False),
        sa.Column("catchup", sa.String(length=16), nullable=True),
        sa.Column("catchup_window_seconds", sa.Float(), nullable=True),
        sa.Column("catchup_limit", sa.Integer(), nullable=True),
        sa.Column("jitter_seconds", sa.Float(), nullable=True),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_period", sa.DateTime(timezone=True), nullable=True),
        sa.Column("owed", sa.Text(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("fired_by", sa.String(length=200), nullable=True),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_scheduler_schedules")),
    )
    op.create_index(
        "ix_scheduler_schedules_due",
        "scheduler_schedules",
        ["job", "next_due_at"],
        postgresql_where=sa.text(_DUE),
        sqlite_where=sa.text(_DUE),
    )


def downgrade() -> None:
    op.drop_index("ix_scheduler_schedules_due", table_name="scheduler_schedules")
    op.drop_table("scheduler_schedules")
