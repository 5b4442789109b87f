"""A Prometheus histogram per job, kept as plain counts.

prometheus_client makes a child object per label value, with a lock for each bucket,
slow to create and kilobytes to keep, paid by every job the first time it runs on a
node. With thousands of jobs that was most of the cost of a burst of first runs and of
the node's memory. Here a job's histogram is one list of counts under one
lock, rendered into the usual `_bucket`, `_count` and `_sum` series at scrape time.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from itertools import accumulate

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

INFINITY = float("inf")
# The key of the one histogram that all jobs share when they are not told apart.
ALL_JOBS = ""


class JobHistogram(Collector):
    """`observe(job, value)`; each job's series appear once it has an observation.

    Per job only when `per_job` is set: a fleet of 10,000 jobs would otherwise serve
    17 series per job and histogram (24 MB a scrape). By default every job's
    observations fall into one histogram without a `job` label.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[float],
        registry: CollectorRegistry,
        *,
        per_job: bool = False,
    ) -> None:
        self.per_job = per_job
        self._name = name
        self._documentation = documentation
        self._bounds = (*sorted(float(bound) for bound in buckets), INFINITY)
        self._labels = [_go_float(bound) for bound in self._bounds]
        # Per job: one count per bucket (not cumulative), then the sum of observations.
        self._counts: dict[str, list[float]] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def observe(self, job: str, value: float) -> None:
        index = bisect_left(self._bounds, value)  # the first bucket whose bound is >= value
        if not self.per_job:
            job = ALL_JOBS
        with self._lock:
            counts = self._counts.get(job)
            if counts is None:
                counts = self._counts[job] = [0.0] * (len(self._bounds) + 1)
            counts[index] += 1
            counts[-1] += value

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self._name, self._documentation, labels=self._label())]

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            snapshot = {job: list(counts) for job, counts in self._counts.items()}
        labels = self._label()
        family = HistogramMetricFamily(self._name, self._documentation, labels=labels)
        for job, counts in sorted(snapshot.items()):
            if (job == ALL_JOBS) == bool(labels):
                continue  # kept from before `per_job` changed: not what is served now
            cumulative = accumulate(counts[:-1])
            family.add_metric(
                [job] if labels else [],
                buckets=list(zip(self._labels, cumulative, strict=True)),
                sum_value=counts[-1],
            )
        return [family]

    def _label(self) -> list[str]:
        return ["job"] if self.per_job else []


def _go_float(bound: float) -> str:
    """A bucket bound as Prometheus writes `le` ("+Inf", "0.5", "60.0")."""
    return "+Inf" if bound == INFINITY else repr(bound)
