"""The console's overview at fleet size: 1,000 jobs x 50 periods, against the same page
for 10 jobs (the baseline), over real HTTP from the server `scheduler console` runs.

Seeds a fresh PostgreSQL database (and a SQLite file) with N every-minute jobs and 50
recorded periods each (mostly succeeded, some failed, skipped and missed), serves the
console in this process, and fetches each page three times after one warm-up, as a
browser does (gzip). Prints the median time, the ratio to the baseline, the statements
the page sent (counted at the driver) and the body size.

    .venv/bin/python -m bench.console [--jobs 1000] [--periods 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import harness
from scheduler import http as operations_http
from scheduler.store import migrate
from scheduler.store.database import Database, open_database

STATUSES = ("succeeded",) * 44 + ("failed", "failed", "skipped", "skipped", "missed", "timed_out")
PAGES = (
    ("overview, first page (100 jobs)", "/"),
    ("overview, the last page (jobs 901-1000)", "/?page=10"),
    ("overview, filtered by status (reads all)", "/?status=failed"),
)


def seed(database: Database, count: int, periods: int) -> None:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    names = [f"job-{n:04d}" for n in range(count)]
    with database.transaction() as connection:
        harness.insert_rows(
            connection,
            "scheduler_jobs",
            [
                {
                    "name": name,
                    "cron": "* * * * *",
                    "timezone": "UTC",
                    "first_seen": now - timedelta(days=1),
                    "last_seen": now - timedelta(days=1),
                    "paused": False,
                    "lease_seconds": 30.0,
                    "retries": 0,
                    "alert_after_seconds": 60.0,
                }
                for name in names
            ],
        )
        rows = [
            _run(name, now - timedelta(minutes=periods - index), STATUSES[(n + index) % 50])
            for n, name in enumerate(names)
            for index in range(periods)
        ]
        harness.insert_rows(connection, "scheduler_runs", rows)
    with database.autocommit() as connection:
        connection.execute("ANALYZE")  # as autovacuum would have, on both backends


def _run(job: str, period: datetime, status: str) -> dict[str, Any]:
    ran = status not in ("skipped", "missed")
    return {
        "job": job,
        "period": period,
        "id": uuid.uuid4().hex,
        "status": status,
        "reason": None if ran else ("overlap" if status == "skipped" else "window"),
        "origin": "schedule",
        "attempt": 1,
        "holder": "bench-node" if ran else None,
        "lease_seconds": 30.0,
        "claimed_at": period,
        "started_at": period if ran else None,
        "finished_at": period + timedelta(seconds=1),
        "duration_ms": 120 if ran else None,
        "error_type": "RuntimeError" if status == "failed" else None,
        "error_message": "boom" if status == "failed" else None,
    }


@contextmanager
def serving(url: str) -> Iterator[tuple[int, list[str]]]:
    """The console on a free port of this process; the statements it sends."""
    database = open_database(url, connections=4)
    server = operations_http.bind("127.0.0.1:0")
    assert server is not None
    server.start(database, None)
    try:
        with database.recording() as sent:
            yield server.address.port, sent
    finally:
        server.stop()
        database.dispose()


def fetch(port: int, path: str) -> tuple[float, int]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers={"Accept-Encoding": "gzip"}
    )
    began = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as response:
        body = response.read()
        assert response.status == 200
    return time.perf_counter() - began, len(body)


def measure(url: str, repeats: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    with serving(url) as (port, sent):
        for name, path in PAGES:
            fetch(port, path)
            times = []
            for _ in range(repeats):
                sent.clear()
                took, size = fetch(port, path)
                times.append(took)
            results[name] = {
                "median_ms": statistics.median(times) * 1000,
                "statements": len(sent),
                "gzip_kb": size / 1024,
            }
    return results


def backends(count: int, periods: int) -> Iterator[tuple[str, str]]:
    with harness.fresh_database() as url:
        database = open_database(url)
        seed(database, count, periods)
        database.dispose()
        yield "postgresql", url
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        database = open_database(url, must_exist=False)
        migrate.upgrade(database)
        seed(database, count, periods)
        database.dispose()
        yield "sqlite", url


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--baseline-jobs", type=int, default=10)
    parser.add_argument("--periods", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args(argv)
    print("command: .venv/bin/python -m bench.console " + " ".join(sys.argv[1:]))
    print(
        f"{'backend':<11} {'page':<42} {'jobs':>5} {'median ms':>10} {'x base':>7} "
        f"{'stmts':>6} {'gzip kB':>8}"
    )
    for count, label in ((options.baseline_jobs, "base"), (options.jobs, "fleet")):
        del label
        for backend, url in backends(count, options.periods):
            results = measure(url, options.repeats)
            for page, figures in results.items():
                base = BASELINES.setdefault((backend, page), figures["median_ms"])
                print(
                    f"{backend:<11} {page:<42} {count:>5} {figures['median_ms']:>10.1f} "
                    f"{figures['median_ms'] / base:>7.2f} {figures['statements']:>6.0f} "
                    f"{figures['gzip_kb']:>8.1f}"
                )
    return 0


BASELINES: dict[tuple[str, str], float] = {}

if __name__ == "__main__":
    sys.exit(main())
