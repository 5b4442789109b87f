"""request holds, and the job sets nodes select their own rows by

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scheduler_requests", schema=None) as batch_op:
        batch_op.add_column(sa.Column("taken_until", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("tries", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("progress", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index(batch_op.f("ix_scheduler_requests_finished_at"), ["finished_at"])
    # A request taken before holds existed has been taken once; one never finished was
    # stranded by its taker: its hold has lapsed, so a node takes it again.
    op.execute(
        "UPDATE scheduler_requests SET tries = 1, taken_until = taken_at WHERE taken_by IS NOT NULL"
    )
    op.create_table(
        "scheduler_job_sets",
        sa.Column("job", sa.String(length=200), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("job", "digest", name=op.f("pk_scheduler_job_sets")),
    )


def downgrade() -> None:
    op.drop_table("scheduler_job_sets")
    with op.batch_alter_table("scheduler_requests", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_scheduler_requests_finished_at"))
        batch_op.drop_column("progress")
        batch_op.drop_column("tries")
        batch_op.drop_column("taken_until")
