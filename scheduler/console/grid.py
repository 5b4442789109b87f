"""The console's grids and charts as plain data, from rows already read: pure functions,
so the templates only lay them out."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from html import escape
from typing import Any

from markupsafe import Markup

from scheduler.cron import Schedule, parse_schedule
from scheduler.errors import ScheduleError
from scheduler.model import JobRow
from scheduler.states import RunStatus, status_text
from scheduler.store.overview import Cell

UPCOMING = "upcoming"
# The legend's order: outcomes first, then what is under way, then what is to come.
LEGEND = (
    RunStatus.SUCCEEDED,
    RunStatus.FAILED,
    RunStatus.TIMED_OUT,
    RunStatus.ABANDONED,
    RunStatus.SKIPPED,
    RunStatus.MISSED,
    RunStatus.DEFERRED,
    RunStatus.RUNNING,
    RunStatus.QUEUED,
    RunStatus.CLAIMED,
    UPCOMING,
)
# What a status filter may name: a status of a recent period, or the job's state.
FILTERS = (*LEGEND[:-1], "paused")


@dataclass(frozen=True)
class CellView:
    status: str
    title: str
    href: str | None


@dataclass(frozen=True)
class GridRow:
    job: JobRow
    next_period: datetime | None
    cells: list[CellView]

    @property
    def last(self) -> CellView | None:
        """Its newest period that is not still to come."""
        return next((view for view in reversed(self.cells) if view.status != UPCOMING), None)

    @property
    def strip(self) -> Markup:
        """The cells as markup, every attribute escaped here: a page of 100 jobs has 5,000
        cells, and escaping each value in the template took a third of its time."""
        return Markup("".join(map(_cell_html, self.cells)))  # noqa: S704 - escaped below


def _cell_html(view: CellView) -> str:
    status, title = escape(view.status, quote=True), escape(view.title, quote=True)
    if view.href is None:
        return f'<i class="c s-{status}" title="{title}"></i>'
    return f'<a class="c s-{status}" href="{escape(view.href, quote=True)}" title="{title}"></a>'


@dataclass(frozen=True)
class Bar:
    x: int
    y: int
    width: int
    height: int
    status: str
    title: str


@lru_cache(maxsize=4096)
def schedule_of(cron: str, timezone: str) -> Schedule | None:
    """A stored schedule, parsed once per process; None if this version cannot read it."""
    try:
        return parse_schedule(cron, timezone)
    except ScheduleError:
        return None


def upcoming(job: JobRow, now: datetime, count: int) -> list[datetime]:
    schedule = schedule_of(job.cron, job.timezone)
    found: list[datetime] = []
    moment: datetime | None = now
    while schedule is not None and moment is not None and len(found) < count:
        moment = schedule.next_after(moment)
        if moment is not None:
            found.append(moment)
    return found


def utc(moment: datetime | None) -> str:
    """An instant to the second in UTC (in full when it has a fraction: a manual run)."""
    if moment is None:
        return "-"
    if moment.tzinfo is not UTC:
        moment = moment.astimezone(UTC)
    # isoformat, not strftime: much faster, and the overview formats thousands a page.
    return moment.isoformat().replace("+00:00", "Z")


def arguments(values: dict[str, Any], indent: int | None = None) -> str:
    """A schedule's arguments as the JSON it stores, text for the template to escape:
    markup an application put in an argument shows as written."""
    return json.dumps(values, sort_keys=True, ensure_ascii=False, indent=indent)


def cell(row: Cell) -> CellView:
    title = f"{utc(row.period)} {status_text(row.status, row.reason)}"
    if row.attempt > 1:
        title += f", attempt {row.attempt}"
    return CellView(row.status, title, f"/runs/{row.id}")


def grid_row(job: JobRow, cells: Sequence[Cell], now: datetime, *, ahead: int) -> GridRow:
    """A job's recent periods oldest first, then its next `ahead` periods."""
    coming = upcoming(job, now, max(ahead, 1))
    views = [cell(row) for row in cells]
    views += [CellView(UPCOMING, f"{utc(moment)} upcoming", None) for moment in coming[:ahead]]
    return GridRow(job, coming[0] if coming else None, views)


# The overview's orders: by name, soonest next period first, or the worst newest
# period first (what needs looking at on a page of hundreds of jobs).
SORTS = ("name", "next", "last")
_WORST_FIRST = (
    RunStatus.FAILED,
    RunStatus.TIMED_OUT,
    RunStatus.ABANDONED,
    RunStatus.MISSED,
    RunStatus.DEFERRED,
    RunStatus.SKIPPED,
    RunStatus.RUNNING,
    RunStatus.QUEUED,
    RunStatus.CLAIMED,
    RunStatus.SUCCEEDED,
)


def sort_key(sort: str, job: JobRow, newest: Cell | None, now: datetime) -> tuple[int | float, str]:
    """Where `job` goes in the overview's `sort` order (its name breaks ties)."""
    if sort == "next":
        coming = upcoming(job, now, 1)
        return (coming[0].timestamp() if coming else float("inf"), job.name)
    if sort == "last":
        statuses = [str(status) for status in _WORST_FIRST]
        status = newest.status if newest is not None else ""
        return (statuses.index(status) if status in statuses else len(statuses), job.name)
    return (0, job.name)


def matches(job: JobRow, cells: Sequence[Cell], name: str, statuses: Collection[str]) -> bool:
    """The overview's filters: a part of the name (any case), and any of the statuses
    among the job's recent periods (or `paused` for a paused job)."""
    if name and name.lower() not in job.name.lower():
        return False
    if not statuses:
        return True
    if "paused" in statuses and job.paused:
        return True
    return any(row.status in statuses for row in cells)


def duration_bars(cells: Sequence[Cell], width: int, height: int) -> list[Bar]:
    """One bar per period that ran, its height the run's duration against the longest."""
    ran = [row for row in cells if row.duration_ms is not None]
    if not ran:
        return []
    longest = max(row.duration_ms or 0 for row in ran) or 1
    step = max(width // len(ran), 2)
    bars = []
    for index, row in enumerate(ran):
        tall = max(round((row.duration_ms or 0) / longest * height), 1)
        title = f"{utc(row.period)} {row.status}: {row.duration_ms} ms"
        bars.append(Bar(index * step, height - tall, max(step - 1, 1), tall, row.status, title))
    return bars
