"""Failure streaks: how many periods of a job in a row have failed, read where an
outcome is written, and the pause the scheduler makes after too many.

A streak is read from the runs themselves, in period order: the final outcomes just
before a period (a failure or timeout with no attempt to come, or a success; periods
missed, skipped or given up neither lengthen nor end it), counted back to the newest
success and never further than a cap. Nothing else is kept, so nothing can drift: a
streak is what the run rows say. Whether its `failed` event was born is what the events
say (the job's newest `failed` or `recovered` event), so each streak alerts once.
"""

from __future__ import annotations

from datetime import datetime

from scheduler.model import Finish
from scheduler.store.database import Connection
from scheduler.store.fence import RUNS

# How far back a `recovered` event counts the streak it ends.
RECOVERED_CAP = 1000

# An outcome that decides a streak: a success ends it, a final failure lengthens it.
DECISIVE_SQL = """(earlier.ended_status = 'succeeded'
    OR (earlier.ended_status IN ('failed', 'timed_out') AND earlier.retry_at IS NULL))"""


def before_sql(job: str, period: str, cap: str) -> str:
    """How many final failures come right before `period` among the job's runs, back to
    its newest success, counting at most `cap` outcomes (SQL expressions; PostgreSQL
    takes a correlated `cap`, SQLite a parameter)."""
    return f"""(SELECT coalesce(min(decisive.position)
                    FILTER (WHERE decisive.ended_status = 'succeeded') - 1, count(*))
        FROM (SELECT recent.ended_status,
                     row_number() OVER (ORDER BY recent.period DESC) AS position
              FROM (SELECT earlier.ended_status, earlier.period FROM {RUNS} AS earlier
                    WHERE earlier.job = {job} AND earlier.period < {period}
                      AND {DECISIVE_SQL}
                    ORDER BY earlier.period DESC LIMIT {cap}) AS recent) AS decisive)"""


def cap_of(outcome: Finish) -> int:
    """How many earlier outcomes a final failure's streak is counted over: one more than
    any threshold, so that the count is exact up to past it (`== pause_after` is then
    true at one failure only)."""
    return max(outcome.alert_after, outcome.pause_after or 0)


def before(connection: Connection, job: str, period: datetime, cap: int) -> int:
    """`before_sql` for one period (SQLite's form)."""
    found = connection.execute(
        f"SELECT {before_sql(':job', ':period', ':cap')}",
        {"job": job, "period": period, "cap": cap},
    ).scalar()
    return int(found or 0)


def failed_detail(streak: int, detail: str | None) -> str | None:
    """The `failed` event's line: the streak's length, then the error."""
    head = f"{streak} periods failed in a row" if streak > 1 else None
    return "; ".join(part for part in (head, detail) if part) or None


def recovered_detail(streak: int) -> str:
    return f"after {streak} failed period(s) in a row"


def pause_reason(streak: int) -> str:
    return f"paused by the scheduler: {streak} periods failed in a row"
