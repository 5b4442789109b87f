"""A period on a day its job's calendar excludes, on both backends: the claim records
it `skipped` (reason calendar) and gives rise to no event, beside a period of the same
batch that is claimed; a node whose worker waits for it does not start it; a second
node's claim of it changes nothing; a catch-up after an outage over an excluded day
records that day's periods skipped (calendar), not missed; a calendar that ends soon is
one event per job, calendar and last date, however many nodes look."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import structlog

from scheduler.calendars import Calendar, Stored
from scheduler.model import Claim, Due
from scheduler.node import registration as catalog
from scheduler.node.catchup_loop import CatchUp
from scheduler.registry import job
from scheduler.states import Reason
from scheduler.store import claims
from scheduler.store import deliveries as stored_events
from scheduler.store import events as born
from scheduler.store.database import Database
from tests.sql import rows, update

PERIOD = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)


def test_an_excluded_period_is_recorded_skipped_and_never_claimed(database: Database) -> None:
    holiday = Due("greet", PERIOD, 30, 1, excluded=True, start=True)
    workday = Due("greet", PERIOD + timedelta(days=1), 30, 1)
    first = claims.claim(database, [holiday, workday], "node-a")
    assert [(c.period, first.reasons[c.id]) for c in first.skipped] == [(PERIOD, Reason.CALENDAR)]
    assert [c.period for c in first.won] == [workday.period]
    assert first.started == set()
    again = claims.claim(database, [holiday], "node-b")
    assert (again.won, again.skipped) == ([], [])
    (row,) = rows(database, "scheduler_runs", job="greet", period=PERIOD)
    assert (row["status"], row["reason"], row["lease_expires_at"]) == ("skipped", "calendar", None)
    assert stored_events.recent(database, job="greet") == []


def test_a_catch_up_across_an_excluded_day_records_it_skipped_not_missed(
    database: Database,
) -> None:
    """Down from 12:00 on 30 November to 12:01 on 2 December, a job every six hours
    whose calendar (a function) excludes 1 December, its catch-up window a day: the
    pass records all four periods of that day `skipped (calendar)`, the two older than
    the window too, where 30 November 18:00 is missed (window); it claims 2 December's.
    The one event says the one period missed, none of the day off."""
    day_off = date(2026, 12, 1)
    maintenance = Calendar("maintenance", exclude=lambda day: day == day_off)
    report = job("0 */6 * * *", name="report", catchup_window="1d", calendar=maintenance)(
        lambda: None
    )
    catalog.register(database, {"report": report})
    down = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    with database.transaction() as connection:
        update(connection, "scheduler_jobs", {"name": "report"}, first_seen=down)
    claimed: list[Claim] = []
    catch_up = CatchUp(
        database, {"report": report}, "node-a", claimed.append, structlog.get_logger()
    )
    catch_up.run_pass(down + timedelta(days=2, minutes=1))
    recorded = {
        row["period"]: (row["status"], row["reason"])
        for row in rows(database, "scheduler_runs", job="report")
    }
    hours = [down + timedelta(hours=h) for h in range(6, 48 + 1, 6)]
    assert recorded == {
        hours[0]: ("missed", "window"),
        **dict.fromkeys(hours[1:5], ("skipped", "calendar")),
        **dict.fromkeys(hours[5:], ("claimed", None)),
    }
    assert [claim.period for claim in claimed] == hours[5:]
    events = [(row.event.key, row.event.detail) for row in stored_events.recent(database)]
    assert events == [
        ("report/2026-11-30T18:00:00Z/missed", "1 period(s) missed (window): 2026-11-30T18:00:00Z")
    ]


def test_a_calendar_ending_is_one_event_per_job_calendar_and_last_date(database: Database) -> None:
    ending = Stored("holidays", date(2026, 12, 31))
    for _ in range(3):  # three nodes look
        born.calendars_ending(database, [("greet", ending), ("report", ending)])
    born.calendars_ending(database, [("greet", Stored("holidays", date(2027, 12, 31)))])
    events = sorted(
        (row.event.job, row.event.key, row.event.detail or "")
        for row in stored_events.recent(database, limit=10)
    )
    assert [(job, key) for job, key, _ in events] == [
        ("greet", "greet/2026-12-31T00:00:00Z/calendar_ending/holidays"),
        ("greet", "greet/2027-12-31T00:00:00Z/calendar_ending/holidays"),
        ("report", "report/2026-12-31T00:00:00Z/calendar_ending/holidays"),
    ]
    assert events[0][2].startswith("calendar 'holidays' lists days up to 2026-12-31 only")
