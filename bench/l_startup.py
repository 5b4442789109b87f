"""l: how fast a command answers and a node starts, this tree against a baseline tree.

For each tree (this one, and `--baseline`), `--runs` times each: `scheduler --help`,
`scheduler plan --cron '0 * * * *'`, `scheduler jobs` on a small SQLite database, and a
node's start (exec to `node_started`) with 10 jobs on SQLite. Runs alternate between
the trees, so a noisy neighbour weighs on both; medians and the ratio this / baseline.

    .venv/bin/python -m bench.l_startup --baseline ../before [--runs 5]
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
from pathlib import Path

from bench import harness


def _environment(tree: Path, folder: Path) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULER_")}
    environment["PYTHONPATH"] = f"{tree}{os.pathsep}{folder}"
    return environment


def _command(tree: Path, folder: Path, *args: str) -> float:
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "scheduler", *args],
        cwd=folder,
        env=_environment(tree, folder),
        capture_output=True,
        check=True,
        timeout=60,
    )
    return time.perf_counter() - began


def _node_start(tree: Path, folder: Path, url: str, jobs: str) -> float:
    arguments = ["run", "--database-url", url, "--jobs", jobs, "--log-format", "json"]
    began = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "scheduler", *arguments],
        cwd=folder,
        env=_environment(tree, folder),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None
    try:
        for line in process.stdout:
            if b'"node_started"' in line:
                return time.perf_counter() - began
        raise RuntimeError("the node never started")
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    trees = {"this": harness.REPOSITORY, "baseline": options.baseline.resolve()}
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        jobs = harness.job_module(folder, "ten_jobs", [("@yearly", 10, "")])
        for label, tree in trees.items():
            url = f"sqlite:///{folder / label}.db"
            subprocess.run(
                [sys.executable, "-m", "scheduler", "migrate", "--database-url", url],
                cwd=folder,
                env=_environment(tree, folder),
                capture_output=True,
                check=True,
            )
        for _ in range(options.runs):
            for label, tree in trees.items():
                url = f"sqlite:///{folder / label}.db"
                measured = {
                    "--help": _command(tree, folder, "--help"),
                    "plan --cron": _command(tree, folder, "plan", "--cron", "0 * * * *"),
                    "jobs": _command(tree, folder, "jobs", "--database-url", url),
                    "run: exec to node_started": _node_start(tree, folder, url, jobs),
                }
                for key, seconds in measured.items():
                    figures.setdefault(f"{label}|{key}", []).append(seconds)
    print(f"median of {options.runs}, seconds (this / baseline)")
    table = {}
    for key in ("--help", "plan --cron", "jobs", "run: exec to node_started"):
        this = statistics.median(figures[f"this|{key}"])
        base = statistics.median(figures[f"baseline|{key}"])
        table[key] = {"this": this, "baseline": base, "ratio": this / base}
        print(f"  {key:<28} {this:6.3f}  {base:6.3f}  {this / base:5.2f}")
    print(json.dumps(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
