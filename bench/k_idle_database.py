"""k: what an idle node costs the database, counted by the server itself.

One node per database (10, 1,000 and 10,000 yearly jobs, so none fires), measured for
`--seconds` after start-up has settled: transactions per second as the server logged
them (`log_statement = 'all'` set on each bench database; every session on it: the
node's pool, its liveness session, its watch; a transaction is a COMMIT or ROLLBACK,
or a statement outside BEGIN), CPU as % of one core and RSS from /proc. The server's
own `pg_stat_database` counts are not used: an idle backend reports them late, so a
pooled connection used at start-up dumps its start-up transactions into the window
whenever it is next used. The log is read from PGLOG (default: Debian's
/var/log/postgresql/postgresql-15-main.log).

Each size runs twice side by side, the same moment on the same machine: once with this
tree and once with the tree given by `--baseline` (for example a checkout of the
previous release), so a figure can be read as a ratio to the baseline and a noisy
neighbour moves both.

    .venv/bin/python -m bench.k_idle_database [--baseline ../bench-snap] [--seconds 60] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path

import psycopg

from bench import harness

SIZES = (10, 1_000, 10_000)
# Past start-up, and past the moment a backend flushes its statistics of start-up (an
# idle backend reports within about ten seconds).
SETTLE_S = 10.0


SERVER_LOG = Path(os.environ.get("PGLOG", "/var/log/postgresql/postgresql-15-main.log"))
_LINE = re.compile(r"^\S+ (\S+) UTC \[(\d+)\] \S+@(\S+) LOG:  (?:statement|execute [^:]*): (.*)")


def _log_statements(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(harness.ADMIN_URL, autocommit=True) as connection:
        connection.execute(f"ALTER DATABASE \"{name}\" SET log_statement = 'all'")


def _transactions(url: str, since: str, until: str) -> int:
    """Transactions the server logged on this database between two `HH:MM:SS.fff`."""
    return sum(transactions_by_kind(url, since, until).values())


def _statements(log: Iterable[str]) -> Iterator[tuple[str, str, str, str]]:
    """(time, pid, database, statement) for each logged statement, its continuation
    lines joined (a statement that starts with a line break is known by the next)."""
    current: list[str] | None = None
    for line in log:
        found = _LINE.match(line)
        if found is None:
            if current is not None and line[:1].isspace():
                current[3] = f"{current[3]} {line.strip()}"
            continue
        if current is not None:
            yield current[0], current[1], current[2], " ".join(current[3].split())
        current = [found[1], found[2], found[3], found[4]]
    if current is not None:
        yield current[0], current[1], current[2], " ".join(current[3].split())


def transactions_by_kind(url: str, since: str, until: str) -> dict[str, int]:
    """The same transactions, counted by their first statement's first words (to tell
    which part of the node sends them)."""
    name = url.rsplit("/", 1)[1]
    first: dict[str, str | None] = {}
    kinds: dict[str, int] = {}
    with SERVER_LOG.open(errors="replace") as log:
        lines = _statements(log)
        for found in lines:
            if found[2] != name or not since <= found[0] <= until:
                continue
            pid, statement = found[1], found[3]
            upper = statement.upper()
            if upper.startswith("BEGIN"):
                first[pid] = None
            elif upper.startswith(("COMMIT", "ROLLBACK")):
                kind = first.pop(pid, None) or "(empty)"
                kinds[kind] = kinds.get(kind, 0) + 1
            elif pid in first:
                if first[pid] is None and not upper.startswith(("SELECT SET_CONFIG", "SET ")):
                    first[pid] = statement[:70]
            else:
                kinds[statement[:70]] = kinds.get(statement[:70], 0) + 1
    return kinds


def _clock() -> str:
    with psycopg.connect(harness.ADMIN_URL, autocommit=True) as connection:
        row = connection.execute(
            "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'HH24:MI:SS.MS')"
        ).fetchone()
    assert row is not None
    return str(row[0])


def _start(tree: Path, folder: Path, name: str, url: str, jobs: str) -> harness.Node:
    log_path = folder / f"{name}.log"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULER_")}
    environment["PYTHONPATH"] = f"{tree}{os.pathsep}{folder}"
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "scheduler",
                "run",
                "--database-url",
                url,
                "--jobs",
                jobs,
                "--log-format",
                "json",
                "--node-name",
                name,
            ],
            cwd=tree,
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return harness.Node(name, process, log_path, folder / f"{name}.none", time.time())


def measure(baseline: Path | None, seconds: float) -> dict[str, float]:
    trees = {"this": harness.REPOSITORY} | ({"baseline": baseline} if baseline else {})
    figures: dict[str, float] = {}
    with harness.workspace("k") as folder, ExitStack() as stack:
        started: list[tuple[str, int, str, harness.Node]] = []
        for size in SIZES:
            module = harness.job_module(folder, f"yearly_{size}", [("@yearly", size, "")])
            for label, tree in trees.items():
                url = stack.enter_context(harness.fresh_database(empty=label != "this"))
                if label != "this":
                    harness.migrate_with(tree, url)
                _log_statements(url)
                node = _start(tree, folder, f"{label}-{size}", url, module)
                stack.callback(node.stop)
                started.append((label, size, url, node))
        for *_, node in started:
            node.wait_for("node_started", timeout=120)
        time.sleep(SETTLE_S)
        since = _clock()
        before = [node.cpu_seconds() for *_, node in started]
        time.sleep(seconds)
        until = _clock()
        for (label, size, url, node), cpu in zip(started, before, strict=True):
            figures[f"{label} {size} tx/s"] = _transactions(url, since, until) / seconds
            figures[f"{label} {size} cpu %"] = (node.cpu_seconds() - cpu) / seconds * 100
            figures[f"{label} {size} rss MiB"] = node.memory_mb()[0]
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--runs", type=int, default=1)
    options = parser.parse_args()
    results = [measure(options.baseline, options.seconds) for _ in range(options.runs)]
    print(f"idle node, {options.seconds:g} s after start-up, median of {options.runs}")
    for key in results[0]:
        values = [result[key] for result in results]
        each = ", ".join(f"{value:.3f}" for value in values)
        print(f"  {key:<28} {statistics.median(values):9.3f}   ({each})")
    if options.baseline:
        print("ratios, this / baseline (medians)")
        for size in SIZES:
            for unit in ("tx/s", "cpu %", "rss MiB"):
                this = statistics.median(r[f"this {size} {unit}"] for r in results)
                base = statistics.median(r[f"baseline {size} {unit}"] for r in results)
                ratio = this / base if base else float("nan")
                print(f"  {size:>6} jobs {unit:<8} {ratio:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
