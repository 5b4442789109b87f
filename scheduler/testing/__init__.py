"""Test scheduled jobs on the real scheduler, in-process, with a virtual clock.

    from scheduler.testing import Harness

    def test_runs_on_the_last_day(tmp_path):
        with Harness([month_end], start="2026-02-01T00:00Z") as harness:
            harness.clock.advance("60d")
            harness.assert_periods("month_end", ["2026-02-28T23:00Z", "2026-03-31T23:00Z"])

The pytest plugin (`scheduler.testing.plugin`) gives the same as fixtures. See the
guide, docs/how-to/testing.md.
"""

from __future__ import annotations

from scheduler.testing.clock import VirtualClock
from scheduler.testing.faults import NodeDied, TimedOut, crash_after, crash_here, elapse
from scheduler.testing.harness import Fault, Harness

__all__ = [
    "Fault",
    "Harness",
    "NodeDied",
    "TimedOut",
    "VirtualClock",
    "crash_after",
    "crash_here",
    "elapse",
]
