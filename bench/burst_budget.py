"""What a burst's run must cost at least, part by part, against APScheduler 3 alone.

Issue 19's burst target (10,000 runs due at one instant, 3 nodes, last start ≤ 1.5 s)
leaves the nodes a CPU budget per run, bodies included; the tenth part put it at 0.27
times what APScheduler 3 alone spends a run. This measures, in the same minutes and as
CPU per run:

- `apscheduler`: APScheduler 3 firing the burst alone, silent (`bench.apscheduler_burst`,
  the baseline of bench b);
- `pool`: the least any scheduler that runs jobs on threads does: a 16-thread pool
  handed each body, the baseline's own body (open the execution log, write the moment
  the body began, close);
- `lines`: the three lines a node logs for every run (`run_claimed`, `run_started`,
  `run_succeeded`), rendered and written as a node does, to /dev/null, one thread.

Each is given as a ratio to `apscheduler` from the same round, medians over rounds.

    .venv/bin/python -m bench.burst_budget [--rounds 3] [--runs 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from scheduler import logs

WORKERS = 16


def apscheduler_cpu(runs: int, folder: Path) -> float:
    """APScheduler 3 alone, silent: its CPU per run (seconds), from its own report."""
    execution_log = folder / "apscheduler.log"
    execution_log.unlink(missing_ok=True)
    due = time.time() + max(6.0, runs / 2000)  # time to add the jobs before the instant
    finished = subprocess.run(
        [sys.executable, "-m", "bench.apscheduler_burst", "--jobs", str(runs), "--due",
         f"{due:.3f}", "--log", str(execution_log), "--workers", str(WORKERS)],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    report = json.loads(finished.stdout.strip().splitlines()[-1])
    if report.get("started") != runs:
        raise RuntimeError(f"APScheduler ran {report.get('started')} of {runs}: {report}")
    return float(report["cpu_s"]) / runs


def pool_cpu(runs: int, folder: Path) -> float:
    """A bare thread pool handed every body: CPU per run (seconds)."""
    path = str(folder / "pool.log")

    def body(name: str) -> None:
        started = time.time()
        with open(path, "a") as log:  # noqa: PTH123 - the baseline's own write
            log.write(f"{name} {started:.6f}\n")

    began = time.process_time()
    with ThreadPoolExecutor(WORKERS) as pool:
        for index in range(runs):
            pool.submit(body, f"j{index:05d}")
    return (time.process_time() - began) / runs


def lines_cpu(runs: int) -> float:
    """A node's three lines a run, as the daemon and the dispatcher log them: CPU per
    run (seconds). Rendering and writing to /dev/null; no other thread logging."""
    log = logs.get_logger(node="bench-node-1234-abcdef")
    period = "2026-12-03T17:00:00+00:00"
    began = time.process_time()
    for index in range(runs):
        run_id = 1_000_000 + index
        log.info("run_claimed", job=f"j{index:05d}", period=period, run_id=run_id, attempt=1)
        bound = log.bind(job=f"j{index:05d}", period=period, run_id=run_id)
        bound.info("run_started", origin="schedule")
        bound.info("run_succeeded", duration_ms=0.4)
    return (time.process_time() - began) / runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10_000)
    options = parser.parse_args()
    with open(os.devnull, "w") as sink, tempfile.TemporaryDirectory() as name:  # noqa: PTH123
        logs.configure(logs.LogFormat.JSON, "info", stream=sink)
        figures: dict[str, list[float]] = {}
        for number in range(1, options.rounds + 1):
            baseline = apscheduler_cpu(options.runs, Path(name))
            measured = {
                "apscheduler": baseline,
                "pool": pool_cpu(options.runs, Path(name)),
                "lines": lines_cpu(options.runs),
            }
            for key, seconds in measured.items():
                figures.setdefault(key, []).append(seconds)
                figures.setdefault(f"{key}|ratio", []).append(seconds / baseline)
            print(
                f"round {number}: "
                + ", ".join(f"{key} {seconds * 1e6:.0f} µs" for key, seconds in measured.items()),
                file=sys.stderr,
            )
    table = {
        key: {
            "cpu_us_per_run": statistics.median(figures[key]) * 1e6,
            "ratio_to_apscheduler": statistics.median(figures[f"{key}|ratio"]),
        }
        for key in ("apscheduler", "pool", "lines")
    }
    print(f"CPU per run, median of {options.rounds} rounds (ratio to APScheduler 3 alone)")
    for key, row in table.items():
        print(f"  {key:<12} {row['cpu_us_per_run']:7.1f} µs  {row['ratio_to_apscheduler']:5.2f}")
    print(json.dumps(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
