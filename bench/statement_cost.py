"""What each write of a run costs the PostgreSQL server: CPU of its backends per run.

One node's share of bench b's burst, written the way a node writes it, on a fresh
database: the claim of N periods (and of the peers' shares, so that the table is as
large as in the burst), the starts in batches as the starter sends them (one guarded
transaction a batch, its jobs' locks taken), then the outcomes in batches as the
outcome writer sends them. For each stage: the CPU the server's processes of this
database spent (user and system, from /proc), and the wall time, per run. It is the
figure that showed every start batch planned anew (bench b, issue 19, eighth part).

    .venv/bin/python -m bench.statement_cost [--runs 3333] [--others 6667]
        [--start-batch 12] [--outcome-batch 1000] [--unprepared] [--hot-ready]

`--unprepared`: as a node behind a pooler, or any command: nothing prepared on the server.
`--hot-ready`: an experiment, not a schema a node can run: the runs table without the
indexes that hold `ended_status`, the lease or `retry_at`, or hold only live rows
(what the recovery sweep, renewals, overlap checks and views find rows by), so that an
outcome too may be a HOT update (no index touched; given room on its page);
what such a row would save at most. (Since migration 0011 a start is one already.)
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime

from bench import harness
from scheduler.model import Due, Finish, StartRequest
from scheduler.states import RunStatus
from scheduler.store import claims, writes
from scheduler.store.database import open_database


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3333, help="this node's share")
    parser.add_argument("--others", type=int, default=6667, help="the peers' shares")
    parser.add_argument("--start-batch", type=int, default=12)
    parser.add_argument("--outcome-batch", type=int, default=1000)
    parser.add_argument("--unprepared", action="store_true")
    parser.add_argument("--hot-ready", action="store_true")
    options = parser.parse_args()
    with harness.fresh_database() as url:
        if options.hot_ready:
            _make_hot_ready(url)
        database = open_database(url)
        if not options.unprepared:
            database.prepare_statements()
        period = datetime.now(UTC).replace(microsecond=0)
        mine = [Due(f"j{index:05d}", period, 60) for index in range(options.runs)]
        theirs = [Due(f"k{index:05d}", period, 60) for index in range(options.others)]
        stages: list[tuple[str, float, float]] = []

        def measured(name: str, step: Callable[[], object]) -> None:
            cpu, began = _server_cpu(url), time.perf_counter()
            step()
            stages.append((name, _server_cpu(url) - cpu, time.perf_counter() - began))

        won = claims.claim(database, mine, "bench").won
        measured("claim (the peers' shares)", lambda: claims.claim(database, theirs, "peer"))
        batch = options.start_batch
        measured(
            f"start, batches of {batch}",
            lambda: [
                writes.record(database, [], [StartRequest(c, True) for c in won[i : i + batch]])
                for i in range(0, len(won), batch)
            ],
        )
        size = options.outcome_batch
        measured(
            f"outcome, batches of {size}",
            lambda: [
                writes.record(
                    database,
                    [Finish(c, RunStatus.SUCCEEDED, 1, None) for c in won[i : i + size]],
                    [],
                )
                for i in range(0, len(won), size)
            ],
        )
        (running,) = harness.query(
            url, "SELECT count(*) FROM scheduler_runs WHERE status = 'succeeded'"
        )[0]
        database.dispose()
        time.sleep(1)  # a backend's statistics reach pg_stat_* when it ends, or within 1 s
        (hot, updates) = harness.query(
            url,
            "SELECT n_tup_hot_upd, n_tup_upd FROM pg_stat_user_tables "
            "WHERE relname = 'scheduler_runs'",
        )[0]
    print(
        f"runs: {options.runs}, succeeded: {running}, prepared: {not options.unprepared}, "
        f"HOT updates: {hot} of {updates}"
    )
    for name, cpu, wall in stages:
        count = options.others if name.startswith("claim") else options.runs
        print(
            f"  {name:<28} server CPU a run {cpu / count * 1e6:6.0f} µs"
            f"   wall a run {wall / count * 1e6:6.0f} µs"
        )
    return 0 if running == options.runs else 1


def _make_hot_ready(url: str) -> None:
    indexes = harness.query(
        url,
        "SELECT indexname FROM pg_indexes WHERE tablename = 'scheduler_runs' AND indexdef ~ %s",
        ("status|lease_expires_at|retry_at|live",),
    )
    for (name,) in indexes:
        harness.query(url, f'DROP INDEX "{name}"')
    harness.query(url, "ALTER TABLE scheduler_runs SET (fillfactor = 50)")


def _server_cpu(url: str) -> float:
    """CPU seconds spent so far by the server processes serving this database."""
    pids = harness.query(
        url,
        "SELECT pid FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    total = 0.0
    for (pid,) in pids:
        try:
            total += harness.process_cpu_seconds(pid)
        except FileNotFoundError:  # a backend that ended meanwhile
            continue
    return total


if __name__ == "__main__":
    sys.exit(main())
