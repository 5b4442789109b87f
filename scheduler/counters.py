"""A Prometheus counter by label values, kept as plain numbers.

prometheus_client makes a child object per label value (a lock and a value object,
about 600 bytes), created by the first increment: with thousands of jobs, every job's
first outcome on a node paid for one, and a burst of first runs paid for thousands.
Here a series is one number in a dict under one lock, rendered into the usual `_total`
and `_created` series at scrape time (the same exposition as prometheus_client's
`Counter`, tested against it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector


class LabelledCounter(Collector):
    """`inc(*values)`: one more for that series; a series appears once it is counted."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labels: Sequence[str],
        registry: CollectorRegistry,
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._labels = list(labels)
        # Per series (its label values): the count, and when it was first counted.
        self._counts: dict[tuple[str, ...], list[float]] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def inc(self, *values: str, amount: float = 1.0) -> None:
        with self._lock:
            counted = self._counts.get(values)
            if counted is None:
                self._counts[values] = [amount, time.time()]
            else:
                counted[0] += amount

    def value(self, *values: str) -> float:
        """The count of one series (0 when never counted), for tests and checks."""
        with self._lock:
            counted = self._counts.get(values)
            return counted[0] if counted is not None else 0.0

    def describe(self) -> Iterable[Metric]:
        return [CounterMetricFamily(self._name, self._documentation, labels=self._labels)]

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            snapshot = sorted((values, list(counted)) for values, counted in self._counts.items())
        family = CounterMetricFamily(self._name, self._documentation, labels=self._labels)
        for values, (count, created) in snapshot:
            family.add_metric(list(values), count, created=created)
        return [family]
