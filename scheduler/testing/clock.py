"""The virtual clock: the time source a harness gives its database and its node, moved
only by the test (`advance`, `to`) or by a job body that takes time (`elapse`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from scheduler.durations import Duration, parse_duration

# Where the virtual monotonic clock starts: any value will do, as only differences count.
MONOTONIC_START = 1_000_000.0


def parse_instant(value: datetime | str) -> datetime:
    """`2026-03-29T01:59Z` or an aware datetime, as UTC; a naive one is refused, since a
    test that means Berlin's night must say so."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    if moment.tzinfo is None:
        raise ValueError(f"instant {value!r} has no time zone: write it with Z or an offset")
    return moment.astimezone(UTC)


class VirtualClock:
    """A `TimeSource` (see `scheduler.instants`) that stands still until moved.

    `advance` and `to` move it through a harness, which runs everything that falls due
    on the way; `set` moves it alone (the harness's own step)."""

    def __init__(self, start: datetime | str) -> None:
        self._start = parse_instant(start)
        self._now = self._start
        self._driver: Callable[[datetime], None] | None = None

    def wall(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return MONOTONIC_START + (self._now - self._start).total_seconds()

    @property
    def now(self) -> datetime:
        """The virtual time, UTC."""
        return self._now

    def drive_with(self, driver: Callable[[datetime], None]) -> None:
        """The harness that runs what falls due while this clock moves."""
        self._driver = driver

    def set(self, moment: datetime) -> None:
        """Move to `moment` and run nothing; the clock never goes back."""
        if moment < self._now:
            raise ValueError(
                f"the virtual clock never goes back: it is {self._now.isoformat()}, "
                f"asked for {moment.isoformat()}"
            )
        self._now = moment

    def advance(self, duration: Duration) -> datetime:
        """Move forward by `duration` ("90s", "1h30m", "1d", a timedelta), running every
        period, retry and takeover due on the way; the new time."""
        return self.to(self._now + parse_duration(duration))

    def to(self, moment: datetime | str) -> datetime:
        """Move forward to `moment`, running everything due up to it; the new time."""
        target = parse_instant(moment)
        if self._driver is None:
            self.set(target)
        else:
            self._driver(target)
        return self._now

    def __repr__(self) -> str:
        return f"VirtualClock({self._now.isoformat()})"
