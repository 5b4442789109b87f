"""One node's run path in one process: what a short run costs, without the noise of
three nodes and their start-up.

Claims N periods of N jobs on a fresh PostgreSQL database, runs them through a real
Dispatcher (the same bodies as the scenarios: one O_APPEND line each), and prints the
CPU this process spent per run (user and system), the CPU of the whole machine per run,
and the context switches per run. Run it under a profiler to see where a run's time
goes, e.g. `py-spy record --gil -- .venv/bin/python -m bench.run_path`.

    .venv/bin/python -m bench.run_path [--runs 10000] [--workers 32] [--log-level warning]

`--log-level warning` leaves out a run's info lines, run_started and run_succeeded
(this script claims without the daemon, so there is no run_claimed): what the two
cost a run is the difference.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path

import structlog

from bench import harness
from scheduler import logs
from scheduler.config import DEFAULT_WORKERS
from scheduler.model import ClaimResult, Due
from scheduler.node.daemon import tune_garbage_collection
from scheduler.registry import Job, job
from scheduler.run.context import RunContext
from scheduler.run.dispatcher import Dispatcher
from scheduler.store import claims
from scheduler.store.database import open_database


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--log-level", choices=logs.LOG_LEVELS, default="info")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        execution_log = Path(folder) / "executions.log"
        # Our log lines go where a node's go, to a file, not to this terminal.
        with (Path(folder) / "node.log").open("w") as out:
            stdout, sys.stdout = sys.stdout, out
            try:
                figures = _measure(options.runs, options.workers, options.log_level, execution_log)
            finally:
                sys.stdout = stdout
        executed = len(execution_log.read_text().splitlines())
    print(f"runs executed: {executed} of {options.runs}, workers {options.workers}")
    for name, value in figures.items():
        print(f"  {name:<36} {value}")
    return 0 if executed == options.runs else 1


def _measure(count: int, workers: int, level: str, execution_log: Path) -> dict[str, str]:
    logs.configure(logs.LogFormat.JSON, level)

    def body(ctx: RunContext) -> None:
        with execution_log.open("a") as log:
            log.write(f"{ctx.job} {ctx.period.isoformat()} {ctx.node} {ctx.attempt}\n")

    jobs: dict[str, Job] = {
        f"j{index:05d}": job("0 0 1 1 *", name=f"j{index:05d}")(body) for index in range(count)
    }
    with harness.fresh_database() as url:
        database = open_database(url)
        database.prepare_statements()  # as a node on a direct connection does
        period = datetime.now(UTC).replace(microsecond=0)
        due = [Due(name, period, 30) for name in jobs]
        log = structlog.get_logger("scheduler").bind(node="bench")
        dispatcher = Dispatcher(database, jobs, "bench", workers, log)
        # As a node does once its jobs are loaded: the collector no longer walks them.
        tune_garbage_collection()
        futures: list[Future[None]] = []

        def dispatch(part: ClaimResult) -> None:
            futures.extend(dispatcher.submit(claim) for claim in part.won)

        machine_before, usage_before = harness.machine_busy_seconds(), _usage()
        began = time.perf_counter()
        claims.claim(database, due, "bench", committed=dispatch)
        claimed = time.perf_counter()
        for future in futures:
            future.result()
        ended = time.perf_counter()
        machine, usage = harness.machine_busy_seconds() - machine_before, _usage()
        dispatcher.drain(1)
        database.dispose()
    user, system, switches = (now - then for now, then in zip(usage, usage_before, strict=True))
    per_run = 1_000_000 / count
    return {
        "claim and dispatch": f"{claimed - began:.2f} s",
        "all runs ended": f"{ended - began:.2f} s",
        "this process, CPU per run": f"{(user + system) * per_run:.0f} µs",
        "  of which in the kernel": f"{system * per_run:.0f} µs",
        "whole machine, CPU per run": f"{machine * per_run:.0f} µs",
        "context switches per run": f"{switches / count:.1f}",
    }


def _usage() -> tuple[float, float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime, float(usage.ru_nvcsw + usage.ru_nivcsw)


if __name__ == "__main__":
    sys.exit(main())
