"""What every scenario needs: a fresh database, generated job modules, real nodes, and
figures read from the runs table, the nodes' JSON logs, /proc and the statement counter.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    from scheduler.store.connection import Connection

REPOSITORY = Path(__file__).resolve().parents[1]
SCHEDULER = str(Path(sys.executable).parent / "scheduler")
ADMIN_URL = os.environ.get(
    "SCHEDULER_BENCH_POSTGRES_URL",
    os.environ.get("SCHEDULER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
Figures = dict[str, float]

# --- databases -------------------------------------------------------------------------

_template: str | None = None
_template_lock = threading.Lock()


def _admin() -> psycopg.Connection[tuple[Any, ...]]:
    return psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5)


def _url_for(name: str) -> str:
    return f"{ADMIN_URL.rpartition('/')[0]}/{name}"


def _migrated_template() -> str:
    """One migrated database per bench process, cloned for every scenario run."""
    with _template_lock:
        return _template or _create_template()


def _create_template() -> str:
    global _template  # noqa: PLW0603 - a per-process cache
    if _template is None:
        name = f"scheduler_bench_template_{uuid.uuid4().hex[:8]}"
        with _admin() as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        subprocess.run(
            [SCHEDULER, "migrate", "--database-url", _url_for(name), "--log-format", "json"],
            check=True,
            capture_output=True,
        )
        _template = name
    return _template


def drop_template() -> None:
    global _template  # noqa: PLW0603
    if _template is not None:
        with _admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{_template}" WITH (FORCE)')
        _template = None


@contextmanager
def fresh_database(*, empty: bool = False) -> Iterator[str]:
    """A new database of its own, migrated by this tree unless `empty` (for another tree,
    whose nodes migrate it at start); its URL; dropped afterwards."""
    name = f"scheduler_bench_{uuid.uuid4().hex[:12]}"
    with _admin() as admin:
        if empty:
            admin.execute(f'CREATE DATABASE "{name}"')
        else:
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{_migrated_template()}"')
    try:
        yield _url_for(name)
    finally:
        with _admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrate_with(tree: Path, url: str) -> None:
    """Migrate a database with another tree's scheduler (a baseline's own schema)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULER_")}
    environment["PYTHONPATH"] = str(tree.resolve())  # the nodes run in a folder of their own
    subprocess.run(
        [sys.executable, "-m", "scheduler", "migrate", "--database-url", url],
        cwd=tree,
        env=environment,
        check=True,
        capture_output=True,
    )


def compile_tree(tree: Path, python: str = sys.executable) -> None:
    """Compile a tree's package to bytecode, as `pip install` does for a user's copy.

    This machine, like our image, runs with PYTHONDONTWRITEBYTECODE=1: a tree put on
    PYTHONPATH would otherwise be compiled from source by every command a bench times.
    """
    subprocess.run(
        [python, "-m", "compileall", "-q", str(tree.resolve() / "scheduler")],
        check=True,
        capture_output=True,
    )


