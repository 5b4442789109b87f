"""items and checkpoints

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduler_items",
        sa.Column("job", sa.String(length=200), nullable=False),
        sa.Column("key", sa.String(length=500), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("period", sa.DateTime(timezone=True), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=200), nullable=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("job", "key", name=op.f("pk_scheduler_items")),
    )
    with op.batch_alter_table("scheduler_items", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_scheduler_items_state_done_at"), ["state", "done_at"], unique=False
        )

    with op.batch_alter_table("scheduler_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("checkpoint", sa.Text(), nullable=True))
        batch_op.create_index(batch_op.f("ix_scheduler_runs_period"), ["period"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("scheduler_runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_scheduler_runs_period"))
        batch_op.drop_column("checkpoint")

    with op.batch_alter_table("scheduler_items", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_scheduler_items_state_done_at"))

    op.drop_table("scheduler_items")
