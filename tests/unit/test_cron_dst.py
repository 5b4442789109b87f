"""DST: schedules in a zone with daylight saving, checked against a minute-by-minute oracle.

The rule (DESIGN.md, "DST"): a fixed hour runs at the first occurrence of a repeated time
and at the first instant after a gap; an hour that is `*` or a step follows elapsed time.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections import Counter
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.cron import parse_schedule

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
ZONES = [
    "Europe/Stockholm",
    "America/New_York",
    "America/Santiago",  # changes at midnight
    "Australia/Sydney",
    "Australia/Lord_Howe",  # a 30-minute shift
]
WHOLE_HOUR_ZONES = ZONES[:4]


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[arg-type, misc]


@functools.cache
def transitions(zone_name: str, year: int) -> tuple[datetime, ...]:
    """The instants the zone's offset changes in a year: hourly probes, then to the minute."""
    zone = ZoneInfo(zone_name)
    found = []
    moment = at(year, 1, 1)
    while moment.year == year:
        following = moment + HOUR
        if moment.astimezone(zone).utcoffset() != following.astimezone(zone).utcoffset():
            probe = moment
            while probe.astimezone(zone).utcoffset() == moment.astimezone(zone).utcoffset():
                probe += MINUTE
            found.append(probe)
        moment = following
    return tuple(found)


class Oracle:
    """Wall-clock times of every UTC minute around a transition, read literally."""

    def __init__(self, zone_name: str, low: datetime, high: datetime) -> None:
        self.zone = ZoneInfo(zone_name)
        self.instants = [low + n * MINUTE for n in range(int((high - low) / MINUTE) + 1)]
        self.walls = [u.astimezone(self.zone).replace(tzinfo=None) for u in self.instants]
        running: list[datetime] = []
        for wall in self.walls:
            running.append(max(wall, running[-1]) if running else wall)
        self.highest_wall_so_far = running

    def first_at_or_after(self, wall: datetime) -> datetime | None:
        """The first instant whose wall-clock time is >= `wall`: the first occurrence of
        a repeated time, the end of the gap for a missing one (None past the window)."""
        index = bisect.bisect_left(self.highest_wall_so_far, wall)
        return self.instants[index] if index < len(self.instants) else None

    def elapsed_periods(self, minutes: set[int], hours: set[int]) -> list[datetime]:
        return [
            u
            for u, wall in zip(self.instants, self.walls, strict=True)
            if wall.minute in minutes and wall.hour in hours
        ]

    def fixed_periods(self, minutes: set[int], hours: set[int]) -> list[datetime]:
        """Inside the window only: the first and last instants stand for walls beyond it."""
        days = sorted({wall.date() for wall in self.walls})
        walls = [datetime.combine(day, time(h, m)) for day in days for h in hours for m in minutes]
        found = {self.first_at_or_after(wall) for wall in walls}
        return sorted(
            u for u in found if u is not None and self.instants[0] < u < self.instants[-1]
        )

    def day_bounds(self, day: date) -> tuple[datetime, datetime]:
        """The UTC instants a local day starts and ends (its midnight may not exist)."""
        start = self.first_at_or_after(datetime.combine(day, time()))
        end = self.first_at_or_after(datetime.combine(day + timedelta(days=1), time()))
        assert start is not None
        assert end is not None
        return start, end


def local_dates(zone_name: str, instants: list[datetime]) -> Counter[date]:
    return Counter(u.astimezone(ZoneInfo(zone_name)).date() for u in instants)


def check_shape(found: list[datetime]) -> None:
    assert all(a < b for a, b in itertools.pairwise(found)), "strictly increasing"
    assert all(p.tzinfo is UTC and p.microsecond == 0 for p in found)


def around(zone_name: str, year: int, index: int) -> tuple[datetime, datetime, datetime]:
    changes = transitions(zone_name, year)
    change = changes[index % len(changes)]
    return change, change - timedelta(hours=40), change + timedelta(hours=40)


def change_day(zone_name: str, change: datetime) -> date:
    """The local date that loses or repeats time: the first missing or repeated wall time."""
    zone = ZoneInfo(zone_name)
    just_before = (change - MINUTE).astimezone(zone).replace(tzinfo=None) + MINUTE
    return min(just_before, change.astimezone(zone).replace(tzinfo=None)).date()


