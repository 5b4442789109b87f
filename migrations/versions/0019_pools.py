"""concurrency pools: a run's pool and key, and the pools' limits

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable without a default: PostgreSQL adds them without rewriting the table.
    op.add_column("scheduler_runs", sa.Column("pool", sa.String(200)))
    op.add_column("scheduler_runs", sa.Column("pool_key", sa.String(200)))
    # Only live pooled rows: a pool's start reads the few runs in hand of its members.
    where = sa.text("live AND pool IS NOT NULL")
    op.create_index(
        "ix_scheduler_runs_live_pool",
        "scheduler_runs",
        ["pool"],
        postgresql_where=where,
        sqlite_where=where,
    )
    op.create_table(
        "scheduler_pools",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("declared_limit", sa.Integer, nullable=False),
        sa.Column("declared_per_key", sa.Integer),
        sa.Column("declared_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("limit_override", sa.Integer),
        sa.Column("per_key_override", sa.Integer),
        sa.Column("changed_by", sa.String(200)),
        sa.Column("changed_at", sa.DateTime(timezone=True)),
    )


def downgrade() -> None:
    op.drop_table("scheduler_pools")
    op.drop_index("ix_scheduler_runs_live_pool", table_name="scheduler_runs")
    op.drop_column("scheduler_runs", "pool_key")
    op.drop_column("scheduler_runs", "pool")
