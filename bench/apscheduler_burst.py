"""The burst without a database: APScheduler 3 firing N jobs due at one instant in one
process, the baseline that bench b measures in the same run (`b_burst`).

What it shows is what the machine itself allows a scheduler that keeps nothing: no
claims, no leases, no row per run, one process. Each body writes the moment it began to
an O_APPEND log, as the nodes' bodies write theirs. APScheduler 3 skips a run more than
`misfire_grace_time` late (1 s by default); the baseline lets every run through, so
that it measures the same work as the nodes, and counts what it did not run.

    .venv/bin/python -m bench.apscheduler_burst --jobs 10000 --due EPOCH --log FILE [--workers 32]
        [--log-lines FILE]

With `--log-lines`, APScheduler's own INFO lines ("Running job", "executed
successfully": two a run) go to FILE through the standard library, as a team that logs
at INFO runs it; without, nothing is logged, which is how b measures its baseline.

Prints one JSON object: last_start and last_finish (seconds after the instant), cpu_s
(this process, from half a second before the instant until every body ran), started
(bodies run), startup_s (adding the jobs and starting the scheduler).
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--due", type=float, required=True, help="the instant, epoch seconds")
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=32)  # a node's default
    parser.add_argument("--log-lines", type=Path, help="APScheduler's INFO lines go here")
    options = parser.parse_args()
    began = time.monotonic()
    if options.log_lines is not None:
        logging.basicConfig(filename=options.log_lines, level=logging.INFO)
    moment = datetime.fromtimestamp(options.due, UTC)
    log_path = str(options.log)
    finished = threading.Semaphore(0)

    def body(name: str) -> None:
        started = time.time()
        with open(log_path, "a") as log:  # noqa: PTH123 - the same write as the nodes' bodies
            log.write(f"{name} {started:.6f}\n")
        finished.release()

    scheduler = BackgroundScheduler(
        executors={"default": ThreadPoolExecutor(options.workers)},
        job_defaults={"misfire_grace_time": None, "coalesce": True, "max_instances": 1},
        timezone=UTC,
    )
    trigger = CronTrigger(
        second=moment.second, minute=moment.minute, hour=moment.hour, timezone=UTC
    )
    for index in range(options.jobs):
        name = f"j{index:05d}"
        scheduler.add_job(body, trigger, args=[name], id=name)
    scheduler.start()
    startup = time.monotonic() - began
    if time.time() > options.due - 0.5:
        print(json.dumps({"error": "started too late for the instant"}))
        return 1
    time.sleep(max(0.0, options.due - 0.5 - time.time()))
    cpu_before = _cpu_seconds()
    for _ in range(options.jobs):
        if not finished.acquire(timeout=max(0.0, options.due + 120 - time.time())):
            break
    cpu = _cpu_seconds() - cpu_before
    scheduler.shutdown(wait=False)
    starts = [float(line.split()[1]) for line in options.log.read_text().splitlines()]
    print(
        json.dumps(
            {
                "last_start": max(starts) - options.due if starts else float("nan"),
                "last_finish": time.time() - options.due,
                "cpu_s": cpu,
                "started": len(starts),
                "startup_s": startup,
            }
        )
    )
    return 0


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    sys.exit(main())
