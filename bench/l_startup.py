"""l: how fast a command answers and a node starts, this tree against a baseline tree.

For each tree (this one, and `--baseline`), `--runs` times each: `scheduler --help`,
`scheduler plan --cron '0 * * * *'`, the read-only commands (`jobs`, `runs`, `nodes`,
`check`) on a small SQLite database, a node's start (exec to `node_started`) with
10 and with 10,000 jobs on SQLite, and exec to the first run of a catch-up (`all`, ten
periods owed). Runs alternate between the trees, so a noisy
neighbour weighs on both; medians and the ratio this / baseline.

`--python` names the interpreter: by default this one (the development environment,
whose extra packages, such as rich under structlog, a user's install does not have);
give a virtualenv with only `pip install .` in it to measure what users run (each tree
is put first on PYTHONPATH, so the interpreter's own copy is not used). Each tree is
compiled to bytecode first, as pip compiles what it installs; the job modules are not.

    .venv/bin/python -m bench.l_startup --baseline ../before [--runs 5] \
        [--python /tmp/prodenv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
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


PYTHON = sys.executable
READ_ONLY = ("jobs", "runs", "nodes", "check")


def _command(tree: Path, folder: Path, *args: str) -> float:
    began = time.perf_counter()
    subprocess.run(
        [PYTHON, "-m", "scheduler", *args],
        cwd=folder,
        env=_environment(tree, folder),
        capture_output=True,
        check=True,
        timeout=60,
    )
    return time.perf_counter() - began


def _node_start(
    tree: Path, folder: Path, url: str, jobs: str, *, until: bytes = b'"node_started"'
) -> float:
    arguments = ["run", "--database-url", url, "--jobs", jobs, "--log-format", "json"]
    began = time.perf_counter()
    process = subprocess.Popen(
        [PYTHON, "-m", "scheduler", *arguments],
        cwd=folder,
        env=_environment(tree, folder),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None
    try:
        for line in process.stdout:
            if until in line:
                return time.perf_counter() - began
        raise RuntimeError("the node never started")
    finally:
        process.terminate()
        process.wait(timeout=30)


def _catchup_start(tree: Path, folder: Path, label: str, jobs: str) -> float:
    """Exec to the first catch-up run's start: a fresh copy of the tree's database in
    which the job was first seen ten minutes ago, so ten periods are owed (`all`)."""
    path = folder / f"{label}-catchup.db"
    for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):  # the last run's
        leftover.unlink(missing_ok=True)
    shutil.copyfile(folder / f"{label}-fresh.db", path)
    with sqlite3.connect(path) as connection:
        connection.execute(
            "INSERT INTO scheduler_jobs (name, cron, timezone, first_seen, last_seen, paused)"
            " VALUES ('j0_00000', '* * * * *', 'UTC', datetime('now', '-10 minutes'),"
            " datetime('now'), 0)"
        )
    return _node_start(tree, folder, f"sqlite:///{path}", jobs, until=b'"run_started"')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--python", default=sys.executable)
    options = parser.parse_args()
    global PYTHON  # noqa: PLW0603 - a bench's one setting
    PYTHON = options.python
    trees = {"this": harness.REPOSITORY, "baseline": options.baseline.resolve()}
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        jobs = harness.job_module(folder, "ten_jobs", [("@yearly", 10, "")])
        many = harness.job_module(folder, "many_jobs", [("@yearly", 10_000, "")])
        owed = harness.job_module(folder, "owed_job", [("* * * * *", 1, 'catchup="all"')])
        for label, tree in trees.items():
            harness.compile_tree(tree, PYTHON)
            for url in (f"sqlite:///{folder / label}.db", f"sqlite:///{folder / label}-many.db"):
                subprocess.run(
                    [PYTHON, "-m", "scheduler", "migrate", "--database-url", url],
                    cwd=folder,
                    env=_environment(tree, folder),
                    capture_output=True,
                    check=True,
                )
            shutil.copyfile(folder / f"{label}.db", folder / f"{label}-fresh.db")
        for _ in range(options.runs):
            for label, tree in trees.items():
                url = f"sqlite:///{folder / label}.db"
                measured = {
                    "--help": _command(tree, folder, "--help"),
                    "plan --cron": _command(tree, folder, "plan", "--cron", "0 * * * *"),
                    **{
                        command: _command(tree, folder, command, "--database-url", url)
                        for command in READ_ONLY
                    },
                    "run: exec to node_started": _node_start(tree, folder, url, jobs),
                    "run, 10,000 jobs": _node_start(
                        tree, folder, f"sqlite:///{folder / label}-many.db", many
                    ),
                    "catch-up: exec to first run": _catchup_start(tree, folder, label, owed),
                }
                for key, seconds in measured.items():
                    figures.setdefault(f"{label}|{key}", []).append(seconds)
    print(f"median of {options.runs}, seconds (this / baseline)")
    table = {}
    keys = [
        "--help",
        "plan --cron",
        *READ_ONLY,
        "run: exec to node_started",
        "run, 10,000 jobs",
        "catch-up: exec to first run",
    ]
    for key in keys:
        this = statistics.median(figures[f"this|{key}"])
        base = statistics.median(figures[f"baseline|{key}"])
        table[key] = {"this": this, "baseline": base, "ratio": this / base}
        print(f"  {key:<28} {this:6.3f}  {base:6.3f}  {this / base:5.2f}")
    print(json.dumps(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
