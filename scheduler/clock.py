"""This host's clock, corrected to the database's, which is the one that counts.

A replica whose clock runs ahead would otherwise claim periods early; periods are
claimed when the database clock, not the host's, reaches them.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

SKEW_WARNING = timedelta(seconds=1)


class Clock:
    def __init__(self) -> None:
        self._offset = timedelta(0)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return datetime.now(UTC) + self._offset

    @property
    def offset(self) -> timedelta:
        with self._lock:
            return self._offset

    def calibrate(self, before: datetime, database_time: datetime, after: datetime) -> timedelta:
        """Take the database reading as of the midpoint of the round trip."""
        offset = database_time - (before + (after - before) / 2)
        with self._lock:
            self._offset = offset
        return offset
