"""Calendars: days on which a job's periods are not run (holidays, a maintenance window,
weekends for a job whose cron cannot say so).

A period falls on the day its instant has in the job's time zone (a schedule created at
run time: the schedule's zone). A period on an excluded day is recorded `skipped`
(reason `calendar`) by whichever node comes to it, never run and never reported as
missed: every node decides the same, from the same code, and the row's primary key
keeps the record single.

A calendar of dates ends: past its last date it excludes nothing, so a list seeded for
one year silently turns "skip" into "run" the next. Its last date is stored with the
job, and a node (and `scheduler check`) warns from 30 days before it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from scheduler.errors import JobDefinitionError, UserError

# How long before a calendar's last date the jobs that use it warn.
ENDING_WARNING = timedelta(days=30)
NAME_LIMIT = 100


class CalendarDefinitionError(UserError):
    """A calendar that cannot work; the message names it and the field."""

    def __init__(self, name: str, field: str, message: str) -> None:
        super().__init__(f"calendar {name!r}: {field}: {message}")
        self.name = name
        self.field = field


@dataclass(frozen=True)
class Calendar:
    """Days a job does not run: `dates` (a list of days, e.g. holidays) or `exclude` (a
    function of a `date`, True for a day not to run). Give it a name: the logs, `jobs`,
    the console and the warning that its dates run out say it."""

    name: str
    dates: frozenset[date] = field(default_factory=frozenset)
    exclude: Callable[[date], bool] | None = None

    def __init__(
        self,
        name: str,
        *,
        dates: Iterable[date | str] | None = None,
        exclude: Callable[[date], bool] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip() or len(name) > NAME_LIMIT:
            raise CalendarDefinitionError(
                str(name), "name", f"must be a non-empty string of ≤ {NAME_LIMIT} characters"
            )
        if (dates is None) == (exclude is None):
            raise CalendarDefinitionError(name, "dates", "give either dates=[...] or exclude=f")
        if exclude is not None and not callable(exclude):
            raise CalendarDefinitionError(
                name, "exclude", f"must be a function of a date, got {exclude!r}"
            )
        days = frozenset(_day(name, value) for value in dates) if dates is not None else None
        if days is not None and not days:
            raise CalendarDefinitionError(name, "dates", "is empty: it would exclude nothing")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dates", days or frozenset())
        object.__setattr__(self, "exclude", exclude)

    @property
    def last(self) -> date | None:
        """The last date of a calendar of dates (None for a function: it never ends)."""
        return max(self.dates) if self.dates else None

    def excludes(self, day: date) -> bool:
        """Whether the job does not run on `day`. A function that raises excludes nothing
        (the period runs): a calendar's bug never silently loses a period."""
        if self.exclude is None:
            return day in self.dates
        return bool(self.exclude(day))


def _day(name: str, value: object) -> date:
    if isinstance(value, datetime):
        raise CalendarDefinitionError(name, "dates", f"takes days, not instants: {value!r}")
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
    raise CalendarDefinitionError(
        name, "dates", f"must be dates or 'YYYY-MM-DD' strings, got {value!r}"
    )


def job_calendars(job: str, value: object) -> tuple[Calendar, ...]:
    """`@job(calendar=...)`: one Calendar or a list of them, checked with the job's name."""
    if value is None:
        return ()
    given = list(value) if isinstance(value, list | tuple) else [value]
    listed: list[Calendar] = []
    for calendar in given:
        if not isinstance(calendar, Calendar):
            raise JobDefinitionError(
                job,
                "calendar",
                f"must be a Calendar (scheduler.calendars) or a list of them, got {calendar!r}",
            )
        listed.append(calendar)
    names = [calendar.name for calendar in listed]
    if len(set(names)) != len(names):
        raise JobDefinitionError(job, "calendar", f"names a calendar twice: {names}")
    return tuple(listed)


@dataclass(frozen=True)
class Stored:
    """A calendar as the jobs table keeps it, for `check` and the views."""

    name: str
    last: date | None


def stored_text(calendars: Sequence[Calendar]) -> str | None:
    """The job's calendars as JSON for its row (None without any)."""
    if not calendars:
        return None
    return json.dumps(
        [{"name": c.name, "last": c.last.isoformat() if c.last else None} for c in calendars]
    )


def stored(text: str | None) -> list[Stored]:
    """The calendars a job's row names."""
    if not text:
        return []
    return [
        Stored(entry["name"], date.fromisoformat(entry["last"]) if entry["last"] else None)
        for entry in json.loads(text)
    ]


def ending_text(calendar: Stored) -> str:
    """What the warning says of a calendar whose dates run out."""
    return (
        f"calendar {calendar.name!r} lists days up to {calendar.last} only: after that "
        "the job runs on every day its schedule says; add the next dates"
    )


def ending(calendars: Iterable[Stored], today: date) -> list[Stored]:
    """Those whose last date comes within ENDING_WARNING of `today` (or has passed)."""
    return [
        calendar
        for calendar in calendars
        if calendar.last is not None and calendar.last < today + ENDING_WARNING
    ]
