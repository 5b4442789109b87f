"""`/metrics` at fleet size: the body a scrape of one node serves, and how long it takes
to render, for N jobs that have all run on the node, with per-job histograms (as before
they became opt-in: the baseline) and without (the default).

Seeds a fresh PostgreSQL database with N registered jobs and one succeeded run each
(the database gauges read them at scrape time), records a run of every job on this
node's counters and histograms, then renders the registry as `/metrics` does, three
times per configuration, and prints the medians and their ratios.

    .venv/bin/python -m bench.metrics_size [--jobs 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from prometheus_client.exposition import generate_latest

from bench import harness
from scheduler import metrics
from scheduler.http import GZIP_LEVEL
from scheduler.store.database import Database, open_database

CONFIGURATIONS = (("per-job histograms (baseline)", True), ("default", False))


def seed(database: Database, count: int) -> list[str]:
    """N hourly jobs seen a day ago, each with one succeeded run an hour ago."""
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    names = [f"job-{n:05d}" for n in range(count)]
    job_rows = [
        {
            "name": name,
            "cron": "0 * * * *",
            "timezone": "UTC",
            "first_seen": now - timedelta(days=1),
            "last_seen": now - timedelta(days=1),
            "paused": False,
            "lease_seconds": 30.0,
            "retries": 0,
            "alert_after_seconds": 3600.0,
        }
        for name in names
    ]
    run_rows = [
        {
            "job": name,
            "period": now,
            "id": uuid.uuid4().hex,
            "status": "succeeded",
            "origin": "schedule",
            "attempt": 1,
            "holder": "bench",
            "lease_seconds": 30.0,
            "claimed_at": now,
            "started_at": now,
            "finished_at": now + timedelta(seconds=1),
            "duration_ms": 1000,
        }
        for name in names
    ]
    with database.transaction() as connection:
        harness.insert_rows(connection, "scheduler_jobs", job_rows)
        harness.insert_rows(connection, "scheduler_runs", run_rows)
    return names


def observe(names: Sequence[str]) -> None:
    """A run of every job on this node, seen both ways (the histograms keep both)."""
    started = datetime.now(UTC) - timedelta(seconds=0.2)
    for per_job in (True, False):
        metrics.per_job_histograms(per_job)
        for name in names:
            metrics.record_start(name, started)
            metrics.record_finish(name, "succeeded", 150)


def measure(repeats: int) -> dict[str, dict[str, float]]:
    results = {}
    for label, per_job in CONFIGURATIONS:
        metrics.per_job_histograms(per_job)
        renders, sizes, packed, packing = [], [], [], []
        for _ in range(repeats):
            began = time.perf_counter()
            body = generate_latest(metrics.REGISTRY)
            renders.append(time.perf_counter() - began)
            began = time.perf_counter()
            compressed = gzip.compress(body, compresslevel=GZIP_LEVEL)
            packing.append(time.perf_counter() - began)
            sizes.append(len(body))
            packed.append(len(compressed))
        results[label] = {
            "body_mb": statistics.median(sizes) / 1e6,
            "gzip_mb": statistics.median(packed) / 1e6,
            "render_s": statistics.median(renders),
            "gzip_s": statistics.median(packing),
            "series": float(sum(1 for line in body.splitlines() if not line.startswith(b"#"))),
        }
    metrics.per_job_histograms(False)
    return results


def report(results: dict[str, dict[str, float]], count: int, repeats: int) -> None:
    baseline = results[CONFIGURATIONS[0][0]]
    print(f"/metrics of one node, {count:,} jobs, median of {repeats}")
    print(f"{'':32}{'series':>9}{'body MB':>10}{'gzip MB':>10}{'render s':>10}{'gzip s':>9}")
    for label, figures in results.items():
        print(
            f"{label:32}{figures['series']:>9,.0f}{figures['body_mb']:>10.2f}"
            f"{figures['gzip_mb']:>10.2f}{figures['render_s']:>10.2f}{figures['gzip_s']:>9.2f}"
        )
    default = results[CONFIGURATIONS[1][0]]
    print(
        f"default / baseline: body {default['body_mb'] / baseline['body_mb']:.2f}, "
        f"gzip body {default['gzip_mb'] / baseline['body_mb']:.3f}, "
        f"render {default['render_s'] / baseline['render_s']:.2f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args(argv)
    try:
        with harness.fresh_database() as url:
            database = open_database(url)
            try:
                names = seed(database, arguments.jobs)
                observe(names)
                metrics.watch(database)
                results = measure(arguments.repeats)
            finally:
                metrics.unwatch()
                database.dispose()
    finally:
        harness.drop_template()
    report(results, arguments.jobs, arguments.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
