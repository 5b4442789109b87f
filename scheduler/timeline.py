"""When is each job next due: a heap of (period, job), popped a whole instant at a time."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from datetime import datetime

from scheduler.registry import Job


class Timeline:
    def __init__(self, jobs: Iterable[Job], now: datetime) -> None:
        self._jobs = {job.name: job for job in jobs}
        self._heap: list[tuple[datetime, str]] = []
        for job in self._jobs.values():
            self._push(job, now)

    def _push(self, job: Job, after: datetime) -> None:
        period = job.schedule.next_after(after)
        if period is not None:
            heapq.heappush(self._heap, (period, job.name))

    def next_due(self) -> datetime | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: datetime) -> list[tuple[Job, datetime]]:
        """Every (job, period) due at or before `now`; each job is rescheduled after its period."""
        due: list[tuple[Job, datetime]] = []
        while self._heap and self._heap[0][0] <= now:
            period, name = heapq.heappop(self._heap)
            job = self._jobs[name]
            due.append((job, period))
            self._push(job, period)
        return due
