"""the calendars a job's periods skip, as its nodes registered them

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # JSON: each calendar's name and last date (NULL for a function), for `check`'s
    # warning that a calendar's dates run out and for the views.
    op.add_column("scheduler_jobs", sa.Column("calendars", sa.Text()))


def downgrade() -> None:
    op.drop_column("scheduler_jobs", "calendars")
