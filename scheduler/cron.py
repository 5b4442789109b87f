"""Cron schedules: parsing, fire-time arithmetic, time zones and DST.

The only module that imports APScheduler, and only its `CronTrigger`, which we use as
a calendar calculator on wall-clock times labelled UTC; it is imported when the first
schedule is compiled, so that commands which read no schedule (`runs`, `nodes`) do not
load it (about 10 ms and 0.4 MiB once SQLAlchemy has loaded the `importlib.metadata`
and `asyncio` it also needs; 35 ms and more without). Everything here is pure: each
function takes the instant it reasons about, nothing reads a clock.

Crontab meanings we keep (APScheduler 3 differs on each):

- day-of-week counts 0 (and 7) as Sunday; names sun..sat and jan..dec are accepted;
- when day-of-month and day-of-week are both restricted (neither is exactly `*`), a day
  matches if either matches, as in Vixie cron;
- six fields put seconds first; the aliases are @hourly, @daily, @midnight, @weekly,
  @monthly, @yearly and @annually;
- `L` in day-of-month is the month's last day, and `D#n` in day-of-week its nth weekday
  D (n from 1 to 5; a month without a fifth one has no such day). Both may sit in a list
  beside plain values, and a day matching any item matches: `1,15,L`, `mon-fri,sun#1`.

DST (schedules in UTC never meet it). The fields are matched against local wall-clock
time, then each matching wall-clock time becomes UTC instants by one of two rules,
chosen by the hour field alone:

- hour fixed (single values, lists or plain ranges; no `*`, no step): the job keeps
  its place in the local day. A repeated wall-clock time runs at its first occurrence
  only; a wall-clock time that does not exist runs at the first instant after the gap,
  and all such times of one gap are that single period. This covers a wildcard or
  stepped minute with a fixed hour too: `* 2 * * *` runs 60 times in the first pass
  of a repeated 02:00 hour and not in the second, and exactly once, at the end of the
  gap, when 02:00-02:59 does not exist.
- hour `*` or a step (`*/2`, `0-23/2`): the job follows elapsed time. Every instant
  whose local wall-clock time matches is a period, so a repeated time runs twice and a
  missing one not at all (25 or 23 hourly runs). With a half-hour shift (Lord Howe) an
  hourly job at minute 0 sees one 90-minute interval, as the clock itself does.

Periods are UTC instants with second precision, strictly increasing, never repeated.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import MAXYEAR, UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from scheduler.errors import ScheduleError

__all__ = ["Schedule", "parse_schedule"]

_SECOND = timedelta(seconds=1)
# tzdata never changes a zone's offset twice within four days, so probing once a day
# cannot step over a change and its reversal.
_PROBE = timedelta(days=1)
# Growing look-back windows: tiny ones answer dense schedules, the last one @yearly.
_LOOK_BACK = tuple(
    timedelta(seconds=s)
    for s in (2, 120, 7200, 2 * 86400, 64 * 86400, 2 * 366 * 86400, 30 * 366 * 86400)
)
_EARLIEST = datetime(1, 1, 3, tzinfo=UTC)
# APScheduler's year field starts at 1970; the Gregorian calendar repeats every 400 years.
_TRIGGER_FIRST_YEAR = 1970
_CALENDAR_CYCLE = 400
_UTC_NAMES = frozenset({"UTC", "Etc/UTC"})

_ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH_TITLES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
# Crontab numbering: 0 is Sunday. APScheduler reads these names correctly.
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_ITEM = re.compile(r"(\*|[0-9]+|[a-z]+)(?:-([0-9]+|[a-z]+))?(?:/([0-9]+))?")
# The nth weekday of the month in day-of-week (`fri#2`, `5#2`), as APScheduler spells it.
_NTH_ITEM = re.compile(r"([0-9]+|[a-z]+)#([0-9]+)")
_NTH_NAMES = ("1st", "2nd", "3rd", "4th", "5th")
# The last day of the month in day-of-month.
_LAST_DAY = "l"


@dataclass(frozen=True)
class _Field:
    """One crontab field: its name in messages, its range, and the names it accepts."""

    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    first_name: int = 0

    @property
    def all_high(self) -> int:
        """Top of `*`: day-of-week stops at 6 so that Sunday is not counted twice."""
        return 6 if self is _DAY_OF_WEEK else self.high


_SECOND_FIELD = _Field("second", 0, 59)
_MINUTE = _Field("minute", 0, 59)
_HOUR = _Field("hour", 0, 23)
_DAY_OF_MONTH = _Field("day-of-month", 1, 31)
_MONTH = _Field("month", 1, 12, _MONTHS, 1)
_DAY_OF_WEEK = _Field("day-of-week", 0, 7, _WEEKDAYS, 0)
_FIELDS = (_SECOND_FIELD, _MINUTE, _HOUR, _DAY_OF_MONTH, _MONTH, _DAY_OF_WEEK)


@dataclass(frozen=True)
class Schedule:
    """A validated cron schedule in one time zone; its periods are UTC instants."""

    expression: str
    timezone: str = "UTC"
    _plan: _Plan = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_plan", _compile(self.expression, self.timezone))

    def next_after(self, instant: datetime) -> datetime | None:
        """The first period strictly after `instant`, or None if there is none."""
        return self._plan.next_after(_whole_second(instant))

    def periods_between(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """Every period p with start < p <= end, ascending: what catch-up must consider."""
        period = self._plan.next_after(_whole_second(start))
        last = _whole_second(end)
        while period is not None and period <= last:
            yield period
            period = self._plan.next_after(period)

    def latest_at_or_before(self, instant: datetime) -> datetime | None:
        """The newest period p <= instant, found in growing windows so dense and sparse
        schedules both answer quickly."""
        end = _whole_second(instant)
        for window in _LOOK_BACK:
            low = end - window if end - _EARLIEST > window else _EARLIEST
            first = self._plan.next_after(low)
            if first is not None and first <= end:
                return self._plan.last_until(first - _SECOND, end)
        return None


def parse_schedule(expression: str, timezone: str = "UTC") -> Schedule:
    """Validate a cron expression and time zone; raise ScheduleError naming the culprit."""
    return Schedule(expression, timezone)


def _whole_second(instant: datetime) -> datetime:
    """Periods have second precision, so instants are compared in whole UTC seconds."""
    if instant.tzinfo is UTC and not instant.microsecond:
        return instant  # a period: every job due at once asks with one (bench b)
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"expected an aware datetime, got {instant!r}")
    return instant.astimezone(UTC).replace(microsecond=0)


# --- the arithmetic ---------------------------------------------------------------

_ANSWERS_KEPT = 256


@dataclass(frozen=True)
class _Plan:
    """Compiled triggers plus the DST rule; `zone` is None for UTC, the fast path."""

    triggers: tuple[Any, ...]
    zone: ZoneInfo | None
    follows_elapsed_time: bool
    # Jobs that share a schedule share its plan and mostly ask about the same instants
    # (10,000 jobs due at one minute all want the period after it): remember answers.
    _answers: dict[datetime, datetime | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def next_after(self, after: datetime) -> datetime | None:
        """First period > `after` (aware UTC, whole second)."""
        try:
            return self._answers[after]
        except KeyError:
            pass
        try:
            if self.zone is None:
                answer = self.wall_clock_match(after + _SECOND)
            else:
                answer = self._next_in_zone(self.zone, after)
        except OverflowError:  # past the year 9999
            answer = None
        if len(self._answers) >= _ANSWERS_KEPT:
            self._answers.clear()
        self._answers[after] = answer
        return answer

    def last_until(self, low: datetime, end: datetime) -> datetime:
        """The newest period <= end, given that a period lies in (low, end]; bisects in
        whole seconds so a year of every-second periods costs ~30 steps."""
        high = end
        while high - low > _SECOND:
            middle = low + timedelta(seconds=int((high - low).total_seconds()) // 2)
            period = self.next_after(middle)
            if period is not None and period <= end:
                low = period - _SECOND
            else:
                high = middle
        period = self.next_after(low)
        if period is None:  # pragma: no cover - (low, end] holds a period by contract
            raise AssertionError("no period in a window that has one")
        return period

    def wall_clock_match(self, wall: datetime) -> datetime | None:
        """The first wall-clock time >= `wall` matching the fields (times labelled UTC);
        with a day-of-month OR day-of-week schedule, the earlier of its two triggers."""
        shift = 0
        if wall.year < _TRIGGER_FIRST_YEAR:
            shift = ((_TRIGGER_FIRST_YEAR - wall.year) // _CALENDAR_CYCLE + 1) * _CALENDAR_CYCLE
            wall = wall.replace(year=wall.year + shift)
        best: datetime | None = None
        for trigger in self.triggers:
            fire: datetime | None = trigger.get_next_fire_time(None, wall)
            if fire is not None and (best is None or fire < best):
                best = fire
        if best is not None and shift:
            best = best.replace(year=best.year - shift)
        return best

    def _runs_at_gap(self, zone: ZoneInfo, start: datetime, offset: timedelta) -> bool:
        """Whether the clock jumps forward at `start` over a wall-clock time that matches:
        a fixed-hour job then runs at `start`, the first instant after the gap."""
        before = _offset(zone, start - _SECOND)
        if before >= offset:
            return False
        match = self.wall_clock_match(start + before)
        return match is not None and match < start + offset

    def _next_in_zone(self, zone: ZoneInfo, after: datetime) -> datetime | None:
        """First period > `after` in a zone with DST, walking one constant-offset stretch
        of UTC at a time (see the module docstring for the two rules)."""
        while True:
            start = after + _SECOND
            offset = _offset(zone, start)
            if not self.follows_elapsed_time and self._runs_at_gap(zone, start, offset):
                return start
            match = self.wall_clock_match(start + offset)
            if match is None:
                return None
            candidate = match - offset
            change = _first_change(zone, start, candidate)
            if change is not None:
                # No match before the change; the next stretch has another offset.
                after = change - _SECOND
                continue
            if self.follows_elapsed_time:
                return candidate
            first = match.replace(tzinfo=zone, fold=0).astimezone(UTC)
            if first == candidate:
                return candidate
            # Second pass of a repeated hour: it ran at the first; skip the whole pass.
            transition = _first_change(zone, first, candidate)
            if transition is None:  # pragma: no cover - tzdata guarantees one
                raise AssertionError(f"no transition between {first} and {candidate}")
            after = transition + (_offset(zone, first) - offset) - _SECOND


def _offset(zone: ZoneInfo, instant: datetime) -> timedelta:
    """The zone's UTC offset at a UTC instant (wall = instant + offset)."""
    return instant.astimezone(zone).replace(tzinfo=UTC) - instant