CHANGES = st.tuples(
    st.sampled_from(ZONES), st.integers(min_value=2020, max_value=2030), st.integers(0, 1)
)


# --- properties -------------------------------------------------------------------------


@settings(deadline=None, max_examples=100)
@given(
    change=CHANGES,
    minute=st.sampled_from([0, 15, 30, 45]) | st.integers(0, 59),
    hour=st.sampled_from([0, 1, 2, 3, 23]) | st.integers(0, 23),  # where the changes are
)
def test_a_fixed_time_runs_once_every_local_day(
    change: tuple[str, int, int], minute: int, hour: int
) -> None:
    zone_name, year, index = change
    instant, low, high = around(zone_name, year, index)
    oracle = Oracle(zone_name, low - HOUR, high + HOUR)
    found = list(parse_schedule(f"{minute} {hour} * * *", zone_name).periods_between(low, high))

    check_shape(found)
    assert found == [p for p in oracle.fixed_periods({minute}, {hour}) if low < p <= high]
    whole_days = sorted({w.date() for w in oracle.walls})[1:-1]
    counts = local_dates(zone_name, found)
    assert all(counts[day] == 1 for day in whole_days)
    assert change_day(zone_name, instant) in whole_days

    gap_start = (instant - MINUTE).astimezone(oracle.zone).replace(tzinfo=None) + MINUTE
    gap_end = instant.astimezone(oracle.zone).replace(tzinfo=None)
    walls = {datetime.combine(d, time(hour, minute)) for d in (gap_start.date(), gap_end.date())}
    if any(gap_start <= wall < gap_end for wall in walls):  # the time does not exist
        assert instant in found  # so it runs at the first instant after the gap


@settings(deadline=None, max_examples=100)
@given(
    change=CHANGES,
    fields=st.sampled_from(
        [
            ("{m} * * * *", None, None),
            ("*/15 * * * *", {0, 15, 30, 45}, None),
            ("0 */2 * * *", {0}, set(range(0, 24, 2))),
            ("{m} */3 * * *", None, set(range(0, 24, 3))),
            ("{m} 1-23/2 * * *", None, set(range(1, 24, 2))),
        ]
    ),
    minute=st.integers(0, 59),
)
def test_a_wildcard_hour_follows_elapsed_time(
    change: tuple[str, int, int],
    fields: tuple[str, set[int] | None, set[int] | None],
    minute: int,
) -> None:
    zone_name, year, index = change
    _, low, high = around(zone_name, year, index)
    text, minutes, hours = fields
    oracle = Oracle(zone_name, low, high)
    found = list(parse_schedule(text.format(m=minute), zone_name).periods_between(low, high))

    check_shape(found)
    expected = oracle.elapsed_periods(minutes or {minute}, hours or set(range(24)))
    assert found == [p for p in expected if low < p <= high]


@settings(deadline=None, max_examples=60)
@given(change=CHANGES, minute=st.integers(0, 59))
def test_hourly_runs_as_often_as_the_day_has_hours(
    change: tuple[str, int, int], minute: int
) -> None:
    zone_name, year, index = change
    instant, low, high = around(zone_name, year, index)
    oracle = Oracle(zone_name, low, high)
    found = list(parse_schedule(f"{minute} * * * *", zone_name).periods_between(low, high))
    start, end = oracle.day_bounds(change_day(zone_name, instant))
    hours_that_day = (end - start) / HOUR
    in_day = [p for p in found if start <= p < end]

    if zone_name in WHOLE_HOUR_ZONES:
        assert hours_that_day in (23, 25)
        assert len(in_day) == hours_that_day
        assert all(b - a == HOUR for a, b in itertools.pairwise(found))
    else:  # Lord Howe: 23.5 or 24.5 hours; the minute decides whether it meets the shift
        assert hours_that_day in (23.5, 24.5)
        assert len(in_day) in (23, 24, 25)
        assert {b - a for a, b in itertools.pairwise(found)} <= {
            HOUR / 2,
            HOUR,
            HOUR * 1.5,
        }


