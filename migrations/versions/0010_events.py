"""alert events (scheduler_events)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduler_events",
        sa.Column("job", sa.String(length=200), nullable=False),
        sa.Column("period", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("subject", sa.String(length=500), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("reason", sa.String(length=16), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("tries", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_try_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("taken_by", sa.String(length=200), nullable=True),
        sa.Column("taken_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_to", sa.Text(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint(
            "job", "period", "kind", "subject", name=op.f("pk_scheduler_events")
        ),
    )
    op.create_index(
        op.f("ix_scheduler_events_state_next_try_at"),
        "scheduler_events",
        ["state", "next_try_at"],
    )
    op.create_index(op.f("ix_scheduler_events_created_at"), "scheduler_events", ["created_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_scheduler_events_created_at"), table_name="scheduler_events")
    op.drop_index(op.f("ix_scheduler_events_state_next_try_at"), table_name="scheduler_events")
    op.drop_table("scheduler_events")