def _first_change(zone: ZoneInfo, start: datetime, end: datetime) -> datetime | None:
    """The first instant in (start, end] at which the zone's offset changes, or None."""
    for year in range(max(start.year - 1, 1), end.year + 1):
        for change in _changes_in_year(zone, year):
            if start < change <= end:
                return change
    return None


@functools.lru_cache(maxsize=1024)
def _changes_in_year(zone: ZoneInfo, year: int) -> tuple[datetime, ...]:
    """Offset changes in (Jan 1 of `year`, Jan 1 of the next] UTC, found by daily probes
    and bisection; zoneinfo does not expose its transitions."""
    if year >= MAXYEAR:
        return ()  # the calendar ends; the triggers find nothing there either
    low = datetime(year, 1, 1, tzinfo=UTC)
    last = datetime(year + 1, 1, 1, tzinfo=UTC)
    changes: list[datetime] = []
    offset = _offset(zone, low)
    while low < last:
        high = min(low + _PROBE, last)
        if _offset(zone, high) != offset:
            changes.append(_bisect_change(zone, low, high, offset))
            offset = _offset(zone, high)
        low = high
    return tuple(changes)


def _bisect_change(zone: ZoneInfo, low: datetime, high: datetime, offset: timedelta) -> datetime:
    """The one change in (low, high], to the second."""
    while high - low > _SECOND:
        middle = low + timedelta(seconds=int((high - low).total_seconds()) // 2)
        if _offset(zone, middle) == offset:
            low = middle
        else:
            high = middle
    return high


# --- parsing ----------------------------------------------------------------------


# Jobs that share a schedule share its compiled plan (immutable, with its answers):
# building APScheduler's triggers took most of the start-up of a node with 10,000 jobs.
@functools.lru_cache(maxsize=4096)
def _compile(expression: str, timezone: str) -> _Plan:
    """Parse and check everything up front, so a bad schedule fails at load time."""
    triggers, follows_elapsed_time = _parse(expression)
    zone = _load_zone(timezone)
    return _Plan(
        triggers=triggers,
        zone=None if zone.key in _UTC_NAMES else zone,
        follows_elapsed_time=follows_elapsed_time,
    )


# The triggers read wall-clock fields and know no zone: one expression in many zones (a
# tenant's schedule each, 43,200 pairs in bench n) is parsed once.
@functools.lru_cache(maxsize=4096)
def _parse(expression: str) -> tuple[tuple[Any, ...], bool]:
    """The expression's triggers, and whether it follows elapsed time (`_Plan`)."""
    texts = _split(expression)
    day_text, last_day = _without_last_day(texts[3])
    weekday_text, nth = _without_nth_weekdays(texts[5])
    second, minute, hour, days, months, weekdays = (
        _parse_field(spec, text) if text else frozenset()
        for spec, text in zip(_FIELDS, [*texts[:3], day_text, texts[4], weekday_text], strict=True)
    )
    days_restricted, weekdays_restricted = texts[3] != "*", texts[5] != "*"
    day_triggers_fire = _days_exist(days, months) or last_day
    if not day_triggers_fire and not weekdays_restricted:
        raise ScheduleError("cron", f"{expression!r} never fires: {_why_never(days, months)}")
    times = (_aps(_SECOND_FIELD, second), _aps(_MINUTE, minute), _aps(_HOUR, hour))
    month_text = _aps(_MONTH, months)
    if last_day or nth:
        day_pairs = _special_day_pairs(
            days if _days_exist(days, months) else frozenset(),
            last_day,
            weekdays if weekdays_restricted else frozenset(),
            nth,
            both_restricted=days_restricted and weekdays_restricted,
        )
    elif days_restricted and weekdays_restricted:
        # Vixie cron: either day field may match. APScheduler ANDs, so use two triggers.
        day_pairs = [("*", _aps(_DAY_OF_WEEK, weekdays))]
        if day_triggers_fire:
            day_pairs.append((_aps(_DAY_OF_MONTH, days), "*"))
    else:
        day_pairs = [(_aps(_DAY_OF_MONTH, days), _aps(_DAY_OF_WEEK, weekdays))]
    triggers = tuple(_trigger(times, day, month_text, weekday) for day, weekday in day_pairs)
    return triggers, "*" in texts[2] or "/" in texts[2]


def _without_last_day(text: str) -> tuple[str, bool]:
    """Day-of-month's text without its `L` items, and whether it had one."""
    items = text.split(",")
    kept = [item for item in items if item.lower() != _LAST_DAY]
    return ",".join(kept), len(kept) < len(items)


def _without_nth_weekdays(text: str) -> tuple[str, frozenset[tuple[int, int]]]:
    """Day-of-week's text without its `D#n` items, and those as (weekday, n)."""
    kept: list[str] = []
    nth: set[tuple[int, int]] = set()
    for item in text.split(","):
        found = _NTH_ITEM.fullmatch(item.lower())
        if found is None:
            kept.append(item)
            continue
        weekday = _value(_DAY_OF_WEEK, text, found.group(1)) % 7
        position = int(found.group(2))
        if not 1 <= position <= len(_NTH_NAMES):
            raise _field_error(
                _DAY_OF_WEEK, text, item, f"asks for weekday number {position} of a month (1-5)"
            )
        nth.add((weekday, position))
    return ",".join(kept), frozenset(nth)


def _special_day_pairs(
    days: frozenset[int],
    last_day: bool,
    weekdays: frozenset[int],
    nth: frozenset[tuple[int, int]],
    *,
    both_restricted: bool,
) -> list[tuple[str, str]]:
    """(day, day-of-week) pairs of APScheduler fields whose triggers, together, match the
    days of a schedule with `L` or `D#n`: a day matches if any item of a restricted day
    field does (with both restricted, Vixie's OR across the two fields as well)."""
    pairs: list[tuple[str, str]] = []
    if weekdays:
        pairs.append(("*", _aps(_DAY_OF_WEEK, weekdays)))
    if nth:
        positions = (f"{_NTH_NAMES[n - 1]} {_WEEKDAYS[day]}" for day, n in sorted(nth))
        pairs.append((",".join(positions), "*"))
    if both_restricted or not (weekdays or nth):
        month_days = [_aps(_DAY_OF_MONTH, days)] if days else []
        if last_day:
            month_days.append("last")
        if month_days:
            pairs.append((",".join(month_days), "*"))
    return pairs


def _split(expression: str) -> list[str]:
    """Six field texts, seconds first; five-field expressions and aliases fire at :00."""
    if not isinstance(expression, str):
        raise ScheduleError("cron", f"expected a cron expression string, got {expression!r}")
    text = expression.strip()
    if text.startswith("@"):
        alias = _ALIASES.get(text.lower())
        if alias is None:
            known = ", ".join(_ALIASES)
            raise ScheduleError("cron", f"unknown alias {text!r} (known: {known})")
        text = alias
    texts = text.split()
    if len(texts) == 5:
        return ["0", *texts]
    if len(texts) == 6:
        return texts
    raise ScheduleError(
        "cron",
        "expected 5 fields (or 6 with seconds first, or an @alias), "
        f"got {len(texts)}: {expression!r}",
    )


def _parse_field(spec: _Field, text: str) -> frozenset[int]:
    """The set of values a field allows; Sunday is always 0."""
    values: set[int] = set()
    for item in text.split(","):
        values.update(_parse_item(spec, text, item))
    if spec is _DAY_OF_WEEK:
        return frozenset(value % 7 for value in values)
    return frozenset(values)


def _parse_item(spec: _Field, text: str, item: str) -> range:
    """One list item: `*`, `*/n`, `a`, `a-b` or `a-b/n`, with names where allowed."""
    found = _ITEM.fullmatch(item.lower())
    if spec is _DAY_OF_MONTH and "l" in item.lower():
        found = None  # `L` stands alone: no `L-3`, `LW` or range of it
    if found is None:
        forms = "a number, a range like 1-5, a step like */15, or a list"
        if spec is _DAY_OF_MONTH:
            forms = "a number, L (the last day), a range like 1-5, a step like */15, or a list"
        if spec.names:
            forms = f"a name ({spec.names[0]}-{spec.names[-1]}), " + forms
        if spec is _DAY_OF_WEEK:
            forms = forms.replace(", or a list", ", the nth weekday like fri#2, or a list")
        raise _field_error(spec, text, item, f"is not {forms}")
    first, last, step_text = found.groups()
    step = int(step_text) if step_text else 1
    if step == 0:
        raise _field_error(spec, text, item, "has a step of 0")
    if first == "*":
        if last is not None:
            raise _field_error(spec, text, item, "is not a range: '*' cannot start one")
        return range(spec.low, spec.all_high + 1, step)
    low = _value(spec, text, first)
    if last is None:
        if step_text:
            raise _field_error(
                spec, text, item, f"has a step without a range, write '{first}-{spec.high}/{step}'"
            )
        return range(low, low + 1)
    high = _value(spec, text, last)
    if low > high:
        raise _field_error(spec, text, item, f"is a backwards range ({low} > {high})")
    return range(low, high + 1, step)


def _value(spec: _Field, text: str, token: str) -> int:
    """A number in the field's range, or one of its names."""
    if token.isdigit():
        value = int(token)
        if not spec.low <= value <= spec.high:
            raise _field_error(spec, text, token, f"is out of range {spec.low}-{spec.high}")
        return value
    if token in spec.names:
        return spec.first_name + spec.names.index(token)
    if spec.names:
        problem = f"is not a {spec.name} name ({', '.join(spec.names)})"
    else:
        problem = "is not a number"
    raise _field_error(spec, text, token, problem)


def _field_error(spec: _Field, text: str, part: str, problem: str) -> ScheduleError:
    """Name the field, and the offending part when the field has more than one."""
    if part.lower() == text.lower():
        return ScheduleError("cron", f"{spec.name} field {text!r} {problem}")
    return ScheduleError("cron", f"{spec.name} field {text!r}: {part!r} {problem}")


def _days_exist(days: frozenset[int], months: frozenset[int]) -> bool:
    """Whether some allowed day-of-month exists in some allowed month (Feb 29 counts)."""
    return any(day <= _MONTH_DAYS[month - 1] for day in days for month in months)


def _why_never(days: frozenset[int], months: frozenset[int]) -> str:
    """E.g. 'February has no day 30' or 'April and June have no day 31'."""
    titles = [_MONTH_TITLES[month - 1] for month in sorted(months)]
    named = titles[0] if len(titles) == 1 else ", ".join(titles[:-1]) + " and " + titles[-1]
    verb = "has" if len(titles) == 1 else "have"
    return f"{named} {verb} no day {min(days)}"


def _aps(spec: _Field, values: frozenset[int]) -> str:
    """APScheduler's spelling of a value set: `*`, names for weekdays, else ranges."""
    ordered = sorted(values)
    if ordered == list(range(spec.low, spec.all_high + 1)):
        return "*"
    if spec is _DAY_OF_WEEK:
        return ",".join(_WEEKDAYS[value] for value in ordered)
    steps = {b - a for a, b in itertools.pairwise(ordered)}
    if len(ordered) > 2 and len(steps) == 1 and steps != {1}:
        return f"{ordered[0]}-{ordered[-1]}/{steps.pop()}"
    runs: list[list[int]] = []
    for value in ordered:
        if runs and runs[-1][1] == value - 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _trigger(times: tuple[str, str, str], day: str, month: str, day_of_week: str) -> Any:
    """A CronTrigger in UTC: a calendar calculator for wall-clock times."""
    from apscheduler.triggers.cron import CronTrigger  # noqa: PLC0415 - see the docstring

    second, minute, hour = times
    return CronTrigger(
        month=month,
        day=day,
        day_of_week=day_of_week,
        hour=hour,
        minute=minute,
        second=second,
        timezone=UTC,
    )


def _load_zone(name: str) -> ZoneInfo:
    """An IANA zone by name; anything zoneinfo cannot load is the user's to fix."""
    if not isinstance(name, str) or not name:
        raise ScheduleError("timezone", f"unknown time zone {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as error:
        raise ScheduleError("timezone", f"unknown time zone {name!r}") from error
