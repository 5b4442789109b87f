"""When is each job next due: a heap of (claim time, period, job), popped an instant at a time.

A job with `jitter` is claimed a deterministic delay after its period, derived from
(job, period), so jobs that share a schedule spread out; the period stays nominal.
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
        # Popped (job, period) whose next period is not computed yet; see pop_due.
        self._popped: list[tuple[Job, datetime]] = []
        for job in self._jobs.values():
            # Periods whose jitter has not yet run out are still this loop's to claim.
            self._push(job, now - job.policy.jitter)

    def _push(self, job: Job, after: datetime) -> None:
        period = job.schedule.next_after(after)
        if period is not None:
            due = period + jitter_delay(job, period) if job.policy.jitter else period
            heapq.heappush(self._heap, (due, period, job.name))

    def next_due(self) -> datetime | None:
        self._reschedule()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: datetime) -> list[tuple[Job, datetime]]:
        """Every (job, period) whose claim time is at or before `now`.

        Each job is rescheduled after its period by the next call of `next_due` or
        `pop_due`, not here: computing the fire times of thousands of jobs due at once
        is slow next to claiming them, and the daemon claims the periods first.
        """
        self._reschedule()
        due: list[tuple[Job, datetime]] = []
        while self._heap and self._heap[0][0] <= now:
            _, period, name = heapq.heappop(self._heap)
            due.append((self._jobs[name], period))
        self._popped = due.copy()
        return due

    def _reschedule(self) -> None:
        for job, period in self._popped:
            self._push(job, period)
        self._popped.clear()
