"""What the console reads, on both backends: each job's newest periods and no other
job's, the status filter, and a bounded number of statements whatever the jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler.model import Entry
from scheduler.states import Origin, Reason, RunStatus
from scheduler.store import overview
from scheduler.store.database import Database
from scheduler.store.jobs import JobDefinitionRow, register
from scheduler.store.periods import write

START = datetime(2026, 11, 1, tzinfo=UTC)


def seed(database: Database, jobs: int, periods: int) -> list[str]:
    names = [f"job-{n:02d}" for n in range(jobs)]
    register(
        database, [JobDefinitionRow(name, "* * * * *", "UTC", 30, None, 0, 60) for name in names]
    )
    for index, name in enumerate(names):
        entries = [
            Entry(
                START + timedelta(minutes=minute),
                RunStatus.MISSED if (minute + index) % 7 == 0 else RunStatus.SKIPPED,
                Reason.WINDOW if (minute + index) % 7 == 0 else Reason.OVERLAP,
            )
            for minute in range(periods - index)
        ]
        write(database, name, entries, holder="seed", lease_seconds=30, origin=Origin.CATCHUP)
    return names


def test_each_job_gets_its_own_newest_periods_oldest_first(database: Database) -> None:
    names = seed(database, 5, 12)
    cells = overview.recent_cells(database, names[:3], 4)
    assert set(cells) == set(names[:3]), "only the jobs asked for"
    for index, name in enumerate(names[:3]):
        periods = [cell.period for cell in cells[name]]
        newest = START + timedelta(minutes=12 - index - 1)
        assert periods == [newest - timedelta(minutes=n) for n in (3, 2, 1, 0)]
        assert {cell.job for cell in cells[name]} == {name}
    few = overview.recent_cells(database, [names[4]], 50)
    assert len(few[names[4]]) == 8, "a job with fewer periods than asked shows them all"
    assert overview.recent_cells(database, [], 50) == {}


def test_the_status_filter_looks_at_the_newest_periods_only(database: Database) -> None:
    names = ["long-ago", "lately"]
    register(
        database, [JobDefinitionRow(name, "* * * * *", "UTC", 30, None, 0, 60) for name in names]
    )
    for name, missed_at in (("long-ago", 0), ("lately", 3)):
        entries = [
            Entry(
                START + timedelta(minutes=minute),
                RunStatus.MISSED if minute == missed_at else RunStatus.SKIPPED,
                Reason.WINDOW if minute == missed_at else Reason.OVERLAP,
            )
            for minute in range(4)
        ]
        write(database, name, entries, holder="seed", lease_seconds=30, origin=Origin.CATCHUP)
    assert overview.jobs_with(database, names, 2, ["missed"]) == {"lately"}
    assert overview.jobs_with(database, names, 4, ["missed"]) == {"long-ago", "lately"}
    assert overview.jobs_with(database, names, 4, ["missed", "skipped"]) == set(names)
    assert overview.jobs_with(database, names, 50, ["failed"]) == set()


def test_the_statements_do_not_grow_with_the_jobs(database: Database) -> None:
    counts = []
    for jobs in (3, 30):
        names = [f"job-{n:02d}" for n in range(jobs)]
        if jobs == 3:
            seed(database, 30, 5)
        with database.recording() as sent:
            overview.recent_cells(database, names, 50)
            overview.jobs_with(database, names, 50, ["missed"])
        counts.append(len([statement for statement in sent if "scheduler_runs" in statement]))
    assert counts[0] == counts[1] == 2