@settings(deadline=None, max_examples=40)
@given(change=CHANGES, step=st.sampled_from([1, 5, 10, 15, 30]))
def test_a_stepped_minute_ticks_evenly_across_the_change(
    change: tuple[str, int, int], step: int
) -> None:
    zone_name, year, index = change
    _, low, high = around(zone_name, year, index)
    found = list(parse_schedule(f"*/{step} * * * *", zone_name).periods_between(low, high))
    # Every shift is a multiple of 30 minutes, so a step dividing 30 never notices it.
    assert {b - a for a, b in itertools.pairwise(found)} == {timedelta(minutes=step)}


@settings(deadline=None, max_examples=100)
@given(
    change=CHANGES,
    expression=st.sampled_from(
        ["30 2 * * *", "0 0 * * *", "* 2 * * *", "*/15 1,2 * * *", "0 * * * *", "*/20 * * * *"]
    ),
    offset_minutes=st.integers(-600, 600),
    seconds=st.integers(0, 59),
)
def test_next_after_and_latest_agree_with_the_walk(
    change: tuple[str, int, int], expression: str, offset_minutes: int, seconds: int
) -> None:
    zone_name, year, index = change
    instant, low, high = around(zone_name, year, index)
    schedule = parse_schedule(expression, zone_name)
    walk = list(schedule.periods_between(low, high))
    probe = instant + timedelta(minutes=offset_minutes, seconds=seconds)
    following = [p for p in walk if p > probe]
    preceding = [p for p in walk if p <= probe]
    assert schedule.next_after(probe) == following[0]
    assert schedule.latest_at_or_before(probe) == preceding[-1]


# --- the documented examples --------------------------------------------------------------


def on_local_day(expression: str, zone_name: str, day: date) -> list[datetime]:
    zone = ZoneInfo(zone_name)
    start = datetime.combine(day, time(), zone) - timedelta(hours=3)
    found = parse_schedule(expression, zone_name).periods_between(start, start + timedelta(1.3))
    return [p for p in found if p.astimezone(zone).date() == day]


STOCKHOLM = "Europe/Stockholm"
SPRING = date(2026, 3, 29)  # 02:00 CET -> 03:00 CEST at 01:00Z
AUTUMN = date(2026, 10, 25)  # 03:00 CEST -> 02:00 CET at 01:00Z


def test_stockholm_missing_time_runs_when_the_gap_ends() -> None:
    assert on_local_day("30 2 * * *", STOCKHOLM, SPRING) == [at(2026, 3, 29, 1)]
    assert on_local_day("0 30 2 * * *", STOCKHOLM, SPRING) == [at(2026, 3, 29, 1)]
    assert parse_schedule("30 2 * * *", STOCKHOLM).next_after(at(2026, 3, 29, 0, 59, 59)) == at(
        2026, 3, 29, 1
    )
    assert parse_schedule("30 2 * * *", STOCKHOLM).next_after(at(2026, 3, 29, 1)) == at(
        2026, 3, 30, 0, 30
    )


def test_stockholm_several_missing_times_are_one_period() -> None:
    assert on_local_day("0 2,3 * * *", STOCKHOLM, SPRING) == [at(2026, 3, 29, 1)]
    assert on_local_day("*/10 2 * * *", STOCKHOLM, SPRING) == [at(2026, 3, 29, 1)]


def test_stockholm_fixed_hour_with_wildcard_minute() -> None:
    # `* 2 * * *`: the hour is fixed, so the first pass of 02:xx only, and one run for
    # the missing hour, at 03:00 CEST.
    assert on_local_day("* 2 * * *", STOCKHOLM, SPRING) == [at(2026, 3, 29, 1)]
    autumn = on_local_day("* 2 * * *", STOCKHOLM, AUTUMN)
    assert autumn == [at(2026, 10, 25, 0) + n * MINUTE for n in range(60)]
    assert on_local_day("*/15 2 * * *", STOCKHOLM, AUTUMN) == [
        at(2026, 10, 25, 0, m) for m in (0, 15, 30, 45)
    ]


def test_stockholm_repeated_time_runs_at_its_first_occurrence() -> None:
    schedule = parse_schedule("30 2 * * *", STOCKHOLM)
    assert on_local_day("30 2 * * *", STOCKHOLM, AUTUMN) == [at(2026, 10, 25, 0, 30)]
    second_pass = at(2026, 10, 25, 1, 10)  # 02:10 CET, the hour again
    assert schedule.next_after(second_pass) == at(2026, 10, 26, 1, 30)
    assert schedule.latest_at_or_before(at(2026, 10, 25, 1, 45)) == at(2026, 10, 25, 0, 30)


