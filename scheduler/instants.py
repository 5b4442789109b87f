"""How instants are written for people: UTC, ISO-8601, with a `Z`."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class TimeSource(Protocol):
    """Where the scheduler reads the time on this host: the wall clock (SQLite's
    database clock) and the monotonic clock (a node's clock between readings). The
    one seam through which `scheduler.testing` puts a virtual clock in their place."""

    def wall(self) -> datetime:
        """This host's clock now, aware, in UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never steps back."""
        ...


class SystemTime:
    """The real clocks: what every node and command uses."""

    def wall(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_TIME: TimeSource = SystemTime()


def utc_text(moment: datetime) -> str:
    """`2026-11-30T21:53:00Z` (sub-second digits kept where there are any)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
