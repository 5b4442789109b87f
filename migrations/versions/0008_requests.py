"""operator requests (scheduler_requests)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduler_requests",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("job", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("period", sa.DateTime(timezone=True), nullable=True),
        sa.Column("range_start", sa.DateTime(timezone=True), nullable=True),
        sa.Column("range_end", sa.DateTime(timezone=True), nullable=True),
        sa.Column("force", sa.Boolean(), nullable=False),
        sa.Column("include_failed", sa.Boolean(), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("requested_by", sa.String(length=200), nullable=False),
        sa.Column("taken_by", sa.String(length=200), nullable=True),
        sa.Column("taken_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("run_id", sa.String(length=32), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_scheduler_requests")),
    )
    op.create_index(
        op.f("ix_scheduler_requests_taken_by_requested_at"),
        "scheduler_requests",
        ["taken_by", "requested_at"],
    )
    op.create_index(
        op.f("ix_scheduler_requests_job_requested_at"),
        "scheduler_requests",
        ["job", "requested_at"],
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_scheduler_requests_job_requested_at"), table_name="scheduler_requests")
    op.drop_index(
        op.f("ix_scheduler_requests_taken_by_requested_at"), table_name="scheduler_requests"
    )
    op.drop_table("scheduler_requests")
