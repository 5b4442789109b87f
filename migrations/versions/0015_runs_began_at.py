"""when a run's body was known to have begun

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Runs already running when this lands keep it empty: no period skips behind them
    # (they wait their turn), the cautious reading of a start nobody confirmed. A plain
    # ADD COLUMN: SQLite's batch copy of this table cannot carry its generated columns.
    op.add_column("scheduler_runs", sa.Column("began_at", sa.DateTime(timezone=True)))


def downgrade() -> None:
    op.drop_column("scheduler_runs", "began_at")
