"""Calendars: how one is declared (and refused, naming it and the field), which days it
excludes in which zone, when its dates run out, and what catch-up does with a period on
an excluded day."""

from __future__ import annotations

import io
import json
from datetime import UTC, date, datetime, timedelta

import pytest

from scheduler import Calendar, catchup, job
from scheduler.calendars import CalendarDefinitionError, Stored, ending, stored, stored_text
from scheduler.errors import JobDefinitionError
from scheduler.policy import Policy
from scheduler.states import Reason
from tests.log_capture import configured

HOLIDAYS = Calendar("holidays", dates=["2026-12-25", date(2027, 1, 1)])
WEEKENDS = Calendar("weekends", exclude=lambda day: day.weekday() >= 5)


def test_a_calendar_of_dates_excludes_those_days_and_ends_on_the_last() -> None:
    assert HOLIDAYS.excludes(date(2026, 12, 25))
    assert not HOLIDAYS.excludes(date(2026, 12, 24))
    assert HOLIDAYS.last == date(2027, 1, 1)
    assert WEEKENDS.excludes(date(2026, 12, 5))  # a Saturday
    assert not WEEKENDS.excludes(date(2026, 12, 7))
    assert WEEKENDS.last is None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"name": ""}, "calendar '': name: must be a non-empty string"),
        ({"name": "x"}, "calendar 'x': dates: give either dates=[...] or exclude=f"),
        (
            {"name": "x", "dates": ["2026-12-25"], "exclude": bool},
            "calendar 'x': dates: give either",
        ),
        ({"name": "x", "dates": []}, "calendar 'x': dates: is empty"),
        ({"name": "x", "dates": ["25/12/2026"]}, "calendar 'x': dates: must be dates or"),
        (
            {"name": "x", "dates": [datetime(2026, 12, 25, tzinfo=UTC)]},
            "calendar 'x': dates: takes days, not instants",
        ),
        ({"name": "x", "exclude": "weekends"}, "calendar 'x': exclude: must be a function"),
    ],
)
def test_a_calendar_that_cannot_work_is_refused_naming_it_and_the_field(
    arguments: dict[str, object], message: str
) -> None:
    with pytest.raises(CalendarDefinitionError) as error:
        Calendar(**arguments)  # type: ignore[arg-type]
    assert str(error.value).startswith(message)


def test_a_job_takes_calendars_and_refuses_anything_else() -> None:
    @job(cron="0 9 * * *", name="greet", timezone="Europe/Berlin", calendar=[HOLIDAYS, WEEKENDS])
    def greet() -> None: ...

    assert greet.calendars == (HOLIDAYS, WEEKENDS)
    with pytest.raises(JobDefinitionError, match="job 'bad': calendar: must be a Calendar"):
        job(cron="0 9 * * *", name="bad", calendar=["2026-12-25"])(print)  # type: ignore[list-item]
    with pytest.raises(JobDefinitionError, match="job 'twice': calendar: names a calendar twice"):
        job(cron="0 9 * * *", name="twice", calendar=[HOLIDAYS, HOLIDAYS])(print)


def test_the_day_of_a_period_is_its_day_in_the_jobs_zone() -> None:
    @job(cron="0 * * * *", name="tokyo", timezone="Asia/Tokyo", calendar=HOLIDAYS)
    def tokyo() -> None: ...

    # 2026-12-24T15:00Z is already the 25th in Tokyo; 2026-12-25T15:00Z is the 26th.
    assert tokyo.excluded(datetime(2026, 12, 24, 15, tzinfo=UTC)) is HOLIDAYS
    assert tokyo.excluded(datetime(2026, 12, 24, 14, tzinfo=UTC)) is None
    assert tokyo.excluded(datetime(2026, 12, 25, 15, tzinfo=UTC)) is None
    # A schedule created at run time gives its own zone.
    assert tokyo.excluded(datetime(2026, 12, 25, 15, tzinfo=UTC), "America/New_York") is HOLIDAYS
    assert tokyo.due(datetime(2026, 12, 24, 15, tzinfo=UTC)).excluded
    assert not tokyo.due(datetime(2026, 12, 24, 14, tzinfo=UTC)).excluded


def test_a_calendar_function_that_raises_excludes_nothing_and_says_so() -> None:
    def broken(day: date) -> bool:
        raise KeyError(day)

    @job(cron="0 * * * *", name="fragile", calendar=Calendar("broken", exclude=broken))
    def fragile() -> None: ...

    out = io.StringIO()
    with configured(out):
        assert fragile.excluded(datetime(2026, 12, 25, 9, tzinfo=UTC)) is None
    lines = [json.loads(text) for text in out.getvalue().splitlines()]
    (line,) = [entry for entry in lines if entry["event"] == "calendar_failed"]
    assert (line["job"], line["calendar"], line["day"]) == ("fragile", "broken", "2026-12-25")
    assert line["error"].startswith("KeyError")


def test_a_calendar_warns_from_30_days_before_its_last_date() -> None:
    kept = stored(stored_text([HOLIDAYS, WEEKENDS]))
    assert kept == [Stored("holidays", date(2027, 1, 1)), Stored("weekends", None)]
    assert ending(kept, date(2026, 12, 1)) == []
    assert ending(kept, date(2026, 12, 3)) == [Stored("holidays", date(2027, 1, 1))]
    assert ending(kept, date(2027, 3, 1)) == [Stored("holidays", date(2027, 1, 1))]
    assert stored_text([]) is None


def test_catch_up_skips_the_periods_on_excluded_days_whatever_their_age() -> None:
    now = datetime(2026, 12, 26, 12, tzinfo=UTC)
    hourly = [now - timedelta(hours=n) for n in range(60, 0, -1)]
    on_holiday = {period for period in hourly if period.date() == date(2026, 12, 25)}
    plan = catchup.plan(
        hourly, now, Policy(), excluded=lambda period: HOLIDAYS.excludes(period.date())
    )
    assert {period for period, reason in plan.skip if reason is Reason.CALENDAR} == on_holiday
    assert len(on_holiday) == 24
    assert set(plan.run) | on_holiday | set(plan.missed) == set(hourly)
    assert not set(plan.run) & on_holiday
