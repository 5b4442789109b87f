"""The lease watch: gives a run up the moment its holder's own deadline passes.

The holder knows, by its own monotonic clock, until when each lease is surely still its
own (`valid_until`), pushed forward by every renewal, start and claim it hears
back from. This thread never touches the database: it must keep time while the
database does not answer, so that a run is cancelled, its child killed and its items
refused before any other node may take it over.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable

from scheduler.model import RunKey

# A run is given up this long before its lease can end, by the holder's clock: room for
# the lease watch to wake, cancel and kill, and for clocks that tick a little apart.
LEASE_MARGIN_MIN_S = 0.25
LEASE_MARGIN_SHARE = 0.1


class LeaseWatch:
    """Deadlines by run; `expire(key)` is called (on the watch thread) once a deadline
    passes that was not pushed forward or forgotten first."""

    def __init__(self, expire: Callable[[RunKey], None]) -> None:
        self._expire = expire
        self._until: dict[RunKey, float] = {}
        # (deadline, key) for every deadline set; those since moved or forgotten are
        # skipped when they come up.
        self._heap: list[tuple[float, RunKey]] = []
        self._changed = threading.Condition()
        # How long after its deadline the last run given up was (its `lease_lost` says).
        self.late_s = 0.0
        # Deadlines that passed, until the run is forgotten: when its lease surely held.
        self._passed: dict[RunKey, float] = {}
        threading.Thread(target=self._watch, name="leases", daemon=True).start()

    def watch(self, key: RunKey, until: float) -> None:
        with self._changed:
            self._set(key, until)

    def extend(self, key: RunKey, until: float) -> None:
        """Push a watched deadline forward (never back); a forgotten run stays forgotten."""
        with self._changed:
            current = self._until.get(key)
            if current is not None and until > current:
                self._set(key, until)

    def valid(self, key: RunKey) -> bool:
        """Whether the run's deadline is watched and still ahead by this process's clock."""
        with self._changed:
            until = self._until.get(key)
        return until is not None and time.monotonic() < until

    def deadline(self, key: RunKey) -> float | None:
        """Until when the run's lease is surely its holder's by this process's clock (a
        deadline that passed is kept until the run is forgotten)."""
        with self._changed:
            return self._until.get(key, self._passed.get(key))

    def forget(self, key: RunKey) -> None:
        with self._changed:
            self._until.pop(key, None)
            self._passed.pop(key, None)

    def _set(self, key: RunKey, until: float) -> None:
        self._until[key] = until
        heapq.heappush(self._heap, (until, key))
        if self._heap[0] == (until, key):
            self._changed.notify()

    def _watch(self) -> None:
        while True:
            with self._changed:
                now = time.monotonic()
                due = self._take_due(now)
                if not due:
                    wait = self._heap[0][0] - now if self._heap else None
                    self._changed.wait(wait)
                    continue
            for key, until in due:
                self.late_s = max(0.0, time.monotonic() - until)
                self._expire(key)

    def _take_due(self, now: float) -> list[tuple[RunKey, float]]:
        due = []
        while self._heap and self._heap[0][0] <= now:
            until, key = heapq.heappop(self._heap)
            if self._until.get(key) == until:
                del self._until[key]
                self._passed[key] = until
                due.append((key, until))
        return due


def lease_margin(lease_seconds: float) -> float:
    return max(LEASE_MARGIN_MIN_S, lease_seconds * LEASE_MARGIN_SHARE)


def valid_until(lease_from: float, lease_seconds: float) -> float:
    """The holder's own deadline (monotonic) for a lease given or renewed at `lease_from`."""
    return lease_from + lease_seconds - lease_margin(lease_seconds)