def query(url: str, statement: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as connection:
        cursor = connection.execute(statement, parameters)
        return cursor.fetchall() if cursor.description is not None else []


def insert_rows(connection: Connection, table: str, rows: Sequence[dict[str, Any]]) -> None:
    """Rows of `table` through the store's connection (instants kept as the store keeps
    them), every row with the columns of the first, in one `executemany`."""
    columns = list(rows[0])
    values = ", ".join(f":{column}" for column in columns)
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({values})"
    connection.execute_many(sql, rows)


def server_version() -> str:
    with _admin() as admin:
        row = admin.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


# --- job modules -----------------------------------------------------------------------

JOB_MODULE = '''"""Generated by bench: {count} jobs."""

import os

from scheduler import job

_LOG = os.environ.get("BENCH_EXECUTION_LOG")
_SLEEP = float(os.environ.get("BENCH_JOB_SLEEP", "0"))


def _body(ctx):
    if _SLEEP:
        import time

        time.sleep(_SLEEP)
    if _LOG:
        # One short O_APPEND write per execution: evidence outside the runs table.
        with open(_LOG, "a") as log:
            log.write(f"{{ctx.job}} {{ctx.period.isoformat()}} {{ctx.node}} {{ctx.attempt}}\\n")


{definitions}
'''


def job_module(folder: Path, module: str, specs: Sequence[tuple[str, int, str]]) -> str:
    """Write a module defining jobs; each spec is (cron, how many, extra @job keywords).

    Jobs are made in a loop and assigned to module-level names, which is what the
    loader collects. Returns the module name for --jobs.
    """
    lines = []
    for index, (cron, count, extra) in enumerate(specs):
        keywords = f", {extra}" if extra else ""
        lines.append(
            f"for _i in range({count}):\n"
            f'    globals()[f"job_{index}_{{_i:05d}}"] = job({cron!r}, '
            f'name=f"j{index}_{{_i:05d}}"{keywords})(_body)\n'
        )
    total = sum(count for _, count, _ in specs)
    source = JOB_MODULE.format(count=total, definitions="\n".join(lines))
    (folder / f"{module}.py").write_text(source)
    return module


def cron_at(instant: float) -> str:
    """A six-field cron that fires once a day at this UTC instant (second precision)."""
    moment = datetime.fromtimestamp(instant, UTC)
    return f"{moment.second} {moment.minute} {moment.hour} * * *"


def executions(path: Path) -> Counter[tuple[str, str]]:
    """(job, period) -> how many times the job body ran it, from the execution log."""
    counts: Counter[tuple[str, str]] = Counter()
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:
                counts[(parts[0], parts[1])] += 1
    return counts


# --- nodes -----------------------------------------------------------------------------


def parse_time(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass
class Node:
    """One `scheduler run` process: its JSON log, its /proc figures, its statement counts."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    stats_path: Path
    exec_at: float
    _parsed: list[dict[str, Any]] = field(default_factory=list)
    _offset: int = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def events(self) -> list[dict[str, Any]]:
        """Every JSON event so far (read incrementally: logs of busy nodes grow large)."""
        with self.log_path.open("rb") as log:
            log.seek(self._offset)
            chunk = log.read()
        complete = chunk.rfind(b"\n") + 1
        self._offset += complete
        for line in chunk[:complete].splitlines():
            try:
                self._parsed.append(json.loads(line))
            except json.JSONDecodeError:
                self._parsed.append({"event": "unparsed", "line": line.decode(errors="replace")})
        return self._parsed

    def find(self, name: str, **fields: Any) -> dict[str, Any] | None:
        for event in self.events():
            if event.get("event") == name and all(event.get(k) == v for k, v in fields.items()):
                return event
        return None

    def wait_for(self, name: str, timeout: float = 60, **fields: Any) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.find(name, **fields)
            if found is not None:
                return found
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        tail = self.log_path.read_text()[-3000:]
        raise RuntimeError(f"{self.name}: no {name} within {timeout}s; log tail:\n{tail}")

    def event_time(self, name: str, **fields: Any) -> float | None:
        found = self.find(name, **fields)
        return None if found is None else parse_time(found["timestamp"])

    def time_of(self, name: str, **fields: Any) -> float:
        """When the event was logged (epoch seconds); it must have been."""
        moment = self.event_time(name, **fields)
        if moment is None:
            raise RuntimeError(f"{self.name}: no {name} event")
        return moment

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process so far."""
        return process_cpu_seconds(self.pid)

    def memory_mb(self) -> tuple[float, float]:
        """(current RSS, peak RSS) in MiB."""
        values = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
        return values["VmRSS"], values["VmHWM"]

    def statements(self) -> dict[str, Any]:
        try:
            document: dict[str, Any] = json.loads(self.stats_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {"statements": 0, "round_trips": 0, "transactions": 0, "kinds": {}}
        return document

    def stop(self, timeout: float = 20) -> None:
        self.terminate()
        self.wait_stopped(timeout)

    def terminate(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait_stopped(self, timeout: float) -> None:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


def start_node(
    folder: Path,
    name: str,
    database_url: str,
    jobs: str,
    extra_args: Sequence[str] = (),
    *,
    counted: bool = True,
    env: dict[str, str] | None = None,
    tree: Path = REPOSITORY,
    python: str | None = None,
) -> Node:
    """Start `scheduler run` (through bench.node when statements are counted) of `tree`
    (another checkout, say a baseline, is put first on the import path); `python`, an
    interpreter to run it with instead (a virtualenv with only the package installed,
    to measure what users run; not with `counted`)."""
    log_path, stats_path = folder / f"{name}.log", folder / f"{name}.statements.json"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULER_")}
    environment["PYTHONPATH"] = str(tree.resolve())  # the nodes run in a folder of their own
    environment |= env or {}
    if counted:
        environment["BENCH_STATEMENTS"] = str(stats_path)
    if counted:
        program = [sys.executable, "-m", "bench.node"]
    else:
        program = [python, "-m", "scheduler"] if python else [SCHEDULER]
    arguments = [
        "run",
        "--database-url",
        database_url,
        "--jobs",
        jobs,
        "--log-format",
        "json",
        "--node-name",
        name,
        "--grace",
        "2s",
        *extra_args,
        # BENCH_WORKERS=N measures a scenario with `--workers N` instead of the default.
        *(["--workers", os.environ["BENCH_WORKERS"]] if os.environ.get("BENCH_WORKERS") else []),
    ]
    with log_path.open("wb") as out:
        exec_at = time.time()
        process = subprocess.Popen(
            [*program, *arguments],
            cwd=folder,
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Node(name, process, log_path, stats_path, exec_at)


@contextmanager
def workspace(scenario: str) -> Iterator[Path]:
    """A run's folder (job modules, node logs). `BENCH_KEEP=DIR` keeps each under DIR,
    so that the logs of a run that stands out can be read afterwards."""
    keep = os.environ.get("BENCH_KEEP")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        yield Path(tempfile.mkdtemp(prefix=f"bench-{scenario}-", dir=keep))
        return
    with tempfile.TemporaryDirectory(prefix=f"bench-{scenario}-") as folder:
        yield Path(folder)


@contextmanager
def running(nodes: list[Node]) -> Iterator[list[Node]]:
    """Stop every node on the way out, whatever happened: all at once, so that none
    retakes what another abandons at shutdown."""
    try:
        yield nodes
    finally:
        for node in nodes:
            node.terminate()
        deadline = time.monotonic() + 40
        for node in nodes:
            node.wait_stopped(max(0.1, deadline - time.monotonic()))


def sleep_until(instant: float) -> None:
    delay = instant - time.time()
    if delay > 0:
        time.sleep(delay)


class StallWatch:
    """A thread that sleeps TICK_S at a time and keeps the longest it overslept: on a
    machine where every process froze at once (a VM paused by its host), every node
    is late alike, and this says by how much; on a busy one, a few tens of ms."""

    TICK_S = 0.005

    def __init__(self) -> None:
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="stall-watch", daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.TICK_S):
            now = time.monotonic()
            self.longest = max(self.longest, now - last - self.TICK_S)
            last = now

    def stop(self) -> float:
        """Stop watching; the longest stall seen, in seconds."""
        self._stop.set()
        self._thread.join()
        return self.longest


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine has spent busy since boot (/proc/stat):
    the nodes, PostgreSQL and anything else running (the machine is shared)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / CLOCK_TICKS


def server_busy_seconds() -> float:
    """CPU seconds the PostgreSQL server's processes now alive have spent (user +
    system): the backends of the nodes' pools, which live through a scenario, and the
    server's own helpers (WAL writer, checkpointer). A backend that has exited is not
    counted: the harness's own short queries, not the nodes' work. The server must run
    on this machine, as it does for every scenario."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() == "postgres":
                total += process_cpu_seconds(int(entry.name))
        except OSError:  # gone meanwhile
            continue
    return total


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time a live process has spent so far (/proc/PID/stat); OSError
    once it is gone."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def total_statements(nodes: Sequence[Node]) -> dict[str, Any]:
    """Counts summed over nodes, for a before/after difference."""
    total: dict[str, Any] = {"statements": 0, "round_trips": 0, "transactions": 0, "kinds": {}}
    for node in nodes:
        counts = node.statements()
        for key in ("statements", "round_trips", "transactions"):
            total[key] += counts[key]
        for kind, count in counts["kinds"].items():
            total["kinds"][kind] = total["kinds"].get(kind, 0) + count
    return total


def difference(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    kinds = {
        kind: count - before["kinds"].get(kind, 0)
        for kind, count in after["kinds"].items()
        if count - before["kinds"].get(kind, 0)
    }
    return {
        key: after[key] - before[key] for key in ("statements", "round_trips", "transactions")
    } | {"kinds": dict(sorted(kinds.items(), key=lambda item: -item[1]))}


# --- figures ---------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Row:
    """One figure of the table: how to summarise it over runs, and its target."""

    key: str
    label: str
    unit: str
    target: str = ""
    # The figure meets its target when this holds for the summary; None: no target.
    meets: Callable[[float], bool] | None = None
    # "median" for measurements, "max" for counts that must be zero in every run.
    over_runs: str = "median"


def summarise(rows: Sequence[Row], results: Sequence[Figures]) -> list[dict[str, Any]]:
    table = []
    for row in rows:
        values = [result[row.key] for result in results if row.key in result]
        if not values:
            continue
        value = max(values) if row.over_runs == "max" else statistics.median(values)
        table.append(
            {
                "key": row.key,
                "label": row.label,
                "unit": row.unit,
                "value": value,
                "runs": values,
                "over_runs": row.over_runs,
                "target": row.target,
                "met": None if row.meets is None else bool(row.meets(value)),
            }
        )
    return table


def format_value(value: float, unit: str) -> str:
    if math.isnan(value):
        return "n/a"
    if value == int(value) or abs(value) >= 100:
        return f"{value:,.0f} {unit}".strip()
    if abs(value) >= 10:
        return f"{value:.1f} {unit}".strip()
    return f"{value:.2f} {unit}".strip()


def print_table(title: str, table: Sequence[dict[str, Any]]) -> None:
    print(f"\n{title}")
    for entry in table:
        mark = {True: "ok", False: "MISSED", None: ""}[entry["met"]]
        runs = ", ".join(f"{value:.4g}" for value in entry["runs"])
        summary = "max" if entry["over_runs"] == "max" else "median"
        print(
            f"  {entry['label']:<46} {format_value(entry['value'], entry['unit']):>14}"
            f"  ({summary} of {runs})  target {entry['target'] or '-'} {mark}"
        )


@dataclass(frozen=True)
class Scenario:
    """A benchmark: `run_once(smoke)` returns one run's figures; `rows` says how to show them."""

    key: str
    title: str
    run_once: Callable[[bool], Figures]
    rows: Sequence[Row]
    notes: Callable[[Sequence[Figures]], str] | None = None

    def measure(self, runs: int, *, smoke: bool) -> tuple[list[dict[str, Any]], list[Figures]]:
        results = []
        for number in range(1, runs + 1):
            log(f"[{self.key}] run {number}/{runs}{' (smoke)' if smoke else ''}")
            started = time.monotonic()
            results.append(self.run_once(smoke))
            log(f"[{self.key}] run {number} took {time.monotonic() - started:.1f}s")
        return summarise(self.rows, results), results


def stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so that nodes are stopped and databases dropped."""
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))


def main(scenario: Scenario, argv: Sequence[str] | None = None) -> int:
    stop_on_sigterm()
    parser = argparse.ArgumentParser(description=f"benchmark {scenario.key}: {scenario.title}")
    parser.add_argument("--smoke", action="store_true", help="a few seconds, small sizes")
    parser.add_argument("--runs", type=int, default=None, help="default 3 (1 with --smoke)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    options = parser.parse_args(argv)
    runs = options.runs or (1 if options.smoke else 3)
    try:
        table, results = scenario.measure(runs, smoke=options.smoke)
    finally:
        drop_template()
    print_table(f"{scenario.key}: {scenario.title}", table)
    if options.json:
        options.json.write_text(json.dumps({"table": table, "runs": results}, indent=2))
    return 0 if all(entry["met"] is not False for entry in table) else 1
