"""Cron parsing and fire-time arithmetic in UTC (DST lives in test_cron_dst.py)."""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.cron import Schedule, parse_schedule
from scheduler.errors import ScheduleError


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[arg-type, misc]


def periods(expression: str, start: datetime, end: datetime, zone: str = "UTC") -> list[datetime]:
    return list(parse_schedule(expression, zone).periods_between(start, end))


# --- field forms --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "minutes"),
    [
        ("*/15 * * * *", [0, 15, 30, 45]),
        ("5,10,50 * * * *", [5, 10, 50]),
        ("10-13 * * * *", [10, 11, 12, 13]),
        ("10-30/10 * * * *", [10, 20, 30]),
        ("0-5,*/20 * * * *", [0, 1, 2, 3, 4, 5, 20, 40]),
        ("*/45 * * * *", [0, 45]),
        ("59 * * * *", [59]),
    ],
)
def test_minute_field_forms(expression: str, minutes: list[int]) -> None:
    found = periods(expression, at(2026, 5, 4, 9, 0) - timedelta(seconds=1), at(2026, 5, 4, 9, 59))
    assert [p.minute for p in found] == minutes
    assert {p.hour for p in found} == {9}


def test_five_fields_fire_on_the_minute() -> None:
    found = periods("* * * * *", at(2026, 5, 4, 9, 0), at(2026, 5, 4, 9, 3))
    assert found == [at(2026, 5, 4, 9, 1), at(2026, 5, 4, 9, 2), at(2026, 5, 4, 9, 3)]


def test_six_fields_put_seconds_first() -> None:
    found = periods("*/20 30 9 * * *", at(2026, 5, 4), at(2026, 5, 5))
    assert found == [at(2026, 5, 4, 9, 30, 0), at(2026, 5, 4, 9, 30, 20), at(2026, 5, 4, 9, 30, 40)]


def test_hour_and_day_of_month_fields() -> None:
    found = periods("0 6,18 1,15 * *", at(2026, 1, 1), at(2026, 2, 1))
    assert found == [at(2026, 1, 1, 6), at(2026, 1, 1, 18), at(2026, 1, 15, 6), at(2026, 1, 15, 18)]


def test_day_of_month_31_skips_short_months() -> None:
    found = periods("0 0 31 * *", at(2026, 1, 1), at(2026, 12, 31, 23))
    assert [p.month for p in found] == [1, 3, 5, 7, 8, 10, 12]


@pytest.mark.parametrize(
    ("expression", "months"),
    [
        ("0 0 1 jan,jul *", [1, 7]),
        ("0 0 1 JAN-Mar *", [1, 2, 3]),
        ("0 0 1 */4 *", [1, 5, 9]),
        ("0 0 1 11 *", [11]),
    ],
)
def test_month_field(expression: str, months: list[int]) -> None:
    assert [p.month for p in periods(expression, at(2026, 1, 1) - timedelta(1), at(2027, 1, 1))][
        : len(months)
    ] == months


@pytest.mark.parametrize(
    ("aliases", "equivalent"),
    [
        (["@hourly"], "0 * * * *"),
        (["@daily", "@midnight", "@DAILY"], "0 0 * * *"),
        (["@weekly"], "0 0 * * 0"),
        (["@monthly"], "0 0 1 * *"),
        (["@yearly", "@annually"], "0 0 1 1 *"),
    ],
)
def test_aliases(aliases: list[str], equivalent: str) -> None:
    start, end = at(2025, 12, 1), at(2027, 2, 1)
    expected = periods(equivalent, start, end)
    for alias in aliases:
        assert periods(alias, start, end) == expected
        assert parse_schedule(alias).expression == alias


# --- day-of-week numbering and the day-of-month OR rule ------------------------------


def weekdays_of(expression: str) -> set[str]:
    found = periods(expression, at(2026, 6, 1), at(2026, 6, 29))  # four whole weeks
    return {p.strftime("%a") for p in found}


