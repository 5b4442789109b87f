"""A Prometheus histogram per job, kept as plain counts.

prometheus_client makes a child object per label value, with a lock for each bucket:
about 40 µs to create and a few kilobytes to keep, paid by every job the first time it
runs on a node. With 10,000 jobs that is most of the cost of a burst of first runs and
tens of megabytes of memory. Here a job's histogram is one list of counts under one
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


class JobHistogram(Collector):
    """`observe(job, value)`; each job's series appear once it has an observation."""

    def __init__(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
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
        with self._lock:
            counts = self._counts.get(job)
            if counts is None:
                counts = self._counts[job] = [0.0] * (len(self._bounds) + 1)
            counts[index] += 1
            counts[-1] += value

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self._name, self._documentation, labels=["job"])]

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            snapshot = {job: list(counts) for job, counts in self._counts.items()}
        family = HistogramMetricFamily(self._name, self._documentation, labels=["job"])
        for job, counts in sorted(snapshot.items()):
            cumulative = accumulate(counts[:-1])
            family.add_metric(
                [job],
                buckets=list(zip(self._labels, cumulative, strict=True)),
                sum_value=counts[-1],
            )
        return [family]


def _go_float(bound: float) -> str:
    """A bucket bound as Prometheus writes `le` ("+Inf", "0.5", "60.0")."""
    return "+Inf" if bound == INFINITY else repr(bound)
