"""What the web console reads beyond the commands' views, each in a bounded number of
statements whatever the number of jobs: the recent periods of many jobs at once, the
runs in progress by node, the items of one run."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, FromClause, and_, func, literal, select, true

from scheduler.store.database import Database
from scheduler.store.fence import ACTIVE
from scheduler.store.items import ItemRow, list_items_where
from scheduler.store.schema import UTCDateTime, items, jobs, runs

# Job names sent in one IN list (PostgreSQL and SQLite both take far more; a page asks
# for 100).
NAMES_PER_STATEMENT = 1000
EPOCH = literal(datetime(1970, 1, 1, tzinfo=UTC), UTCDateTime())


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
    """A run claimed or running now, on the node that holds it."""

    job: str
    period: datetime
    id: str
    status: str
    holder: str | None
    started_at: datetime | None


_CELL_COLUMNS = [runs.c[name] for name in Cell.__dataclass_fields__]


def recent_cells(database: Database, names: Sequence[str], per_job: int) -> dict[str, list[Cell]]:
    """The newest `per_job` periods of each named job, oldest first.

    One statement per 1,000 names, reading only those runs (see `_recent`).
    """
    found: dict[str, list[Cell]] = defaultdict(list)
    with database.transaction() as connection:
        for start in range(0, len(names), NAMES_PER_STATEMENT):
            chunk = list(names[start : start + NAMES_PER_STATEMENT])
            recent, on = _recent(database, _CELL_COLUMNS, per_job)
            statement = (
                select(*[recent.c[name] for name in Cell.__dataclass_fields__])
                .select_from(jobs)
                .join(recent, on)
                .where(jobs.c.name.in_(chunk))
                .order_by(recent.c.job, recent.c.period)
            )
            # Fetched at once: psycopg's row-by-row fetch is slow, and a page holds thousands.
            for row in connection.execute(statement).all():
                found[row.job].append(Cell(*row))
    return dict(found)


def jobs_with(
    database: Database, names: Sequence[str], per_job: int, statuses: Collection[str]
) -> set[str]:
    """The named jobs with a period in one of `statuses` among their newest `per_job`:
    the overview's status filter, decided by the database (only names come back)."""
    found: set[str] = set()
    with database.transaction() as connection:
        for start in range(0, len(names), NAMES_PER_STATEMENT):
            chunk = list(names[start : start + NAMES_PER_STATEMENT])
            recent, on = _recent(database, [runs.c.job, runs.c.status], per_job)
            statement = (
                select(recent.c.job)
                .distinct()
                .select_from(jobs)
                .join(recent, on)
                .where(jobs.c.name.in_(chunk), recent.c.status.in_(list(statuses)))
            )
            found.update(connection.execute(statement).scalars())
    return found


def _recent(
    database: Database, columns: Sequence[ColumnElement[object]], per_job: int
) -> tuple[FromClause, ColumnElement[bool]]:
    """What to join to `scheduler_jobs`, and on what, for each job's newest `per_job`
    runs, reading those rows only, never a job's older history.

    PostgreSQL: a LATERAL subquery, one backward scan of the primary key (job, period)
    per job. SQLite has no LATERAL: the runs table itself, on the job and a period from
    its cut-off on (the job's `per_job`-th newest period: one seek of the same index).
    """
    if database.lateral:
        lateral = (
            select(*columns)
            .where(runs.c.job == jobs.c.name)
            .order_by(runs.c.period.desc())
            .limit(per_job)
            .lateral("recent")
        )
        return lateral, true()
    older = runs.alias("older")
    cutoff = (
        select(older.c.period)
        .where(older.c.job == jobs.c.name)
        .order_by(older.c.period.desc())
        .limit(1)
        .offset(per_job - 1)
        .correlate(jobs)
        .scalar_subquery()
    )
    # No cut-off: the job has fewer periods than asked, all are shown.
    return runs, and_(runs.c.job == jobs.c.name, runs.c.period >= func.coalesce(cutoff, EPOCH))


def in_progress(database: Database) -> list[Active]:
    """Every run claimed or running now, oldest period first (what the nodes run)."""
    statement = (
        select(runs.c.job, runs.c.period, runs.c.id, runs.c.status, runs.c.holder)
        .add_columns(runs.c.started_at)
        .where(runs.c.status.in_(ACTIVE))
        .order_by(runs.c.period, runs.c.job)
    )
    with database.transaction() as connection:
        return [Active(**row._mapping) for row in connection.execute(statement)]


def items_of_run(database: Database, run_id: str, limit: int = 200) -> list[ItemRow]:
    """The items an attempt of this run claimed, most recently claimed first."""
    return list_items_where(database, items.c.run_id == run_id, limit)
