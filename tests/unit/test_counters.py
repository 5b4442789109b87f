"""The compact labelled counter renders what prometheus_client's own Counter would."""

from __future__ import annotations

import threading
import time

from prometheus_client import CollectorRegistry, Counter, generate_latest

from scheduler.counters import LabelledCounter

COUNTS = {("a", "succeeded"): 3, ("a", "failed"): 1, ("b", "succeeded"): 2}


def _exposition(counter_of: str) -> dict[str, float]:
    registry = CollectorRegistry()
    if counter_of == "ours":
        ours = LabelledCounter("runs", "doc", ["job", "status"], registry)
        for values, count in COUNTS.items():
            for _ in range(count):
                ours.inc(*values)
    else:
        theirs = Counter("runs", "doc", ["job", "status"], registry=registry)
        for values, count in COUNTS.items():
            for _ in range(count):
                theirs.labels(*values).inc()
    series: dict[str, float] = {}
    for line in generate_latest(registry).decode().splitlines():
        name, number = line.rsplit(" ", 1)
        series[name] = float(number) if not line.startswith("#") else 0.0
    return series


def test_series_match_prometheus_client_counter() -> None:
    before = time.time()
    ours, theirs = _exposition("ours"), _exposition("theirs")
    assert ours.keys() == theirs.keys()  # HELP, TYPE, _total and _created lines alike
    for name, number in ours.items():
        if name.startswith("#"):
            continue
        if "_created" in name:
            assert before <= number <= time.time(), name
        else:
            assert number == theirs[name], name
    assert ours['runs_total{job="a",status="succeeded"}'] == 3
    assert ours['runs_total{job="b",status="succeeded"}'] == 2


def test_a_series_appears_once_counted() -> None:
    registry = CollectorRegistry()
    counter = LabelledCounter("runs", "doc", ["job", "status"], registry)
    assert "runs_total{" not in generate_latest(registry).decode()
    assert counter.value("a", "failed") == 0
    counter.inc("a", "failed", amount=2)
    assert 'runs_total{job="a",status="failed"} 2.0' in generate_latest(registry).decode()
    assert counter.value("a", "failed") == 2


def test_increments_from_many_threads_are_all_counted() -> None:
    counter = LabelledCounter("runs", "doc", ["job"], CollectorRegistry())

    def count() -> None:
        for index in range(2_000):
            counter.inc(f"j{index % 7}")

    threads = [threading.Thread(target=count) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(counter.value(f"j{index}") for index in range(7)) == 16_000
