"""A period on a day its job's calendar excludes, on both backends: the claim records
it `skipped` (reason calendar) and gives rise to no event, beside a period of the same
batch that is claimed; a node whose worker waits for it does not start it; a second
node's claim of it changes nothing; a calendar that ends soon is one event per job,
calendar and last date, however many nodes look."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from scheduler.calendars import Stored
from scheduler.model import Due
from scheduler.states import Reason
from scheduler.store import claims
from scheduler.store import deliveries as stored_events
from scheduler.store import events as born
from scheduler.store.database import Database
from tests.sql import rows

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
