"""What alert events add to the outcome write (issue 18): PostgreSQL's finish statement
carries each outcome's candidate events and keeps those of the rows it wrote, so every
success asks whether the job's previous settled period failed (`recovered`).

Claims and starts N runs of N jobs (each with `--history` earlier succeeded periods),
then writes their outcomes in batches of 64 (the
outcome writer's group size) three ways, on fresh rows each time:

- `successes, no candidates`: the statement with its event arrays empty (what a write
  without alerting costs, the CTE shape aside);
- `successes`: every outcome a `recovered` candidate, none kept (the common case);
  each looks up the job's newest `failed`/`recovered` event;
- `failures`: every outcome a final failure, one `failed` event inserted each.

Prints the median milliseconds per batch and microseconds per outcome.

    .venv/bin/python -m bench.alert_events [--runs 4096] [--history 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from unittest import mock

from bench import harness
from scheduler.model import Claim, Due, Failure, Finish, StartRequest
from scheduler.states import RunStatus
from scheduler.store import claims, writes
from scheduler.store import events as alert_events
from scheduler.store.database import Database, open_database

BATCH = 64
PERIOD = datetime(2026, 12, 1, tzinfo=UTC)
BOOM = Failure("RuntimeError", "boom", "Traceback …")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4096)
    parser.add_argument("--history", type=int, default=50)
    options = parser.parse_args()
    with harness.fresh_database() as url:
        database = open_database(url)
        try:
            figures = _measure(database, options.runs, options.history)
        finally:
            database.dispose()
    harness.drop_template()
    print(f"{options.runs} outcomes a way, batches of {BATCH}, {options.history} periods a job")
    for name, (batch_ms, per_outcome_us) in figures.items():
        print(f"  {name:<28} {batch_ms:6.2f} ms a batch  {per_outcome_us:6.1f} µs an outcome")
    return 0


def _held(database: Database, names: Sequence[str], period: datetime) -> list[Claim]:
    won = claims.claim(database, [Due(name, period, 300) for name in names], "bench").won
    for start in range(0, len(won), BATCH):
        writes.record(database, [], [StartRequest(claim) for claim in won[start : start + BATCH]])
    return won


def _write(database: Database, outcomes: Sequence[Finish]) -> list[float]:
    timings = []
    for start in range(0, len(outcomes), BATCH):
        began = time.perf_counter()
        writes.record(database, outcomes[start : start + BATCH], [])
        timings.append(time.perf_counter() - began)
    return timings


def _measure(database: Database, count: int, history: int) -> dict[str, tuple[float, float]]:
    names = [f"j{index:05d}" for index in range(count)]
    for back in range(history, 0, -1):
        done = _held(database, names, PERIOD - timedelta(minutes=back))
        _write(database, [Finish(claim, RunStatus.SUCCEEDED, 1) for claim in done])
    figures: dict[str, tuple[float, float]] = {}
    ways = [
        ("successes, no candidates", RunStatus.SUCCEEDED, True),
        ("successes", RunStatus.SUCCEEDED, False),
        ("failures", RunStatus.FAILED, False),
    ]
    for offset, (name, status, empty) in enumerate(ways):
        held = _held(database, names, PERIOD + timedelta(minutes=offset))
        failure = BOOM if status is RunStatus.FAILED else None
        outcomes = [Finish(claim, status, 1, failure) for claim in held]
        if empty:
            with mock.patch.object(alert_events, "of_finish", return_value=[]):
                timings = _write(database, outcomes)
        else:
            timings = _write(database, outcomes)
        median = statistics.median(timings)
        figures[name] = (median * 1000, median / BATCH * 1_000_000)
    return figures


if __name__ == "__main__":
    sys.exit(main())
