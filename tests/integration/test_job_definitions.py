"""The jobs table as a node writes it at start."""

from __future__ import annotations

from scheduler.model import JobRow
from scheduler.store import jobs as stored_jobs
from scheduler.store.database import Database


def _definition(name: str, cron: str = "* * * * *") -> stored_jobs.JobDefinitionRow:
    return stored_jobs.JobDefinitionRow(name, cron, "UTC", 30.0, None, 0, 60.0)


def _rows(database: Database) -> dict[str, JobRow]:
    return {row.name: row for row in stored_jobs.all_jobs(database)}


def test_jobs_registered_together_carry_one_instant(database: Database) -> None:
    """A node's jobs are written in one statement, so they were seen at one instant, on
    SQLite as on PostgreSQL (whose `now()` is the transaction's): a read-only command
    that groups jobs by when a node last saw them finds them together."""
    stored_jobs.register(database, [_definition(f"job-{n}") for n in range(50)])
    rows = _rows(database)
    assert len(rows) == 50
    assert len({row.first_seen for row in rows.values()}) == 1
    assert len({row.last_seen for row in rows.values()}) == 1

    stored_jobs.register(database, [_definition("job-0", "0 * * * *"), _definition("job-1")])
    again = _rows(database)
    assert again["job-0"].last_seen == again["job-1"].last_seen > rows["job-0"].last_seen
    assert again["job-0"].first_seen == rows["job-0"].first_seen
    assert (again["job-0"].cron, again["job-0"].previous_cron) == ("0 * * * *", "* * * * *")
    assert again["job-1"].previous_cron is None
