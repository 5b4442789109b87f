"""Reading what processes left behind: the runs table and the jobs' own execution logs."""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from scheduler.schedules import Schedules
from scheduler.store import schedules as stored
from scheduler.store.database import open_database
from tests.acceptance.processes import _alive
from tests.sql import rows


def run_rows(database_url: str, job: str) -> list[dict[str, Any]]:
    database = open_database(database_url)
    try:
        return rows(database, "scheduler_runs", order_by="period", job=job)
    finally:
        database.dispose()


def attempt_rows(
    database_url: str, *, job: str | None = None, run_id: str | None = None
) -> list[dict[str, Any]]:
    """The superseded attempts kept in scheduler_attempts, oldest first."""
    where = {name: value for name, value in (("job", job), ("run_id", run_id)) if value is not None}
    database = open_database(database_url)
    try:
        return rows(database, "scheduler_attempts", order_by="attempt", **where)
    finally:
        database.dispose()


def table_counts(database_url: str) -> dict[str, int]:
    database = open_database(database_url)
    try:
        with database.transaction() as connection:
            return {
                table: int(connection.execute(f"SELECT count(*) FROM {table}").scalar())
                for table in ("scheduler_runs", "scheduler_jobs", "scheduler_nodes")
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
    return _alive(pid)


def first_seen(database_url: str, job: str) -> datetime:
    """When a node first registered the job: the start of the history it is owed."""
    database = open_database(database_url)
    try:
        (found,) = rows(database, "scheduler_jobs", name=job)
    finally:
        database.dispose()
    moment = found["first_seen"]
    assert isinstance(moment, datetime)
    return moment


def notes(log: Path) -> list[list[str]]:
    """The words of each line a job noted (`jobmods.evidence.note`)."""
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def first_pid(log: Path, timeout: float = 15.0) -> int:
    """The pid a body noted first (a child process may still be importing the job)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [int(w[3].split("=")[1]) for w in notes(log) if w[3].startswith("pid=")]
        if pids:
            return pids[0]
        time.sleep(0.02)
    raise AssertionError("the body never noted its pid")


def unfired_schedule(database_url: str, key: str, job: str, seconds: float) -> datetime:
    """Create an every-second schedule of `job` (a template a node registered) as if no
    node had fired it for `seconds`: its periods since then are owed. The first of them."""
    database = open_database(database_url)
    try:
        Schedules(database).create(key, job, cron="* * * * * *", args={"tenant": 1})
        with database.transaction() as connection:
            down = stored.clock(connection).replace(microsecond=0) - timedelta(seconds=seconds)
            connection.execute(
                "UPDATE scheduler_schedules SET next_due_at = :down WHERE key = :key",
                {"down": down, "key": key},
            )
        return down
    finally:
        database.dispose()
