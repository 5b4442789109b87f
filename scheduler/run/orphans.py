"""Orphans: a function still running in its thread after its run was given up.

A thread cannot be killed. When a run is given up (its lease may be gone, or its node
may be taken for dead) `ctx.cancelled` is set, and from that instant its `once`, `item`
and `checkpoint` refuse (`RunLostError`), so effects recorded through them never
double. A body that ignores the signal goes on; once the moment has come when another
node may take the period over (`grace` after it was told), it may run beside that
takeover. That is said once, at that moment (`run_orphaned`), and how long it overlapped
once it returns (`run_orphan_returned`). A child process (`isolation="process"`) is
killed instead, and a body that watches `ctx.cancelled` stops within the grace: for
them the window is empty, but for one case no code can close: a node frozen past its
lease (SIGSTOP, a paused VM) does nothing while frozen, and once thawed a body may
return in the instant before it is told, having waited out its work in the freeze; a
function that returns past its lease's deadline is said (`run_orphaned`, `frozen`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from structlog.typing import FilteringBoundLogger

RUNS_BESIDE = "runs beside its takeover until it returns; once/item/checkpoint refuse"
RETURNED_LATE = "returned after its lease may have ended, before it could stop"


class Orphan:
    """One run given up while its function ran in this process; said once."""

    def __init__(self, log: FilteringBoundLogger, cause: str, grace: float) -> None:
        self.log = log
        self.cause = cause
        self.told_at = time.monotonic()
        self.grace = grace
        self.orphaned_at: float | None = None
        self._said = threading.Lock()

    def check(self, still_running: Callable[[], bool]) -> None:
        """At the moment a takeover may begin: say so if the function still runs."""
        if still_running():
            self.say()

    def say(self, bound: str = RUNS_BESIDE) -> None:
        """`run_orphaned`, once."""
        with self._said:
            if self.orphaned_at is not None:
                return
            self.orphaned_at = time.monotonic()
        self.log.warning(
            "run_orphaned",
            cause=self.cause,
            told_s_ago=round(self.orphaned_at - self.told_at, 3),
            bound=bound,
        )

    def returned(self, *, past_lease: bool) -> None:
        """The function returned (`past_lease`: after its lease may have ended on the
        database, so a takeover may have begun): how long it ran past that moment."""
        if past_lease:
            self.say(RETURNED_LATE)
        if self.orphaned_at is not None:
            self.log.warning(
                "run_orphan_returned",
                overlap_s=round(time.monotonic() - self.orphaned_at, 3),
                cause=self.cause,
            )


def returned_late(log: FilteringBoundLogger) -> None:
    """A function that returned after its lease's deadline had passed by this process's
    clock, before it could be told (its node was frozen, a paused VM): it may have run,
    and completed, beside a takeover."""
    log.warning("run_orphaned", cause="frozen", told_s_ago=0.0, bound=RETURNED_LATE)


def watch(
    orphan: Orphan, still_running: Callable[[], bool], *, name: str = "orphan"
) -> threading.Timer:
    """Check on the run once its grace has passed."""
    timer = threading.Timer(orphan.grace, orphan.check, args=(still_running,))
    timer.name = name
    timer.daemon = True
    timer.start()
    return timer
