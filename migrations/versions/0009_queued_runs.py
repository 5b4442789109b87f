"""runs handed to a task queue: when the message was sent, and to which queue

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scheduler_runs") as batch:
        batch.add_column(sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("queue", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scheduler_runs") as batch:
        batch.drop_column("queue")
        batch.drop_column("queued_at")
