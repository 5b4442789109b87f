"""The compact per-job histogram renders what prometheus_client's own Histogram would."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from scheduler.histograms import JobHistogram

BUCKETS = (0.01, 0.5, 1, 60)
VALUES = {"a": [0.0, 0.01, 0.3, 0.5, 2.0, 61.0, 3600.0], "b": [1.0]}


def _exposition(histogram_of: str, *, per_job: bool = True) -> dict[str, float]:
    registry = CollectorRegistry()
    if histogram_of == "ours":
        ours = JobHistogram("lag_seconds", "doc", BUCKETS, registry, per_job=per_job)
        for job, values in VALUES.items():
            for value in values:
                ours.observe(job, value)
    elif per_job:
        theirs = Histogram("lag_seconds", "doc", ["job"], buckets=BUCKETS, registry=registry)
        for job, values in VALUES.items():
            for value in values:
                theirs.labels(job).observe(value)
    else:
        shared = Histogram("lag_seconds", "doc", buckets=BUCKETS, registry=registry)
        for values in VALUES.values():
            for value in values:
                shared.observe(value)
    series: dict[str, float] = {}
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("#") or "_created" in line:
            continue
        name, number = line.rsplit(" ", 1)
        series[name] = float(number)
    return series


def test_series_match_prometheus_client_histogram() -> None:
    ours = _exposition("ours")
    assert ours == _exposition("theirs")
    # A value equal to a bound falls in that bound's bucket (Prometheus `le`).
    assert ours['lag_seconds_bucket{job="a",le="0.01"}'] == 2
    assert ours['lag_seconds_bucket{job="a",le="0.5"}'] == 4
    assert ours['lag_seconds_bucket{job="a",le="+Inf"}'] == 7
    assert ours['lag_seconds_count{job="b"}'] == 1
    assert ours['lag_seconds_sum{job="a"}'] == pytest.approx(3663.81)


def test_a_job_without_observations_has_no_series() -> None:
    registry = CollectorRegistry()
    JobHistogram("lag_seconds", "doc", BUCKETS, registry)
    text = generate_latest(registry).decode()
    assert "lag_seconds_count" not in text
    assert "# TYPE lag_seconds histogram" in text


def test_by_default_every_job_shares_one_unlabelled_histogram() -> None:
    shared = _exposition("ours", per_job=False)
    assert shared == _exposition("theirs", per_job=False)
    assert shared["lag_seconds_count"] == 8
    assert not [series for series in shared if "job=" in series]
