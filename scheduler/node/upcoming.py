"""When is each job next due: a heap of (claim time, period, job), popped an instant at a time.

A job with `jitter` is claimed a deterministic delay after its period, derived from
(job, period), so jobs that share a schedule spread out; the period stays nominal. The
heap also counts the periods due at each claim time, so that the daemon knows ahead of
an instant whether it is worth preparing (see `scheduler.node.daemon.PREPARE_AHEAD_S`).
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable
from datetime import datetime, timedelta

from scheduler.registry import Job


def jitter_delay(job: Job, period: datetime) -> timedelta:
    """The same delay on every node for the same (job, period), in [0, jitter)."""
    if not job.policy.jitter:
        return timedelta(0)
    digest = hashlib.blake2b(f"{job.name}|{period.isoformat()}".encode(), digest_size=8).digest()
    fraction = int.from_bytes(digest, "big") / 2**64
    return timedelta(milliseconds=int(job.policy.jitter.total_seconds() * 1000 * fraction))


class Upcoming:
    def __init__(self, jobs: Iterable[Job], now: datetime) -> None:
        self._jobs = {job.name: job for job in jobs}
        self._heap: list[tuple[datetime, datetime, str]] = []
        # How many entries of the heap share each claim time.
        self._counts: dict[datetime, int] = {}
        # Popped (claim time, job, period) whose next period is not computed yet; see
        # pop_until.
        self._popped: list[tuple[datetime, Job, datetime]] = []
        for job in self._jobs.values():
            # Periods whose jitter has not yet run out are still this loop's to claim.
            self._push(job, now - job.policy.jitter)

    def _push(self, job: Job, after: datetime) -> None:
        if job.schedule is None:  # a template: its schedules fire its periods
            return
        period = job.schedule.next_after(after)
        if period is not None:
            due = period + jitter_delay(job, period) if job.policy.jitter else period
            heapq.heappush(self._heap, (due, period, job.name))
            self._counts[due] = self._counts.get(due, 0) + 1

    def next_instant(self) -> tuple[datetime, int] | None:
        """The next claim time and how many periods are due at it."""
        self._reschedule()
        if not self._heap:
            return None
        due = self._heap[0][0]
        return due, self._counts[due]

    def pop_until(self, horizon: datetime) -> list[tuple[datetime, Job, datetime]]:
        """Every (claim time, job, period) whose claim time is at or before `horizon`,
        earliest first.

        Each job is rescheduled after its period by the next call of `next_instant`
        or `pop_until`, not here: computing the fire times of thousands of jobs
        due at once is slow next to claiming them, and the daemon claims the periods
        first.
        """
        self._reschedule()
        due: list[tuple[datetime, Job, datetime]] = []
        heap, counts = self._heap, self._counts
        while heap and heap[0][0] <= horizon:
            at, period, name = heapq.heappop(heap)
            left = counts[at] - 1
            if left:
                counts[at] = left
            else:
                del counts[at]
            due.append((at, self._jobs[name], period))
        self._popped = due.copy()
        return due

    def _reschedule(self) -> None:
        for _, job, period in self._popped:
            self._push(job, period)
        self._popped.clear()
