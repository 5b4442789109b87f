"""the runs table indexed by what is live, so that a start touches no index

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05

A run's row changes three times (claimed, running, ended), and every change touched all
seven of the table's indexes: `status` and the lease were in three of them. Here those
three read two computed columns instead, `live` and `ended_status`, which a start
leaves as they were, and hold only live rows. On PostgreSQL a start is then a HOT
update (the new row version on the same page, no index entry), given room on the page:
new rows are written half a page apart (fillfactor 50). An ended row leaves the live
indexes. On PostgreSQL adding the stored columns rewrites the table under an exclusive
lock: about 7 s a million rows on our test machine, while nodes wait or retry.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

LIVE_SQL = "status IN ('claimed', 'queued', 'running') OR lease_expires_at IS NOT NULL"
ENDED_STATUS_SQL = "CASE WHEN status IN ('claimed', 'queued', 'running') THEN NULL ELSE status END"
LIVE_INDEXES = {
    "ix_scheduler_runs_live_lease": ["lease_expires_at"],
    "ix_scheduler_runs_live_job": ["job"],
    "ix_scheduler_runs_live_holder": ["holder"],
}
STATUS_INDEXES = {
    "ix_scheduler_runs_status_lease_expires_at": ["status", "lease_expires_at"],
    "ix_scheduler_runs_job_status": ["job", "status"],
    "ix_scheduler_runs_holder_status": ["holder", "status"],
}


def _sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"


def upgrade() -> None:
    for name in STATUS_INDEXES:
        op.drop_index(name, table_name="scheduler_runs")
    # PostgreSQL stores a computed column (and rewrites the table to add one); SQLite
    # adds only a virtual one to a table that exists, computed as it is read (and kept
    # in the indexes that hold it), which needs no rebuild and so also works as a
    # script (`scheduler migrate --sql`).
    stored = not _sqlite()
    op.add_column(
        "scheduler_runs",
        sa.Column("live", sa.Boolean(), sa.Computed(LIVE_SQL, persisted=stored)),
    )
    op.add_column(
        "scheduler_runs",
        sa.Column("ended_status", sa.String(16), sa.Computed(ENDED_STATUS_SQL, persisted=stored)),
    )
    for name, columns in LIVE_INDEXES.items():
        op.create_index(
            name,
            "scheduler_runs",
            columns,
            postgresql_where=sa.text("live"),
            sqlite_where=sa.text("live"),
        )
    op.create_index(op.f("ix_scheduler_runs_ended_status"), "scheduler_runs", ["ended_status"])
    if not _sqlite():
        # After the columns: the rows already there, which no start will update, were
        # written anew as full as before; only the pages of new rows keep half free.
        op.execute("ALTER TABLE scheduler_runs SET (fillfactor = 50)")


def downgrade() -> None:
    op.drop_index(op.f("ix_scheduler_runs_ended_status"), table_name="scheduler_runs")
    for name in LIVE_INDEXES:
        op.drop_index(name, table_name="scheduler_runs")
    op.drop_column("scheduler_runs", "ended_status")
    op.drop_column("scheduler_runs", "live")
    for name, columns in STATUS_INDEXES.items():
        op.create_index(name, "scheduler_runs", columns)
    if not _sqlite():
        op.execute("ALTER TABLE scheduler_runs RESET (fillfactor)")
