"""The triggers of schedules created at run time: cron, a fixed interval, one instant.

A trigger is data (it is stored in a schedule's row and read back by every node), and
its periods are a pure function of it: `next_after` answers the same on every node and
Python version, so a period keeps its identity (schedule key, period) whoever fires it.
An interval is anchored: its periods are `start + k·every`, so it never drifts the way
`*/90` in a cron field cannot even express.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from scheduler.cron import Schedule, parse_schedule
from scheduler.durations import Duration, format_duration, parse_duration
from scheduler.errors import ScheduleDefinitionError, ScheduleError

# The shortest interval a schedule may have: periods are whole seconds, as cron's are.
MIN_EVERY = timedelta(seconds=1)
_SECOND = timedelta(seconds=1)
_MICRO = timedelta(microseconds=1)
# Parsed cron schedules kept: a million schedules use few distinct (expression, zone).
CRONS_KEPT = 4096


class TriggerKind(StrEnum):
    CRON = "cron"
    EVERY = "every"
    AT = "at"


@dataclass(frozen=True)
class Trigger:
    """When a schedule fires. Exactly one of the three forms:

    - `cron` in `timezone` (5 or 6 fields, `L` and `D#n` as for `@job`);
    - `every` (whole seconds, at least 1 s) from `start` (a UTC instant);
    - `at` (a UTC instant): once.
    """

    kind: TriggerKind
    cron: str | None = None
    timezone: str = "UTC"
    every: timedelta | None = None
    start: datetime | None = None
    at: datetime | None = None

    def next_after(self, instant: datetime) -> datetime | None:
        """The first period strictly after `instant`, or None once there is none."""
        if self.kind is TriggerKind.CRON:
            assert self.cron is not None
            return _cron(self.cron, self.timezone).next_after(instant)
        if self.kind is TriggerKind.EVERY:
            assert self.every is not None
            assert self.start is not None
            if instant < self.start:
                return self.start
            step = _micros(self.every)
            passed = _micros(instant - self.start) // step + 1
            return self.start + timedelta(microseconds=passed * step)
        assert self.at is not None
        return self.at if self.at > instant else None

    def first_from(self, instant: datetime) -> datetime | None:
        """The first period at or after `instant`."""
        return self.next_after(instant - _MICRO)

    def periods_between(self, after: datetime, upto: datetime, limit: int) -> list[datetime]:
        """Up to `limit` periods p with after < p <= upto, ascending."""
        found: list[datetime] = []
        period = self.next_after(after)
        while period is not None and period <= upto and len(found) < limit:
            found.append(period)
            period = self.next_after(period)
        return found

    def describe(self) -> str:
        """One line for people: `cron 0 9 * * * Europe/Paris`, `every 90m from …`, `at …`."""
        if self.kind is TriggerKind.CRON:
            return f"cron {self.cron} {self.timezone}"
        if self.kind is TriggerKind.EVERY:
            assert self.every is not None
            assert self.start is not None
            return f"every {format_duration(self.every)} from {self.start.isoformat()}"
        assert self.at is not None
        return f"at {self.at.isoformat()}"


def parse_trigger(
    key: str,
    *,
    cron: str | None = None,
    every: Duration | None = None,
    start: datetime | str | None = None,
    at: datetime | str | None = None,
    timezone: str = "UTC",
    now: datetime,
) -> Trigger:
    """Check a schedule's trigger; raise ScheduleDefinitionError naming the key and field.

    `start` and `at` are aware datetimes or ISO-8601 text. `start` of an interval
    defaults to `now`, cut to the whole second; an interval's
    `timezone` only names its periods for people (an interval is the same in every zone).
    """
    zone = _zone(key, timezone)
    given = [
        name for name, value in (("cron", cron), ("every", every), ("at", at)) if value is not None
    ]
    if len(given) != 1:
        raise ScheduleDefinitionError(
            key, "trigger", f"give exactly one of cron, every or at, got {given or 'none'}"
        )
    if start is not None and every is None:
        raise ScheduleDefinitionError(key, "start", "only an interval (every=) has a start")
    if cron is not None:
        if not isinstance(cron, str):
            raise ScheduleDefinitionError(key, "cron", f"must be a string, got {cron!r}")
        try:
            schedule = _cron(cron, timezone)
        except ScheduleError as error:
            raise ScheduleDefinitionError(key, error.field, error.message) from None
        if schedule.next_after(now) is None:
            raise ScheduleDefinitionError(key, "cron", f"{cron!r} never fires after {now:%Y-%m-%d}")
        return Trigger(TriggerKind.CRON, cron=cron, timezone=zone.key)
    if every is not None:
        try:
            interval = parse_duration(every)
        except ValueError as error:
            raise ScheduleDefinitionError(key, "every", str(error)) from None
        if interval < MIN_EVERY or interval % _SECOND:
            raise ScheduleDefinitionError(
                key, "every", f"must be whole seconds, at least {MIN_EVERY.seconds}s, got {every!r}"
            )
        anchor = _instant(key, "start", start if start is not None else now)
        return Trigger(
            TriggerKind.EVERY,
            every=interval,
            start=anchor.replace(microsecond=0),
            timezone=zone.key,
        )
    assert at is not None
    return Trigger(
        TriggerKind.AT, at=_instant(key, "at", at).replace(microsecond=0), timezone=zone.key
    )


def _zone(key: str, timezone: object) -> ZoneInfo:
    if not isinstance(timezone, str) or not timezone:
        raise ScheduleDefinitionError(
            key, "timezone", f"must be an IANA zone name, got {timezone!r}"
        )
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleDefinitionError(key, "timezone", f"unknown time zone {timezone!r}") from None


def _instant(key: str, field: str, value: object) -> datetime:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ScheduleDefinitionError(
                key, field, f"cannot read {value!r} as an instant"
            ) from None
    if not isinstance(value, datetime):
        raise ScheduleDefinitionError(key, field, f"must be a datetime, got {value!r}")
    if value.tzinfo is None:
        raise ScheduleDefinitionError(
            key, field, f"must be time-zone aware, got {value.isoformat()}"
        )
    return value.astimezone(UTC)


@functools.lru_cache(maxsize=CRONS_KEPT)
def _cron(expression: str, timezone: str) -> Schedule:
    return parse_schedule(expression, timezone)


def _micros(value: timedelta) -> int:
    return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
