"""node liveness since, and the process that runs it

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scheduler_nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("liveness_since", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("process", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scheduler_nodes", schema=None) as batch_op:
        batch_op.drop_column("process")
        batch_op.drop_column("liveness_since")
