"""What the web console reads beyond the commands' views, each in a bounded number of
statements whatever the number of jobs: the recent periods of many jobs at once, the
runs in progress by node, the items of one run."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import and_, func, literal, select

from scheduler.store.database import Database
from scheduler.store.items import ItemRow, list_items_where
from scheduler.store.runs import ACTIVE
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

    One statement per 1,000 names. Each job's cut-off (its `per_job`-th newest period)
    is one index seek on the primary key (job, period), and the rows after it another
    range of the same index, so a job's older history is never read.
    """
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
    found: dict[str, list[Cell]] = defaultdict(list)
    with database.transaction() as connection:
        for start in range(0, len(names), NAMES_PER_STATEMENT):
            chunk = list(names[start : start + NAMES_PER_STATEMENT])
            statement = (
                select(*_CELL_COLUMNS)
                .select_from(jobs)
                .join(
                    runs,
                    # No cut-off: the job has fewer periods than asked, all are shown.
                    and_(runs.c.job == jobs.c.name, runs.c.period >= func.coalesce(cutoff, EPOCH)),
                )
                .where(jobs.c.name.in_(chunk))
                .order_by(runs.c.job, runs.c.period)
            )
            for row in connection.execute(statement):
                found[row.job].append(Cell(**row._mapping))
    return dict(found)


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
