"""The database's clock, as this node keeps it: the last reading of the database's time,
carried forward by this process's monotonic clock.

A replica whose host clock runs ahead, or steps (NTP after a VM resume, `date -s`),
would otherwise claim periods early. Periods are claimed when the database clock, not
the host's, reaches them; between readings the host's wall clock plays no part, so a
step of it changes nothing until the next reading, which also reports the step.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

from scheduler.model import ClockReading

SKEW_WARNING = timedelta(seconds=1)


class Clock:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._anchor = datetime.now(UTC)
        self._anchor_mono = time.monotonic()
        self._offset = timedelta(0)

    def now(self) -> datetime:
        """The database clock now: the last reading plus the time elapsed since it."""
        with self._lock:
            anchor, anchor_mono = self._anchor, self._anchor_mono
        return anchor + timedelta(seconds=time.monotonic() - anchor_mono)

    @property
    def offset(self) -> timedelta:
        """How far the database's clock was from this host's at the last reading."""
        with self._lock:
            return self._offset

    def calibrate(self, reading: ClockReading) -> timedelta:
        """Take a reading of the database clock as of the midpoint of the monotonic
        instants around its statement; return the host clock's offset."""
        midpoint = reading.sent + (reading.received - reading.sent) / 2
        host = datetime.now(UTC) - timedelta(seconds=time.monotonic() - midpoint)
        offset = reading.moment - host
        with self._lock:
            self._anchor, self._anchor_mono, self._offset = reading.moment, midpoint, offset
        return offset
