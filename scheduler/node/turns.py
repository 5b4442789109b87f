"""Whether the daemon's main loop still takes its turns, for /healthz.

The heartbeat, the liveness session and the HTTP server each have a thread of their
own, so a node whose main loop is stuck (blocked in a write nobody reads, waiting on a
lock) still beats and still answers. The loop says here, each turn, when its next turn
is due; /healthz reads that without a database call. The loop is event driven and may
sleep for an hour on an idle node, so "wedged" is judged against the loop's own due
time plus a grace, never against the time since its last turn.
"""

from __future__ import annotations

import math
import time
from datetime import timedelta

from scheduler import config

DEFAULT_GRACE = config.parse_option_duration("--healthz-grace", config.DEFAULT_HEALTHZ_GRACE)


class LoopTurns:
    """The main loop's next due moment (monotonic), set by the loop, read by /healthz."""

    def __init__(self, grace: timedelta = DEFAULT_GRACE) -> None:
        self.grace = grace.total_seconds()
        # Start-up counts as the first turn: due at once.
        self._due = time.monotonic()

    def waiting(self, seconds: float | None) -> None:
        """The loop goes to sleep: its next turn is due in `seconds` (None: only when
        told to stop, which is never late)."""
        self._due = math.inf if seconds is None else time.monotonic() + max(0.0, seconds)

    def moved(self) -> None:
        """The loop made progress inside a turn (a claim's chunk committed): the
        rest of the turn is due from now."""
        self._due = time.monotonic()

    def stopping(self) -> None:
        """The loop has ended: the drain that follows is bounded by `--grace`."""
        self._due = math.inf

    def overdue(self) -> float:
        """How many seconds past its due time the loop is (0 when it is not)."""
        return max(0.0, time.monotonic() - self._due)

    def stalled(self) -> str | None:
        """One line saying what is overdue and by how long, or None while on time."""
        late = self.overdue()
        if late <= self.grace:
            return None
        return (
            f"main loop overdue: its next turn was due {late:.1f}s ago "
            f"(grace {self.grace:g}s, --healthz-grace)"
        )
