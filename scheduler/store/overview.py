"""What the web console reads beyond the commands' views, each in a bounded number of
statements whatever the number of jobs: the recent periods of many jobs at once, the
runs in progress by node, the items of one run."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from scheduler.store.connection import in_list
from scheduler.store.database import Database
from scheduler.store.fence import ACTIVE_SQL, RUNS
from scheduler.store.items import ItemRow, list_items_where
from scheduler.store.jobs import JOBS

# Job names sent in one IN list (PostgreSQL and SQLite both take far more; a page asks
# for 100).
NAMES_PER_STATEMENT = 1000


@dataclass(frozen=True)
class Cell:
    """One period of a job as a grid cell shows it."""

    job: str
    period: datetime
    id: str
    status: str
    reason: str | None
    attempt: int
    origin: str
    duration_ms: int | None


@dataclass(frozen=True)
class Active:
    """A run claimed or running now, on the node that holds it (or `timed_out`, its
    function still running there)."""

    job: str
    period: datetime
    id: str
    status: str
    holder: str | None
    started_at: datetime | None


_CELL_COLUMNS = tuple(Cell.__dataclass_fields__)


def recent_cells(database: Database, names: Sequence[str], per_job: int) -> dict[str, list[Cell]]:
    """The newest `per_job` periods of each named job, oldest first.

    One statement per 1,000 names, reading only those runs (see `_recent`).
    """
    found: dict[str, list[Cell]] = defaultdict(list)
    columns = ", ".join(f"recent.{name}" for name in _CELL_COLUMNS)
    with database.transaction() as connection:
        for start in range(0, len(names), NAMES_PER_STATEMENT):
            listed, parameters = in_list("name", list(names[start : start + NAMES_PER_STATEMENT]))
            statement = f"""
                SELECT {columns} FROM {JOBS} AS job {_recent(database, _CELL_COLUMNS)}
                WHERE job.name IN ({listed}) ORDER BY recent.job, recent.period
            """
            rows = connection.execute(statement, {**parameters, "per_job": per_job})
            for row in rows:
                found[row.job].append(Cell(*row))
    return dict(found)


def jobs_with(
    database: Database, names: Sequence[str], per_job: int, statuses: Collection[str]
) -> set[str]:
    """The named jobs with a period in one of `statuses` among their newest `per_job`:
    the overview's status filter, decided by the database (only names come back)."""
    found: set[str] = set()
    wanted, wanted_parameters = in_list("status", list(statuses))
    with database.transaction() as connection:
        for start in range(0, len(names), NAMES_PER_STATEMENT):
            listed, parameters = in_list("name", list(names[start : start + NAMES_PER_STATEMENT]))
            statement = f"""
                SELECT DISTINCT recent.job FROM {JOBS} AS job
                {_recent(database, ("job", "status"))}
                WHERE job.name IN ({listed}) AND recent.status IN ({wanted})
            """
            rows = connection.execute(
                statement, {**parameters, **wanted_parameters, "per_job": per_job}
            )
            found.update(rows.scalars())
    return found


def _recent(database: Database, columns: Sequence[str]) -> str:
    """What to join to `scheduler_jobs AS job`, as `recent`, for each job's newest
    `:per_job` runs, reading those rows only, never a job's older history.

    PostgreSQL: a LATERAL subquery, one backward scan of the primary key (job, period)
    per job. SQLite has no LATERAL: the runs table itself, on the job and a period from
    its cut-off on (the job's `per_job`-th newest period: one seek of the same index; a
    job with fewer periods than asked has no cut-off, and shows them all).
    """
    if database.lateral:
        return f"""CROSS JOIN LATERAL (
            SELECT {", ".join(columns)} FROM {RUNS} AS run WHERE run.job = job.name
            ORDER BY run.period DESC LIMIT :per_job) AS recent"""
    cutoff = f"""(SELECT older.period FROM {RUNS} AS older WHERE older.job = job.name
                  ORDER BY older.period DESC LIMIT 1 OFFSET :per_job - 1)"""
    return f"""JOIN {RUNS} AS recent
        ON recent.job = job.name AND recent.period >= coalesce({cutoff}, '')"""


def in_progress(database: Database) -> list[Active]:
    """Every run claimed or running now, oldest period first (what the nodes run), and
    those timed out whose function still runs in its thread (their lease still held)."""
    statement = f"""
        SELECT job, period, id, status, holder, started_at FROM {RUNS}
        WHERE live AND (status IN ({ACTIVE_SQL})
            OR (status = 'timed_out' AND lease_expires_at > {database.now}))
        ORDER BY period, job
    """
    with database.transaction() as connection:
        return [Active(**row._asdict()) for row in connection.execute(statement)]


def items_of_run(database: Database, run_id: str, limit: int = 200) -> list[ItemRow]:
    """The items an attempt of this run claimed, most recently claimed first."""
    return list_items_where(database, "item.run_id = :run_id", {"run_id": run_id}, limit)
