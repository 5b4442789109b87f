"""The database's clock, as this node keeps it: the last reading of the database's time,
carried forward by this process's monotonic clock.

A replica whose host clock runs ahead, or steps (NTP after a VM resume, `date -s`),
would otherwise claim periods early. Periods are claimed when the database clock, not
the host's, reaches them; between readings the host's wall clock plays no part, so a
step of it changes nothing until the next reading, which also reports the step.

A reading is only as sure as its statement's round trip: the server read its clock at
some instant between sending and hearing back, and the reading is placed in the middle,
off by at most half the round trip. A reply held up on its way (a busy server, a network
hiccup) would set the clock back by half the delay, and the node would claim that late
until the next reading. So a reading replaces the one in force only when it is tighter
than that one has become (its error grows with the drift the two clocks may have since
had), or when the two disagree beyond both errors: the database's clock stepped.
"""

from __future__ import annotations

import math
import threading
from datetime import datetime, timedelta

from scheduler.instants import SYSTEM_TIME, TimeSource
from scheduler.model import ClockReading

SKEW_WARNING = timedelta(seconds=1)
# How fast the database's clock and this host's monotonic clock may drift apart, as a
# fraction: each may be slewed by NTP at up to 500 parts per million.
DRIFT = 1e-3


class Clock:
    def __init__(self, time_source: TimeSource = SYSTEM_TIME) -> None:
        """`time_source`: this host's clocks (a virtual one under `scheduler.testing`)."""
        self._lock = threading.Lock()
        self._time = time_source
        self._anchor = time_source.wall()
        self._anchor_mono = time_source.monotonic()
        # How far the anchor may be off, in seconds: the host's clock, until a reading.
        self._error = math.inf
        self._offset = timedelta(0)

    def now(self) -> datetime:
        """The database clock now: the reading in force plus the time elapsed since it."""
        with self._lock:
            anchor, anchor_mono = self._anchor, self._anchor_mono
        return anchor + timedelta(seconds=self._time.monotonic() - anchor_mono)

    @property
    def offset(self) -> timedelta:
        """How far the database's clock was from this host's at the last reading."""
        with self._lock:
            return self._offset

    def calibrate(self, reading: ClockReading) -> timedelta:
        """Take a reading of the database clock as of the midpoint of the monotonic
        instants around its statement, unless the reading in force is tighter and agrees
        with it; return the host clock's offset from the database's."""
        half = (reading.received - reading.sent) / 2
        midpoint = reading.sent + half
        with self._lock:
            since = abs(midpoint - self._anchor_mono)
            error = self._error + DRIFT * since
            predicted = self._anchor + timedelta(seconds=midpoint - self._anchor_mono)
            apart = abs((reading.moment - predicted).total_seconds())
            if half <= error or apart > half + error:
                self._anchor, self._anchor_mono, self._error = reading.moment, midpoint, half
            host = self._time.wall() - timedelta(seconds=self._time.monotonic() - self._anchor_mono)
            self._offset = self._anchor - host
            return self._offset
