"""catch-up claims by time, for a fleet's catch-up budget

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Only catch-up's rows (few: the periods of outages), by when they were claimed: a
    # fleet's budget counts those of the last window across every job. Neither column
    # changes when a run starts or ends, so those updates stay HOT.
    where = sa.text("origin = 'catchup'")
    op.create_index(
        "ix_scheduler_runs_catchup_claimed",
        "scheduler_runs",
        ["claimed_at"],
        postgresql_where=where,
        sqlite_where=where,
    )


def downgrade() -> None:
    op.drop_index("ix_scheduler_runs_catchup_claimed", table_name="scheduler_runs")