@pytest.mark.parametrize(
    ("field", "days"),
    [
        ("0", {"Sun"}),
        ("7", {"Sun"}),
        ("1", {"Mon"}),
        ("6", {"Sat"}),
        ("1-5", {"Mon", "Tue", "Wed", "Thu", "Fri"}),
        ("5-7", {"Fri", "Sat", "Sun"}),
        ("*/2", {"Sun", "Tue", "Thu", "Sat"}),
        ("1-5/2", {"Mon", "Wed", "Fri"}),
        ("sun", {"Sun"}),
        ("MON-fri", {"Mon", "Tue", "Wed", "Thu", "Fri"}),
        ("sat,sun", {"Sat", "Sun"}),
        ("0,3", {"Sun", "Wed"}),
        ("*", {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}),
    ],
)
def test_day_of_week_uses_crontab_numbering(field: str, days: set[str]) -> None:
    assert weekdays_of(f"0 0 * * {field}") == days


def test_sunday_job_fires_every_sunday() -> None:
    found = periods("0 0 * * 0", at(2026, 6, 1), at(2026, 7, 1))
    assert found == [at(2026, 6, d) for d in (7, 14, 21, 28)]


def test_weekday_job_fires_monday_to_friday() -> None:
    found = periods("0 0 * * 1-5", at(2026, 6, 5), at(2026, 6, 12))  # Fri .. Fri
    assert [p.day for p in found] == [8, 9, 10, 11, 12]


def test_day_of_month_or_day_of_week_when_both_restricted() -> None:
    # Vixie cron: the 13th of the month OR any Friday.
    found = periods("0 0 13 * 5", at(2026, 3, 1), at(2026, 3, 31))
    assert [p.day for p in found] == [6, 13, 20, 27]  # Fridays 6, 20, 27 and Friday 13th
    found = periods("0 0 1 * mon", at(2026, 6, 1), at(2026, 7, 7))
    assert [p.day for p in found] == [8, 15, 22, 29, 1, 6]


def test_day_of_week_alone_restricts_when_day_of_month_is_star() -> None:
    assert weekdays_of("0 0 * * 3") == {"Wed"}
    found = periods("0 0 1-7 * *", at(2026, 6, 1), at(2026, 6, 30))
    assert [p.day for p in found] == [2, 3, 4, 5, 6, 7]


def test_impossible_day_of_month_with_a_weekday_still_fires_on_the_weekday() -> None:
    found = periods("0 0 30 2 mon", at(2026, 1, 31), at(2026, 3, 1))
    assert [p.day for p in found] == [2, 9, 16, 23]


def test_february_29_fires_in_leap_years() -> None:
    found = periods("0 0 29 2 *", at(2023, 1, 1), at(2033, 1, 1))
    assert [p.year for p in found] == [2024, 2028, 2032]


# --- the last day of the month, the nth weekday ------------------------------------


def days_of(expression: str, start: datetime, end: datetime) -> list[str]:
    return [f"{p:%a %Y-%m-%d}" for p in periods(expression, start, end)]


def test_l_is_the_last_day_of_each_month_leap_years_included() -> None:
    found = days_of("0 9 L * *", at(2027, 12, 1), at(2028, 4, 1))
    assert found == ["Fri 2027-12-31", "Mon 2028-01-31", "Tue 2028-02-29", "Fri 2028-03-31"]


def test_l_sits_in_a_list_beside_plain_days() -> None:
    found = days_of("0 9 1,L * *", at(2026, 4, 1), at(2026, 6, 1))
    assert found == ["Wed 2026-04-01", "Thu 2026-04-30", "Fri 2026-05-01", "Sun 2026-05-31"]


def test_l_in_a_month_without_the_plain_days_still_fires_on_the_last() -> None:
    assert days_of("0 9 30,L 2 *", at(2026, 1, 1), at(2027, 1, 1)) == ["Sat 2026-02-28"]


def test_nth_weekday() -> None:
    found = days_of("0 9 * * mon#2", at(2026, 1, 1), at(2026, 4, 1))
    assert found == ["Mon 2026-01-12", "Mon 2026-02-09", "Mon 2026-03-09"]
    assert days_of("0 9 * * 1#2", at(2026, 1, 1), at(2026, 4, 1)) == found


