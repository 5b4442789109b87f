"""Reading what processes left behind: the runs table and the jobs' own execution logs."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from scheduler.store.database import open_database
from scheduler.store.schema import attempts, jobs, nodes, runs


def run_rows(database_url: str, job: str) -> list[dict[str, Any]]:
    database = open_database(database_url)
    try:
        with database.transaction() as connection:
            result = connection.execute(
                select(runs).where(runs.c.job == job).order_by(runs.c.period)
            )
            return [dict(row._mapping) for row in result]
    finally:
        database.dispose()


def attempt_rows(
    database_url: str, *, job: str | None = None, run_id: str | None = None
) -> list[dict[str, Any]]:
    """The superseded attempts kept in scheduler_attempts, oldest first."""
    statement = select(attempts).order_by(attempts.c.attempt)
    if job is not None:
        statement = statement.where(attempts.c.job == job)
    if run_id is not None:
        statement = statement.where(attempts.c.run_id == run_id)
    database = open_database(database_url)
    try:
        with database.transaction() as connection:
            return [dict(row._mapping) for row in connection.execute(statement)]
    finally:
        database.dispose()


def table_counts(database_url: str) -> dict[str, int]:
    database = open_database(database_url)
    try:
        with database.transaction() as connection:
            return {
                table.name: int(
                    connection.execute(select(func.count()).select_from(table)).scalar_one()
                )
                for table in (runs, jobs, nodes)
            }
    finally:
        database.dispose()


def executions(path: Path) -> Counter[str]:
    """How many times the job body ran for each period, from its own log file."""
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(line.split()[0] for line in lines)


def missing_seconds(periods: list[datetime]) -> list[datetime]:
    """Every whole second between the first and last period that has no period."""
    if not periods:
        return []
    present = set(periods)
    first, last = min(periods), max(periods)
    span = int((last - first).total_seconds())
    return [
        first + timedelta(seconds=n)
        for n in range(span + 1)
        if first + timedelta(seconds=n) not in present
    ]


def process_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def first_seen(database_url: str, job: str) -> datetime:
    """When a node first registered the job: the start of the history it is owed."""
    database = open_database(database_url)
    try:
        with database.transaction() as connection:
            moment = connection.execute(
                select(jobs.c.first_seen).where(jobs.c.name == job)
            ).scalar_one()
    finally:
        database.dispose()
    assert isinstance(moment, datetime)
    return moment