def test_stockholm_hourly_runs_23_and_25_times() -> None:
    spring = on_local_day("0 * * * *", STOCKHOLM, SPRING)
    autumn = on_local_day("0 * * * *", STOCKHOLM, AUTUMN)
    assert len(spring) == 23
    assert len(autumn) == 25
    assert at(2026, 10, 25, 0) in autumn  # 02:00 CEST
    assert at(2026, 10, 25, 1) in autumn  # 02:00 CET
    assert parse_schedule("30 * * * *", STOCKHOLM).latest_at_or_before(
        at(2026, 10, 25, 1, 45)
    ) == at(2026, 10, 25, 1, 30)
    assert on_local_day("@hourly", STOCKHOLM, AUTUMN) == autumn


def test_stockholm_every_second_across_both_changes() -> None:
    schedule = parse_schedule("* * * * * *", STOCKHOLM)
    spring = list(schedule.periods_between(at(2026, 3, 29, 0, 59, 58), at(2026, 3, 29, 1, 0, 1)))
    assert spring == [at(2026, 3, 29, 0, 59, 59), at(2026, 3, 29, 1), at(2026, 3, 29, 1, 0, 1)]
    autumn = list(schedule.periods_between(at(2026, 10, 24, 23), at(2026, 10, 25, 3)))
    assert len(autumn) == 4 * 3600


def test_new_york() -> None:
    zone = "America/New_York"
    assert on_local_day("30 2 * * *", zone, date(2026, 3, 8)) == [at(2026, 3, 8, 7)]
    assert on_local_day("30 1 * * *", zone, date(2026, 11, 1)) == [at(2026, 11, 1, 5, 30)]
    assert len(on_local_day("*/30 * * * *", zone, date(2026, 11, 1))) == 50


def test_santiago_changes_at_midnight() -> None:
    zone = "America/Santiago"
    # 2026-09-06 00:00 -04 does not exist; the day starts at 01:00 -03.
    assert on_local_day("0 0 * * *", zone, date(2026, 9, 6)) == [at(2026, 9, 6, 4)]
    assert on_local_day("@daily", zone, date(2026, 9, 6)) == [at(2026, 9, 6, 4)]
    # 2026-04-04 23:00-24:00 happens twice.
    assert on_local_day("30 23 * * *", zone, date(2026, 4, 4)) == [at(2026, 4, 5, 2, 30)]
    assert on_local_day("30 * * * *", zone, date(2026, 4, 4))[-2:] == [
        at(2026, 4, 5, 2, 30),
        at(2026, 4, 5, 3, 30),
    ]


def test_lord_howe_half_hour_shift() -> None:
    zone = "Australia/Lord_Howe"
    # 2026-10-04 02:00-02:30 +10:30 does not exist; 2026-04-05 01:30-02:00 happens twice.
    assert on_local_day("15 2 * * *", zone, date(2026, 10, 4)) == [at(2026, 10, 3, 15, 30)]
    assert on_local_day("45 1 * * *", zone, date(2026, 4, 5)) == [at(2026, 4, 4, 14, 45)]
    assert len(on_local_day("45 * * * *", zone, date(2026, 4, 5))) == 25
    assert len(on_local_day("15 * * * *", zone, date(2026, 4, 5))) == 24
    assert len(on_local_day("15 * * * *", zone, date(2026, 10, 4))) == 23
    # An hourly job at minute 0 keeps minute 0, so the clock's half hour shows as one
    # 90-minute interval rather than a drift to :30.
    hourly = on_local_day("0 * * * *", zone, date(2026, 10, 4))
    gaps = Counter(b - a for a, b in itertools.pairwise(hourly))
    assert gaps == {HOUR: len(hourly) - 2, HOUR * 1.5: 1}


@pytest.mark.parametrize("zone", ["UTC", "Etc/UTC"])
def test_utc_never_meets_dst(zone: str) -> None:
    found = list(
        parse_schedule("30 2 * * *", zone).periods_between(at(2026, 3, 28), at(2026, 4, 1))
    )
    assert found == [at(2026, 3, d, 2, 30) for d in (28, 29, 30, 31)]