def test_a_fifth_weekday_only_in_months_that_have_one() -> None:
    found = days_of("0 9 * * fri#5", at(2026, 1, 1), at(2026, 7, 1))
    assert found == ["Fri 2026-01-30", "Fri 2026-05-29"]


def test_sunday_as_7_in_the_nth_weekday() -> None:
    assert days_of("0 9 * * 7#1", at(2026, 1, 1), at(2026, 3, 1)) == [
        "Sun 2026-01-04",
        "Sun 2026-02-01",
    ]


def test_nth_weekdays_beside_plain_weekdays_match_either() -> None:
    found = days_of("0 9 * * sat,sun#1", at(2026, 2, 1) - timedelta(seconds=1), at(2026, 2, 15))
    assert found == ["Sun 2026-02-01", "Sat 2026-02-07", "Sat 2026-02-14"]


def test_l_and_an_nth_weekday_both_restricted_match_either() -> None:
    found = days_of("0 9 L * fri#3", at(2026, 1, 1), at(2026, 3, 1))
    assert found == ["Fri 2026-01-16", "Sat 2026-01-31", "Fri 2026-02-20", "Sat 2026-02-28"]


# --- errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("0 0 30 2 *", "'0 0 30 2 *' never fires: February has no day 30"),
        ("0 0 31 4,6 *", "'0 0 31 4,6 *' never fires: April and June have no day 31"),
        ("0 0 30,31 feb *", "'0 0 30,31 feb *' never fires: February has no day 30"),
        ("0 0 31 2,4,6 *", "'0 0 31 2,4,6 *' never fires: February, April and June have no day 31"),
        ("61 * * * *", "minute field '61' is out of range 0-59"),
        ("5,61 * * * *", "minute field '5,61': '61' is out of range 0-59"),
        ("* 24 * * *", "hour field '24' is out of range 0-23"),
        ("* * 0 * *", "day-of-month field '0' is out of range 1-31"),
        ("* * 32 * *", "day-of-month field '32' is out of range 1-31"),
        ("* * * 13 *", "month field '13' is out of range 1-12"),
        ("* * * * 8", "day-of-week field '8' is out of range 0-7"),
        ("60 * * * * *", "second field '60' is out of range 0-59"),
        ("x * * * *", "minute field 'x' is not a number"),
        ("* * * foo *", "month field 'foo' is not a month name (jan, feb, mar, apr, may, jun, "
         "jul, aug, sep, oct, nov, dec)"),
        ("* * * * mon-funday", "day-of-week field 'mon-funday': 'funday' is not a day-of-week "
         "name (sun, mon, tue, wed, thu, fri, sat)"),
        ("jan * * * *", "minute field 'jan' is not a number"),
        ("5-1 * * * *", "minute field '5-1' is a backwards range (5 > 1)"),
        ("*/0 * * * *", "minute field '*/0' has a step of 0"),
        ("5/10 * * * *", "minute field '5/10' has a step without a range, write '5-59/10'"),
        ("*-5 * * * *", "minute field '*-5' is not a range: '*' cannot start one"),
        ("1,,2 * * * *", "minute field '1,,2': '' is not a number, a range like 1-5, a step "
         "like */15, or a list"),
        ("-1 * * * *", "minute field '-1' is not a number, a range like 1-5, a step like */15, "
         "or a list"),
        ("* * L-3 * *", "day-of-month field 'L-3' is not a number, L (the last day), a range "
         "like 1-5, a step like */15, or a list"),
        ("* * 1,LW * *", "day-of-month field '1,LW': 'LW' is not a number, L (the last day), a "
         "range like 1-5, a step like */15, or a list"),
        ("L * * * *", "minute field 'L' is not a number"),
        ("* * * * 5#6", "day-of-week field '5#6' asks for weekday number 6 of a month (1-5)"),
        ("* * * * 1,fri#0", "day-of-week field '1,fri#0': 'fri#0' asks for weekday number 0 of "
         "a month (1-5)"),
        ("* * * * 5#2-3", "day-of-week field '5#2-3' is not a name (sun-sat), a number, a range "
         "like 1-5, a step like */15, the nth weekday like fri#2, or a list"),
        ("* * * * funday#2", "day-of-week field 'funday#2': 'funday' is not a day-of-week name "
         "(sun, mon, tue, wed, thu, fri, sat)"),
        ("* * * * 8#1", "day-of-week field '8#1': '8' is out of range 0-7"),
        ("* * *", "expected 5 fields (or 6 with seconds first, or an @alias), got 3: '* * *'"),
        ("", "expected 5 fields (or 6 with seconds first, or an @alias), got 0: ''"),
        ("* * * * * * *", "expected 5 fields (or 6 with seconds first, or an @alias), "
         "got 7: '* * * * * * *'"),
        ("@reboot", "unknown alias '@reboot' (known: @hourly, @daily, @midnight, @weekly, "
         "@monthly, @yearly, @annually)"),
        ("@daily 5", "unknown alias '@daily 5' (known: @hourly, @daily, @midnight, @weekly, "
         "@monthly, @yearly, @annually)"),
    ],
)  # fmt: skip
def test_bad_expressions_name_the_field(expression: str, message: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(expression)
    assert caught.value.field == "cron"
    assert caught.value.message == message


@pytest.mark.parametrize("name", ["Mars/Olympus", "", "Europe", "../etc/passwd", "/etc/localtime"])
def test_unknown_time_zone(name: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule("* * * * *", name)
    assert caught.value.field == "timezone"
    assert caught.value.message == f"unknown time zone {name!r}"


def test_non_string_input_is_a_schedule_error() -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(5)  # type: ignore[arg-type]
    assert caught.value.field == "cron"
    with pytest.raises(ScheduleError) as caught:
        parse_schedule("* * * * *", None)  # type: ignore[arg-type]
    assert caught.value.field == "timezone"


def test_the_cron_error_comes_before_the_time_zone_error() -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule("61 * * * *", "Mars/Olympus")
    assert caught.value.field == "cron"


def test_schedule_constructed_directly_is_validated_too() -> None:
    with pytest.raises(ScheduleError):
        Schedule("0 0 30 2 *")


# --- the Schedule value --------------------------------------------------------------


def test_schedule_keeps_the_text_as_given_and_compares_by_it() -> None:
    schedule = parse_schedule("*/5 * * * *")
    assert schedule.expression == "*/5 * * * *"
    assert schedule.timezone == "UTC"
    assert schedule == Schedule("*/5 * * * *", "UTC")
    assert hash(schedule) == hash(Schedule("*/5 * * * *"))
    assert schedule != Schedule("*/5 * * * *", "Europe/Stockholm")
    assert repr(schedule) == "Schedule(expression='*/5 * * * *', timezone='UTC')"
    with pytest.raises(AttributeError):
        schedule.expression = "* * * * *"  # type: ignore[misc]


# --- next_after ---------------------------------------------------------------------


def test_next_after_is_strictly_after() -> None:
    schedule = parse_schedule("0 0 * * *")
    assert schedule.next_after(at(2026, 5, 4)) == at(2026, 5, 5)
    assert schedule.next_after(at(2026, 5, 4) - timedelta(seconds=1)) == at(2026, 5, 4)
    assert schedule.next_after(at(2026, 5, 4) - timedelta(microseconds=1)) == at(2026, 5, 4)


def test_next_after_accepts_any_aware_instant_and_answers_in_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    result = parse_schedule("30 * * * * *").next_after(
        datetime(2026, 5, 4, 12, 0, 10, 999_999, tzinfo=plus_two)
    )
    assert result == at(2026, 5, 4, 10, 0, 30)
    assert result is not None
    assert result.tzinfo is UTC
    assert result.microsecond == 0


def test_next_after_rejects_naive_datetimes() -> None:
    with pytest.raises(ValueError, match="aware"):
        parse_schedule("* * * * *").next_after(datetime(2026, 5, 4))


def test_next_after_before_1970() -> None:
    # APScheduler's calendar starts in 1970; ours repeats every 400 years before it.
    assert parse_schedule("0 0 * * 0").next_after(at(1960, 5, 1)) == at(1960, 5, 8)
    assert parse_schedule("0 0 29 2 *").next_after(at(1899, 1, 1)) == at(1904, 2, 29)


def test_the_calendar_ends_in_9999() -> None:
    schedule = parse_schedule("@yearly")
    assert schedule.next_after(at(9999, 1, 1)) is None
    assert schedule.latest_at_or_before(datetime.max.replace(tzinfo=UTC)) == at(9999, 1, 1)


# --- periods_between ------------------------------------------------------------------


def test_periods_between_excludes_start_and_includes_end() -> None:
    found = periods("0 * * * *", at(2026, 5, 4, 1), at(2026, 5, 4, 4))
    assert found == [at(2026, 5, 4, 2), at(2026, 5, 4, 3), at(2026, 5, 4, 4)]


def test_periods_between_end_with_microseconds() -> None:
    found = periods("* * * * * *", at(2026, 5, 4), at(2026, 5, 4, 0, 0, 2, 500_000))
    assert found == [at(2026, 5, 4, 0, 0, 1), at(2026, 5, 4, 0, 0, 2)]


@pytest.mark.parametrize("end", [at(2026, 5, 4), at(2026, 5, 3)])
def test_periods_between_empty_when_end_is_not_after_start(end: datetime) -> None:
    assert periods("* * * * * *", at(2026, 5, 4), end) == []


def test_periods_between_is_lazy() -> None:
    endless = parse_schedule("* * * * * *").periods_between(at(2026, 1, 1), at(9000, 1, 1))
    assert len(list(itertools.islice(endless, 3))) == 3


@pytest.mark.parametrize("zone", ["UTC", "Europe/Stockholm"])
def test_a_day_of_every_second(zone: str) -> None:
    found = periods("* * * * * *", at(2026, 3, 29), at(2026, 3, 30), zone)
    assert len(found) == 86_400
    assert found[0] == at(2026, 3, 29, 0, 0, 1)
    assert found[-1] == at(2026, 3, 30)


# --- latest_at_or_before ------------------------------------------------------------


def test_latest_daily() -> None:
    assert parse_schedule("0 0 * * *").latest_at_or_before(at(2026, 11, 30, 15)) == at(2026, 11, 30)


def test_latest_includes_the_instant_itself() -> None:
    assert parse_schedule("0 0 * * *").latest_at_or_before(at(2026, 11, 30)) == at(2026, 11, 30)
    assert parse_schedule("0 0 * * *").latest_at_or_before(
        at(2026, 11, 30) - timedelta(microseconds=1)
    ) == at(2026, 11, 29)


@pytest.mark.parametrize("zone", ["UTC", "Europe/Stockholm", "Australia/Lord_Howe"])
def test_latest_every_second(zone: str) -> None:
    schedule = parse_schedule("* * * * * *", zone)
    assert schedule.latest_at_or_before(at(2026, 11, 30, 15, 4, 5)) == at(2026, 11, 30, 15, 4, 5)
    assert schedule.latest_at_or_before(at(2026, 11, 30, 15, 4, 5, 900_000)) == at(
        2026, 11, 30, 15, 4, 5
    )


@pytest.mark.parametrize(
    ("expression", "instant", "expected"),
    [
        ("@yearly", at(2026, 11, 30, 15), at(2026, 1, 1)),
        ("@yearly", at(2026, 1, 1), at(2026, 1, 1)),
        ("@yearly", at(2025, 12, 31, 23, 59, 59), at(2025, 1, 1)),
        ("0 0 29 2 *", at(2027, 6, 1), at(2024, 2, 29)),
        ("0 0 29 2 *", at(2103, 6, 1), at(2096, 2, 29)),  # 2100 is not a leap year
        ("@monthly", at(2026, 3, 15), at(2026, 3, 1)),
        ("@weekly", at(2026, 6, 13), at(2026, 6, 7)),
        ("*/5 * * * *", at(2026, 6, 13, 10, 7, 30), at(2026, 6, 13, 10, 5)),
        ("* * * * 1 *", at(2026, 12, 15), at(2026, 1, 31, 23, 59, 59)),  # dense, long ago
        ("0 0 13 * 5", at(2026, 3, 19), at(2026, 3, 13)),
    ],
)
def test_latest_at_or_before(expression: str, instant: datetime, expected: datetime) -> None:
    assert parse_schedule(expression).latest_at_or_before(instant) == expected


def test_latest_is_none_before_the_calendar_starts() -> None:
    assert parse_schedule("@yearly").latest_at_or_before(at(1, 1, 1, 12)) is None


# --- against a brute-force reading of crontab ------------------------------------------

FIELD_TEXT = st.one_of(
    st.just("*"),
    st.sampled_from(["*/2", "*/3", "*/7", "1-5", "1-5/2", "3,9", "10-20/5", "L", "15,L", "30,31"]),
)


def brute_force_day(
    day_text: str, days: set[int], months: set[int], weekday_text: str, weekdays: set[int], on: date
) -> bool:
    """Crontab read literally, with Vixie's OR when both day fields are restricted; `L`
    is the month's last day, `D#n` the nth weekday D (days beyond 31 in `days`, and
    weekdays as 10 * n + D in `weekdays`)."""
    if on.month not in months:
        return False
    last = (on + timedelta(days=1)).month != on.month
    weekday = on.isoweekday() % 7
    day_ok = on.day in days or (last and LAST in days)
    weekday_ok = weekday in weekdays or 10 * ((on.day - 1) // 7 + 1) + weekday in weekdays
    if day_text != "*" and weekday_text != "*":
        return day_ok or weekday_ok
    return day_ok and weekday_ok


LAST = 99


def expand(text: str, low: int, high: int) -> set[int]:
    values: set[int] = set()
    for item in text.split(","):
        if item == "L":
            values.add(LAST)
            continue
        if "#" in item:
            weekday, _, position = item.partition("#")
            values.add(10 * int(position) + int(weekday) % 7)
            continue
        span, _, step = item.partition("/")
        if span == "*":
            first, last = low, high
        elif "-" in span:
            first, last = (int(x) for x in span.split("-"))
        else:
            first = last = int(span)
        values.update(range(first, last + 1, int(step or 1)))
    return values


@settings(deadline=None, max_examples=60)
@given(
    minute=st.sampled_from(["*/20", "0", "15,45", "5-7"]),
    hour=st.sampled_from(["*", "*/5", "3", "1-5/2", "6,18"]),
    day=FIELD_TEXT,
    month=st.sampled_from(["*", "1-5", "*/2", "3,9", "6"]),
    weekday=st.sampled_from(["*", "0", "1-5", "5-7", "*/2", "6", "5#2", "1-5,0#1", "1#5,7#3"]),
    start=st.dates(min_value=date(2020, 1, 1), max_value=date(2030, 12, 31)),
)
def test_periods_agree_with_brute_force(
    minute: str, hour: str, day: str, month: str, weekday: str, start: date
) -> None:
    expression = f"{minute} {hour} {day} {month} {weekday}"
    first = datetime(start.year, start.month, start.day, tzinfo=UTC)
    last = first + timedelta(days=40)
    expected = [
        datetime(on.year, on.month, on.day, h, m, tzinfo=UTC)
        for on in (start + timedelta(days=n) for n in range(41))
        if brute_force_day(
            day,
            expand(day, 1, 31),
            expand(month, 1, 12),
            weekday,
            {v % 7 if v < 10 else v for v in expand(weekday, 0, 6)},
            on,
        )
        for h in sorted(expand(hour, 0, 23))
        for m in sorted(expand(minute, 0, 59))
    ]
    expected = [p for p in expected if first < p <= last]
    schedule = parse_schedule(expression)
    assert list(schedule.periods_between(first, last)) == expected
    if expected:
        assert schedule.latest_at_or_before(last) == expected[-1]
        assert schedule.next_after(first) == expected[0]
