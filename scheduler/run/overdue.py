"""A timed-out function that goes on running in its thread, said once.

A thread cannot be killed: a function past its timeout is recorded `timed_out`, told to
stop (`ctx.cancelled`) and waited for, holding its lease, and its job's later periods
are skipped meanwhile. One that honours the signal returns within moments. One still
running as long again as its timeout after its deadline (a minute at most) ignores it,
and the node says so once, at warning level (`run_overdue`), so that somebody looks
before more periods are skipped. `scheduler check` and the console show such a run as
long as it lasts (a `timed_out` row whose lease is still held).
"""

from __future__ import annotations

import time

from structlog.typing import FilteringBoundLogger

from scheduler.run.failures import Lingering

# The most a function may run past its deadline before it is called overdue.
GRACE_MAX_S = 60.0


def overdue_after(timeout: float) -> float:
    """Seconds from the call to the moment a function still running is overdue."""
    return timeout + min(timeout, GRACE_MAX_S)


def outlast(lingering: Lingering, log: FilteringBoundLogger) -> None:
    """Wait until the function returns, saying once if it is still running when overdue."""
    due = lingering.began + overdue_after(lingering.timeout)
    lingering.thread.join(max(0.0, due - time.monotonic()))
    if lingering.thread.is_alive():
        log.warning(
            "run_overdue",
            running_s=round(time.monotonic() - lingering.began, 1),
            timeout_s=lingering.timeout,
        )
        lingering.thread.join()
