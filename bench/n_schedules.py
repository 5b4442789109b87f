"""n: schedules created at run time, up to a million, on PostgreSQL (and SQLite).

Every figure that matters is also a ratio to a baseline measured in the same run (this
machine's speed varies twofold with its load):

- **create**: `--schedules` (1,000,000) through `Schedules.create_many` in batches of
  `--batch` (10,000), each batch one call (one transaction): 60 % daily cron at random
  minutes and hours in 30 IANA zones, 20 % hourly, 10 % `every` (15 min to a day, from a
  start in the future), 10 % once `at` (one hour to thirty days ahead); none due in the
  next 29 minutes, so the same rows serve `idle`. Total seconds and rows/s (create_many
  calls only; the specs are drawn outside the timing), the share of it this process spent
  on CPU (checking specs, building rows), and the last batch's rate against the first's
  (baseline: the table empty). Then one `create(...)` inside an application's transaction
  (a psycopg connection: insert a tenant row, create its schedule by the job's name,
  commit) `--tries` times (200), interleaved with the same transaction without the create
  (baseline) and with the create given the `Job` itself (no look-up of the job's name):
  the median added ms.
- **list**: `Schedules.list("tenant-42", limit=100)`, the first page with no filter, and
  a page from the middle of the keys (`after="tenant-5"`), median ms of `--pages` (50)
  tries each, at `--schedules` and at `--small` (1,000, the baseline), interleaved:
  first as the import left the table (autovacuum may not have analyzed it yet: the
  figure says whether it had), then after an `ANALYZE` (the steady state: the target).
- **idle**: 3 nodes on the `--schedules` database and 3 on a `--small` one (the
  baseline), started one at a time in turn (exec to `node_started`, after one warm-up
  start that fills a bytecode cache kept outside the tree), then measured side by side
  for `--seconds` (60) once settled: transactions per second per node as the server
  logged them (`bench.server_log`, as bench k), CPU, and RSS (current and peak) from
  /proc. The runs claimed meanwhile must be none.
- **peak**: `--peak` (100,000) schedules all due at one instant (`at=`), created while 3
  nodes run (a node hears of them by NOTIFY), each run's body appending one line to a
  file. Every period must run exactly once: the runs table (one row per period, the
  primary key) against the schedules, and the lines of the file (executions: duplicates,
  missed); then the instant to the last claim, the last `started_at` and the last finish.
  Baseline, in the same run just before: `--peak-baseline` (10,000) due at one instant
  on the same fleet shape. Where the time goes: the nodes' CPU (per run, and the
  busiest node's share of a core) against the server's; the waits for a lock past a
  second (`log_lock_waits`); and, after creating and before the instant, one fire
  pass's due SELECT (the store's own text) under EXPLAIN ANALYZE with every row due.
  `--breakdown` also counts every statement the nodes send and has the server log each
  statement's duration from the instant until every run finished
  (`log_min_duration_statement = 0` on the bench database: summed by statement on
  stderr, the fire passes' due SELECT in the table). That counting costs the nodes and
  the server about a sixth of their CPU a run (22.7 s to the last start without it,
  27 to 29 s with it, on the same tree), so the figures of such a run are for where
  the time goes, not for the headline. `--plans-ms MS` also has auto_explain log
  the plan of every statement slower than MS (whether JIT compiled it, actual rows; it
  slows the server a little), written next to the node logs; `--jit off` turns the
  server's JIT compilation off on the peak databases, to measure what it costs.
- **sqlite**: one node on a SQLite file holding `--sqlite` (10,000) schedules, of which
  `--sqlite-due` (1,000) are due at one instant: each runs once; the time to the last
  start. Baseline: the same node and instant with only the 1,000 due ones.

Fresh databases from the harness, dropped afterwards; `BENCH_KEEP=DIR` keeps the node
logs. The figures go to a table per part and, as JSON, to the last line of stdout.

    .venv/bin/python -m bench.n_schedules                      # everything, full sizes
    .venv/bin/python -m bench.n_schedules --parts create,list,idle --schedules 20000 \
        --seconds 20 --tries 50 --pages 10
    .venv/bin/python -m bench.n_schedules --parts peak --peak 20000 --peak-baseline 2000
    .venv/bin/python -m bench.n_schedules --parts peak --breakdown [--plans-ms 1000] [--jit off]
    .venv/bin/python -m bench.n_schedules --parts sqlite [--json n.json] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg

from bench import harness, server_log
from bench.harness import Figures, Row
from scheduler import job
from scheduler.registry import Job
from scheduler.schedules import Schedules, Spec
from scheduler.store import schedules as stored
from scheduler.store.database import Database, open_database

PARTS = ("create", "list", "idle", "peak", "sqlite")
NODES = 3
TEMPLATE = "tenant_report"
ZONES = (
    "UTC",
    "Europe/London",
    "Europe/Paris",
    "Europe/Berlin",
    "Europe/Madrid",
    "Europe/Helsinki",
    "Europe/Moscow",
    "Africa/Cairo",
    "Africa/Lagos",
    "Africa/Johannesburg",
    "Asia/Dubai",
    "Asia/Karachi",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Asia/Dhaka",
    "Asia/Bangkok",
    "Asia/Shanghai",
    "Asia/Tokyo",
    "Asia/Seoul",
    "Australia/Adelaide",
    "Australia/Sydney",
    "Pacific/Auckland",
    "Pacific/Honolulu",
    "America/Anchorage",
    "America/Los_Angeles",
    "America/Denver",
    "America/Chicago",
    "America/New_York",
    "America/Sao_Paulo",
    "America/St_Johns",
)
EVERY = (timedelta(minutes=15), timedelta(hours=1), timedelta(hours=6), timedelta(days=1))
# No schedule drawn by `_quiet_specs` is due sooner than this after it was drawn.
QUIET = timedelta(minutes=29)
FINISHED = "('succeeded', 'failed', 'timed_out', 'skipped', 'abandoned', 'missed')"

# The template's function as the nodes load it; each run appends one line (job, period,
# node, attempt: `harness.executions` reads it) when BENCH_EXECUTION_LOG is set.
NODE_MODULE = '''"""Generated by bench n: the template whose schedules the bench creates."""

import os

from scheduler import job

_LOG = os.environ.get("BENCH_EXECUTION_LOG")


@job(cron=None, name="tenant_report")
def tenant_report(ctx, **args):
    if _LOG:
        with open(_LOG, "a") as log:
            log.write(f"{ctx.job} {ctx.period.isoformat()} {ctx.node} {ctx.attempt}\\n")
'''


def _report(ctx: object, **args: object) -> None:
    """The bench's own copy of the template: `create_many` takes the Job itself, so that
    schedules can be written before any node has registered the job."""


TEMPLATE_JOB: Job = job(cron=None, name=TEMPLATE)(_report)


# --- drawing schedules ---------------------------------------------------------------


def _quiet_specs(first: int, count: int, now: datetime, rng: random.Random) -> list[Spec]:
    """Schedules `tenant-<i>:<kind>` for i in [first, first + count): the mix of the
    module's docstring, none due within QUIET of `now`."""
    local = {zone: now.astimezone(ZoneInfo(zone)) for zone in ZONES}
    specs = []
    for index in range(first, first + count):
        zone = rng.choice(ZONES)
        here = local[zone]
        args = {"tenant": index}
        kind = index % 10
        if kind < 6:  # daily, at least an hour away in its zone
            hour = (here.hour + rng.randint(2, 22)) % 24
            cron = f"{rng.randrange(60)} {hour} * * *"
            specs.append(
                Spec(f"tenant-{index}:daily", TEMPLATE_JOB, cron=cron, timezone=zone, args=args)
            )
        elif kind < 8:  # hourly, its minute 30 to 55 minutes after this one
            cron = f"{(here.minute + rng.randint(30, 55)) % 60} * * * *"
            specs.append(
                Spec(f"tenant-{index}:hourly", TEMPLATE_JOB, cron=cron, timezone=zone, args=args)
            )
        elif kind == 8:
            start = now + timedelta(seconds=rng.randint(2700, 86_400))
            every = rng.choice(EVERY)
            specs.append(
                Spec(
                    f"tenant-{index}:every",
                    TEMPLATE_JOB,
                    every=every,
                    start=start,
                    timezone=zone,
                    args=args,
                )
            )
        else:
            at = now + timedelta(seconds=rng.randint(3600, 30 * 86_400))
            specs.append(
                Spec(f"tenant-{index}:once", TEMPLATE_JOB, at=at, timezone=zone, args=args)
            )
    return specs


def _due_specs(prefix: str, first: int, count: int, at: datetime) -> list[Spec]:
    return [
        Spec(f"{prefix}-{index:06d}", TEMPLATE_JOB, at=at, args={"tenant": index})
        for index in range(first, first + count)
    ]


def _create(url: str, batches: Iterator[list[Spec]]) -> tuple[float, float, list[float]]:
    """Each batch through one `create_many` call: (seconds in the calls, this process's
    CPU seconds in them, each batch's rows/s)."""
    seconds = cpu = 0.0
    rates = []
    with Schedules(url) as schedules:
        for specs in batches:
            began, began_cpu = time.perf_counter(), time.process_time()
            schedules.create_many(specs)
            took = time.perf_counter() - began
            cpu += time.process_time() - began_cpu
            seconds += took
            rates.append(len(specs) / took)
    return seconds, cpu, rates


def populate(url: str, count: int, batch: int) -> tuple[Figures, datetime]:
    """`count` quiet schedules in batches; the figures of part create, and until when
    none of them is due."""
    now = datetime.now(UTC)
    rng = random.Random(count)
    batches = (
        _quiet_specs(first, min(batch, count - first), now, rng) for first in range(0, count, batch)
    )
    seconds, cpu, rates = _create(url, batches)
    harness.log(f"[n] created {count:,} schedules in {seconds:.1f} s ({count / seconds:,.0f}/s)")
    figures = {
        "create_s": seconds,
        "create_rows_per_s": count / seconds,
        "create_client_cpu": cpu / seconds * 100,
        "create_first_batch_per_s": rates[0],
        "create_last_batch_per_s": rates[-1],
        "create_last_to_first": rates[-1] / rates[0],
    }
    return figures, now + QUIET


# --- one create inside the application's transaction ---------------------------------


def app_transactions(url: str, tries: int) -> Figures:
    """Insert a tenant and commit: without a schedule (the baseline), with `create` by
    the job's name (a look-up of the jobs table, as an application that does not import
    the job's module does), and with `create` given the Job; interleaved, in turn first."""
    harness.query(url, "CREATE TABLE bench_tenants (id BIGINT PRIMARY KEY, name TEXT NOT NULL)")
    # What a node writes of a template when it starts: the name is known.
    harness.query(
        url,
        "INSERT INTO scheduler_jobs (name, cron, timezone, first_seen, last_seen, paused)"
        " VALUES (%s, '', 'UTC', now(), now(), false) ON CONFLICT (name) DO NOTHING",
        (TEMPLATE,),
    )
    now = datetime.now(UTC)
    rng = random.Random(7)
    variants: dict[str, str | Job | None] = {"none": None, "name": TEMPLATE, "job": TEMPLATE_JOB}
    took: dict[str, list[float]] = {variant: [] for variant in variants}
    tenant = 0
    with Schedules(url) as schedules, psycopg.connect(url) as connection:
        for attempt in range(tries + 5):  # the first five warm the connection up
            order = list(variants.items())
            order = order[attempt % 3 :] + order[: attempt % 3]
            for variant, template in order:
                tenant += 1
                (spec,) = _quiet_specs(tenant * 10, 1, now, rng)  # a daily cron in a zone
                began = time.perf_counter()
                connection.execute(
                    "INSERT INTO bench_tenants (id, name) VALUES (%s, %s)",
                    (tenant, f"tenant {tenant}"),
                )
                if template is not None:
                    schedules.create(
                        f"tenant-app-{tenant}:daily",
                        template,
                        cron=spec.cron,
                        timezone=spec.timezone,
                        args={"tenant": tenant},
                        connection=connection,
                    )
                connection.commit()
                if attempt >= 5:
                    took[variant].append((time.perf_counter() - began) * 1000)
    base = statistics.median(took["none"])
    by_name = statistics.median(took["name"])
    by_job = statistics.median(took["job"])
    return {
        "tx_baseline_ms": base,
        "tx_create_ms": by_name,
        "tx_added_ms": by_name - base,
        "tx_ratio": by_name / base,
        "tx_create_job_ms": by_job,
        "tx_added_job_ms": by_job - base,
    }


# --- listing -------------------------------------------------------------------------

PAGES: dict[str, Callable[[Schedules], int]] = {
    "prefix": lambda s: len(s.list("tenant-42", limit=100).schedules),
    "first": lambda s: len(s.list(limit=100).schedules),
    "middle": lambda s: len(s.list(after="tenant-5", limit=100).schedules),
}


def _pages(urls: dict[str, str], tries: int) -> tuple[dict[tuple[str, str], float], dict[str, int]]:
    """Median ms of each page at each size (`big`, `small`), interleaved; and the rows
    of each page at `big`."""
    took: dict[tuple[str, str], list[float]] = {}
    rows: dict[str, int] = {}
    with ExitStack() as stack:
        opened = {label: stack.enter_context(Schedules(url)) for label, url in urls.items()}
        for attempt in range(tries + 2):  # the first two warm the pools and caches up
            for label, schedules in opened.items():
                for page, call in PAGES.items():
                    began = time.perf_counter()
                    found = call(schedules)
                    if attempt >= 2:
                        took.setdefault((label, page), []).append(
                            (time.perf_counter() - began) * 1000
                        )
                    if label == "big":
                        rows[page] = found
    return {key: statistics.median(values) for key, values in took.items()}, rows


def listing(urls: dict[str, str], tries: int) -> Figures:
    """The pages as the import left the table (autovacuum may not have analyzed it yet),
    then after `ANALYZE` (the steady state, whose figures carry the target)."""
    ((analyzed,),) = harness.query(
        urls["big"],
        "SELECT count(*) FROM pg_stat_user_tables WHERE relname = 'scheduler_schedules'"
        " AND coalesce(last_analyze, last_autoanalyze) IS NOT NULL",
    )
    fresh, _ = _pages(urls, tries)
    for url in urls.values():
        harness.query(url, "ANALYZE scheduler_schedules")
    steady, rows = _pages(urls, tries)
    figures: Figures = {"list_fresh_analyzed": analyzed}
    for page in PAGES:
        big, small = steady[("big", page)], steady[("small", page)]
        figures |= {
            f"list_{page}_ms": big,
            f"list_{page}_small_ms": small,
            f"list_{page}_ratio": big / small,
            f"list_{page}_rows": rows[page],
            f"list_{page}_fresh_ms": fresh[("big", page)],
        }
    return figures


# --- nodes ---------------------------------------------------------------------------


@contextmanager
def bytecode_cache() -> Iterator[dict[str, str]]:
    """The nodes' environment for a bytecode cache outside the tree (this machine runs
    with PYTHONDONTWRITEBYTECODE=1, and nothing may be written into the checkout): a
    node's start is then what a user's, whose pip compiled the package, is."""
    with tempfile.TemporaryDirectory(prefix="bench-n-pycache-") as folder:
        yield {"PYTHONPYCACHEPREFIX": folder, "PYTHONDONTWRITEBYTECODE": ""}


def _module(folder: Path) -> str:
    (folder / "bench_templates.py").write_text(NODE_MODULE)
    return "bench_templates"


def _start(
    folder: Path, name: str, url: str, env: dict[str, str], *, counted: bool
) -> harness.Node:
    return harness.start_node(folder, name, url, _module(folder), env=env, counted=counted)


def idle(folder: Path, urls: dict[str, str], seconds: float, env: dict[str, str]) -> Figures:
    """3 idle nodes on each database; see the module's docstring."""
    for url in urls.values():
        server_log.log_statements(url)
    nodes: list[harness.Node] = []
    by_label: dict[str, list[harness.Node]] = {label: [] for label in urls}
    starts: dict[str, list[float]] = {label: [] for label in urls}
    with harness.running(nodes):
        warm = _start(folder, "idle-warm-up", urls["small"], env, counted=False)
        nodes.append(warm)
        warm.wait_for("node_started", timeout=120)
        warm.stop()
        for index in range(NODES):
            for label, url in urls.items():
                node = _start(folder, f"idle-{label}-{index}", url, env, counted=False)
                nodes.append(node)
                by_label[label].append(node)
                node.wait_for("node_started", timeout=120)
                starts[label].append(node.time_of("node_started") - node.exec_at)
        time.sleep(server_log.SETTLE_S)
        since = server_log.clock()
        cpu = {node.name: node.cpu_seconds() for group in by_label.values() for node in group}
        time.sleep(seconds)
        until = server_log.clock()
        figures: Figures = {}
        for label, url in urls.items():
            group = by_label[label]
            kinds = server_log.transactions_by_kind(url, since, until)
            harness.log(f"[n] idle {label}: transactions by first statement: {kinds}")
            used = [(node.cpu_seconds() - cpu[node.name]) / seconds * 100 for node in group]
            memory = [node.memory_mb() for node in group]
            figures |= {
                f"idle_{label}_tx": sum(kinds.values()) / seconds / NODES,
                f"idle_{label}_cpu": statistics.mean(used),
                f"idle_{label}_rss": max(rss for rss, _ in memory),
                f"idle_{label}_peak_rss": max(peak for _, peak in memory),
                f"idle_{label}_start": max(starts[label]),
                f"idle_{label}_start_median": statistics.median(starts[label]),
            }
    for label, url in urls.items():
        ((ran,),) = harness.query(url, "SELECT count(*) FROM scheduler_runs WHERE job LIKE '@%%'")
        figures[f"idle_{label}_runs"] = ran
    for what in ("tx", "rss", "start"):
        small = figures[f"idle_small_{what}"]
        figures[f"idle_ratio_{what}"] = figures[f"idle_big_{what}"] / small if small else math.nan
    return figures


# --- the 09:00 peak ------------------------------------------------------------------


def _lead(count: int) -> float:
    """Seconds from creating `count` due schedules to their instant: room to create
    them at a third of the rate this machine manages when quiet (about 13,000/s)."""
    return 12 + count / 4000


def _pass_explained(url: str, at: datetime, limit: int) -> float:
    """The ms one fire pass's due SELECT takes with every schedule due, by EXPLAIN
    ANALYZE of the store's own statement (its clock replaced by `at`), rolled back;
    the plan goes to stderr."""
    database = open_database(url, connections=1)
    try:
        sql = stored._due_sql(database).replace(database.now, "CAST(:at AS TIMESTAMPTZ)")
        with database.transaction() as connection:
            found = connection.execute(
                f"EXPLAIN (ANALYZE, BUFFERS) {sql}", {"jobs": [TEMPLATE], "limit": limit, "at": at}
            )
            plan = [str(row[0]) for row in found]  # it only read and locked: commit
    finally:
        database.dispose()
    harness.log("[n] a fire pass's due SELECT with every row due:\n  " + "\n  ".join(plan))
    (line,) = [line for line in plan if line.startswith("Execution Time")]
    return float(line.split()[2])


def _finished(database: Database, count: int, executions: Path, deadline: float) -> float:
    """When `count` runs had finished: the execution log's lines are counted first (no
    load on the database, whose time is what is measured), then the runs table once."""
    seen = offset = 0
    while seen < count and time.time() < deadline:
        if executions.exists():
            with executions.open("rb") as log:
                log.seek(offset)
                chunk = log.read()
            offset += len(chunk)
            seen += chunk.count(b"\n")
        time.sleep(0.2)
    statement = (
        f"SELECT count(*) AS done FROM scheduler_runs WHERE job LIKE '@%' AND status IN {FINISHED}"
    )
    done = 0
    while time.time() < deadline:
        with database.transaction() as connection:
            done = connection.execute(statement).scalar()
        if done >= count:
            return time.time()
        time.sleep(0.2)
    raise RuntimeError(f"the runs did not finish in time ({done:,} of {count:,})")


def _outcome(database: Database, due: float, count: int, executions: Path) -> Figures:
    """What the runs table, the due schedules (`peak-…`) and the execution log say once
    the nodes have stopped."""
    with database.transaction() as connection:
        runs = connection.execute(
            "SELECT count(*) AS runs, count(DISTINCT job) AS jobs,"
            " sum(CASE WHEN status = 'succeeded' THEN 1 ELSE 0 END) AS succeeded,"
            " min(claimed_at) AS first, max(claimed_at) AS claimed_at,"
            " max(started_at) AS started_at, max(finished_at) AS finished_at"
            " FROM scheduler_runs WHERE job LIKE '@%'"
        ).one()
        schedules = connection.execute(
            "SELECT count(*) AS made, count(next_due_at) AS due, max(fired_at) AS fired_at"
            " FROM scheduler_schedules WHERE key LIKE 'peak-%'"
        ).one()
        held = connection.execute(
            "SELECT count(*) AS won FROM scheduler_runs WHERE job LIKE '@%' GROUP BY holder"
        ).scalars()
    ran = harness.executions(executions)
    return {
        "schedules": schedules.made,
        "runs": runs.runs,
        "succeeded": runs.succeeded,
        "not_fired": schedules.due,
        "unclaimed": schedules.made - runs.jobs,
        "duplicates": sum(times - 1 for times in ran.values() if times > 1),
        "missed": count - len(ran),
        "first_claim": runs.first.timestamp() - due,
        "last_claim": runs.claimed_at.timestamp() - due,
        "last_fired": schedules.fired_at.timestamp() - due,
        "last_start": runs.started_at.timestamp() - due,
        "last_finish": runs.finished_at.timestamp() - due,
        "per_node": max(held) / count * 100,
    }


# The server's log of a statement's duration (`log_min_duration_statement = 0`), whose
# text may go on over the next lines (they begin with white space). The extended
# protocol logs a statement's parse, bind and execute apart: each is summed, the
# executions counted.
_DURATION = re.compile(
    r"^\S+ (\S+) UTC \[\d+\] \S+@(\S+) LOG:  duration: ([\d.]+) ms  "
    r"(statement|parse|bind|execute)[^:]*: (.*)"
)
DUE_SELECT = "fire pass: due SELECT"


def log_durations(url: str, breakdown: bool, plans_ms: float, jit: str) -> None:
    """Have the server log each wait for a lock past `deadlock_timeout` (a second) on
    this database; with `breakdown`, every statement with its duration too; and the
    plan (with actual rows and whether JIT compiled it; no per-node timing) of each that
    takes longer than `plans_ms` (auto_explain, loaded by each session opened from now
    on; 0: none); `jit` "off" turns the server's JIT compilation off on it."""
    name = url.rsplit("/", 1)[1]
    settings = {"log_lock_waits": "on"}
    settings |= {"log_min_duration_statement": "0"} if breakdown else {}
    settings |= {"jit": "off"} if jit == "off" else {}
    if plans_ms > 0:
        settings |= {
            "session_preload_libraries": "auto_explain",
            "auto_explain.log_min_duration": f"{plans_ms:g}ms",
            "auto_explain.log_analyze": "on",
            "auto_explain.log_timing": "off",
        }
    with psycopg.connect(harness.ADMIN_URL, autocommit=True) as connection:
        for setting, value in settings.items():
            connection.execute(f"ALTER DATABASE \"{name}\" SET {setting} = '{value}'")


# auto_explain's entry: its duration, then the query and the plan on the next lines.
_PLAN = re.compile(r"^\S+ (\S+) UTC \[\d+\] \S+@(\S+) LOG:  duration: ([\d.]+) ms  plan:")
_JIT = re.compile(r"^\s*JIT:")


def slow_plans(url: str, since: server_log.Mark, until: server_log.Mark, into: Path) -> None:
    """Write the plans auto_explain logged on this database between the marks to `into`
    and log, by statement, how many there were, their mean ms and their JIT time."""
    name = url.rsplit("/", 1)[1]
    plans: list[tuple[float, list[str]]] = []
    current: tuple[float, list[str]] | None = None
    with server_log.SERVER_LOG.open(errors="replace") as log:
        log.seek(since.offset)
        for line in log:
            found = _PLAN.match(line)
            if found is not None:
                keep = found[2] == name and since.time <= found[1] <= until.time
                current = (float(found[3]), []) if keep else None
                if current is not None:
                    plans.append(current)
            elif current is not None and line[:1].isspace():
                current[1].append(line.rstrip())
            else:
                current = None
    into.write_text("\n\n".join(f"{ms} ms\n" + "\n".join(lines) for ms, lines in plans))
    kinds: dict[str, list[tuple[float, bool]]] = {}
    for ms, lines in plans:
        text = " ".join(" ".join(lines).split())
        query = text.partition("Query Text: ")[2]
        kind = DUE_SELECT if "SKIP LOCKED" in query else query[:60]
        kinds.setdefault(kind, []).append((ms, any(map(_JIT.match, lines))))
    harness.log(f"[n] plans of the statements that took longest ({len(plans)}, in {into}):")
    for kind, entries in sorted(kinds.items(), key=lambda item: -sum(ms for ms, _ in item[1])):
        jitted = sum(jit for _, jit in entries)
        harness.log(
            f"  {len(entries):5} x {statistics.mean(ms for ms, _ in entries):8.1f} ms,"
            f" {jitted} compiled by JIT: {kind}"
        )


def server_time(
    url: str, since: server_log.Mark, until: server_log.Mark
) -> dict[str, tuple[float, int]]:
    """The server's ms in each statement on this database between the marks, and how
    many times it was executed, by the statement's first 70 characters."""
    name = url.rsplit("/", 1)[1]
    spent: dict[str, tuple[float, int]] = {}
    current: list[Any] | None = None

    def done() -> None:
        if current is not None and current[0] == name and since.time <= current[1] <= until.time:
            text = " ".join(" ".join(current[4]).split())
            kind = DUE_SELECT if "SKIP LOCKED" in text else text[:70]
            ms, times = spent.get(kind, (0.0, 0))
            spent[kind] = (ms + current[2], times + (current[3] in ("statement", "execute")))

    with server_log.SERVER_LOG.open(errors="replace") as log:
        log.seek(since.offset)
        for line in log:
            found = _DURATION.match(line)
            if found is not None:
                done()
                current = [found[2], found[1], float(found[3]), found[4], [found[5]]]
            elif current is not None and line[:1].isspace():
                current[4].append(line)
            else:
                done()
                current = None
    done()
    return spent


_WAIT = re.compile(
    r"^\S+ (\S+) UTC \[\d+\] \S+@(\S+) LOG:  process \d+ (?:still waiting|acquired) for (\w+) on"
)


def lock_waits(url: str, since: server_log.Mark, until: server_log.Mark) -> dict[str, int]:
    """How many times a session on this database waited more than a second for a lock,
    by lock mode (`log_lock_waits`), and for how many the wait ended (acquired)."""
    name = url.rsplit("/", 1)[1]
    waits: dict[str, int] = {}
    with server_log.SERVER_LOG.open(errors="replace") as log:
        log.seek(since.offset)
        for line in log:
            found = _WAIT.match(line)
            if found is not None and found[2] == name and since.time <= found[1] <= until.time:
                kind = f"{'acquired' if 'acquired' in line else 'waiting'} {found[3]}"
                waits[kind] = waits.get(kind, 0) + 1
    return waits


def _report_server_time(label: str, spent: dict[str, tuple[float, int]]) -> float:
    """Log the statements that took the server longest; the due SELECTs' share (%)."""
    total = sum(ms for ms, _ in spent.values())
    ranked = sorted(spent.items(), key=lambda item: -item[1][0])
    lines = [
        f"{ms / 1000:8.2f} s {times:6} x {ms / max(times, 1):8.2f} ms  {kind}"
        for kind, (ms, times) in ranked[:10]
    ]
    harness.log(f"[n] {label}: server time by statement ({total / 1000:.1f} s in all):")
    harness.log("  " + "\n  ".join(lines))
    return spent.get(DUE_SELECT, (0.0, 0))[0] / total * 100 if total else math.nan


def peak_once(
    folder: Path, count: int, env: dict[str, str], options: argparse.Namespace
) -> Figures:
    """`count` schedules due at one instant, 3 nodes; see the module's docstring."""
    executions = folder / f"executions-{count}.log"
    batch, plans_ms, breakdown = options.batch, options.plans_ms, options.breakdown
    with harness.fresh_database() as url:
        log_durations(url, breakdown, plans_ms, options.jit)
        nodes = [
            _start(
                folder,
                f"peak-{count}-n{index}",
                url,
                env | {"BENCH_EXECUTION_LOG": str(executions)},
                counted=breakdown,
            )
            for index in range(NODES)
        ]
        with harness.running(nodes):
            for node in nodes:
                node.wait_for("node_started", timeout=120)
            due = math.ceil(time.time() + _lead(count))
            at = datetime.fromtimestamp(due, UTC)
            batches = (
                _due_specs("peak", first, min(batch, count - first), at)
                for first in range(0, count, batch)
            )
            created_s, _, _ = _create(url, batches)
            if time.time() > due - 2:
                raise RuntimeError(f"creating {count:,} schedules took {created_s:.0f}s: too long")
            pass_ms = _pass_explained(url, at + timedelta(seconds=1), stored.ROWS_PER_PASS)
            harness.sleep_until(due - 0.5)
            before = harness.total_statements(nodes) if breakdown else None
            nodes_before = [node.cpu_seconds() for node in nodes]
            server_before = harness.server_busy_seconds()
            since = server_log.clock()
            database = open_database(url, connections=1)
            try:
                finished_at = _finished(database, count, executions, due + 600)
                until = server_log.clock()
                used = [n.cpu_seconds() - c for n, c in zip(nodes, nodes_before, strict=True)]
                nodes_cpu = sum(used)
                server_cpu = harness.server_busy_seconds() - server_before
                if before is not None:
                    time.sleep(0.5)  # the statement counts are written every 0.2 s
                    sent = harness.difference(harness.total_statements(nodes), before)
            finally:
                database.dispose()
        harness.log(f"[n] peak {count:,}: CPU seconds of each node: {[round(u, 1) for u in used]}")
        breakdown_figures: Figures = {}
        if before is not None:
            harness.log(f"[n] peak {count:,}: statements by kind: {sent['kinds']}")
            breakdown_figures = _breakdown(count, sent, server_time(url, since, until))
        waits = lock_waits(url, since, until)
        harness.log(f"[n] peak {count:,}: waits for a lock past a second: {waits}")
        if plans_ms > 0:
            slow_plans(url, since, until, folder / f"plans-{count}.log")
        database = open_database(url, connections=1)
        try:
            figures = _outcome(database, due, count, executions)
        finally:
            database.dispose()
    return (
        figures
        | breakdown_figures
        | {
            "created_s": created_s,
            "pass_ms": pass_ms,
            "nodes_ms_per_run": nodes_cpu / count * 1000,
            "busiest_node_cpu": max(used) / (finished_at - due + 0.5) * 100,
            "server_ms_per_run": server_cpu / count * 1000,
            "lock_waits": sum(n for kind, n in waits.items() if kind.startswith("waiting")),
        }
    )


def _breakdown(count: int, sent: dict[str, Any], spent: dict[str, tuple[float, int]]) -> Figures:
    """`--breakdown`'s figures: the statements the nodes sent, the server's time in them."""
    due_share = _report_server_time(f"peak {count:,}", spent)
    due_ms, due_times = spent.get(DUE_SELECT, (0.0, 0))
    return {
        "due_select_share": due_share,
        "due_select_s": due_ms / 1000,
        "due_select_mean_ms": due_ms / max(1, due_times),
        "statements_per_run": sent["statements"] / count,
        "schedule_selects": sum(
            n for kind, n in sent["kinds"].items() if kind == "SELECT scheduler_schedules"
        ),
    }


def peak(folder: Path, options: argparse.Namespace, env: dict[str, str]) -> Figures:
    count, baseline = options.peak, options.peak_baseline
    base = peak_once(folder, baseline, env, options)
    main = peak_once(folder, count, env, options)
    return (
        {f"peak_{key}": value for key, value in main.items()}
        | {f"peak_base_{key}": value for key, value in base.items()}
        | {
            "peak_ratio_last_start": main["last_start"] / base["last_start"],
            "peak_ratio_per_run": (main["last_start"] / count) / (base["last_start"] / baseline),
        }
    )


# --- SQLite --------------------------------------------------------------------------


def sqlite_once(folder: Path, total: int, due_count: int, env: dict[str, str]) -> Figures:
    """One node on a SQLite file of `total` schedules, `due_count` due at one instant."""
    path = folder / f"schedules-{total}.db"
    url = f"sqlite:///{path}"
    subprocess.run(
        [harness.SCHEDULER, "migrate", "--database-url", url], check=True, capture_output=True
    )
    executions = folder / f"executions-sqlite-{total}.log"
    node = _start(
        folder,
        f"sqlite-{total}",
        url,
        env | {"BENCH_EXECUTION_LOG": str(executions)},
        counted=False,
    )
    with harness.running([node]):
        node.wait_for("node_started", timeout=60)
        now = datetime.now(UTC)
        due = math.ceil(time.time() + 10 + total / 2000)
        at = datetime.fromtimestamp(due, UTC)
        quiet = _quiet_specs(0, total - due_count, now, random.Random(total))
        specs = quiet + _due_specs("peak", 0, due_count, at)
        created_s, _, _ = _create(url, iter([specs]))
        if time.time() > due - 2:
            raise RuntimeError(f"creating {total:,} schedules took {created_s:.0f}s: too long")
        harness.sleep_until(due)
        database = open_database(url, connections=1)
        try:
            _finished(database, due_count, executions, due + 300)
        finally:
            database.dispose()
    database = open_database(url, connections=1)
    try:
        figures = _outcome(database, due, due_count, executions)
    finally:
        database.dispose()
    return figures | {"total": total, "created_s": created_s}


def sqlite(folder: Path, total: int, due_count: int, env: dict[str, str]) -> Figures:
    base = sqlite_once(folder, due_count, due_count, env)
    main = sqlite_once(folder, total, due_count, env)
    return (
        {f"sqlite_{key}": value for key, value in main.items()}
        | {f"sqlite_base_{key}": value for key, value in base.items()}
        | {"sqlite_ratio_last_start": main["last_start"] / base["last_start"]}
    )


# --- the tables ----------------------------------------------------------------------


def _rows(options: argparse.Namespace) -> dict[str, list[Row]]:
    big, small = f"{options.schedules:,}", f"{options.small:,}"
    top, base = f"{options.peak:,}", f"{options.peak_baseline:,}"
    zero = ("0", lambda v: v == 0, "max")
    return {
        "create": [
            Row("create_s", f"create {big}: seconds in create_many", "s"),
            Row("create_rows_per_s", f"create {big}: rows/s", "/s"),
            Row("create_client_cpu", "create: this process's CPU (checks, rows)", "%"),
            Row("create_first_batch_per_s", "create: first batch (empty table), rows/s", "/s"),
            Row("create_last_batch_per_s", "create: last batch, rows/s", "/s"),
            Row("create_last_to_first", "create: last batch / first batch (baseline)", ""),
            Row("tx_baseline_ms", "app transaction without create (baseline)", "ms"),
            Row("tx_create_ms", "app transaction with create (by job name)", "ms"),
            Row("tx_added_ms", "added by create (by job name), median", "ms"),
            Row("tx_ratio", "with create / without (baseline)", ""),
            Row("tx_added_job_ms", "added by create given the Job, median", "ms"),
        ],
        "list": [
            row
            for page, label in (
                ("prefix", 'list("tenant-42", limit=100)'),
                ("first", "first page, no filter"),
                ("middle", 'page after="tenant-5"'),
            )
            for row in (
                Row(f"list_{page}_ms", f"{label} at {big}", "ms", "≤ 200 ms", lambda v: v <= 200),
                Row(f"list_{page}_small_ms", f"{label} at {small} (baseline)", "ms"),
                Row(f"list_{page}_ratio", f"{label}: ratio {big} / {small}", ""),
                Row(f"list_{page}_rows", f"{label}: rows at {big}", ""),
                Row(f"list_{page}_fresh_ms", f"{label} at {big}, before ANALYZE", "ms"),
            )
        ]
        + [Row("list_fresh_analyzed", "autovacuum had analyzed the table by then (1/0)", "")],
        "idle": [
            Row("idle_big_tx", f"idle, {big}: tx/s per node", "/s", "≤ 0.1", lambda v: v <= 0.1),
            Row("idle_small_tx", f"idle, {small}: tx/s per node (baseline)", "/s"),
            Row("idle_ratio_tx", f"tx/s per node, ratio {big} / {small}", ""),
            Row(
                "idle_big_rss",
                f"idle, {big}: RSS, largest node",
                "MiB",
                "≤ 100",
                lambda v: v <= 100,
            ),
            Row("idle_small_rss", f"idle, {small}: RSS, largest node (baseline)", "MiB"),
            Row("idle_ratio_rss", f"RSS, ratio {big} / {small}", ""),
            Row("idle_big_peak_rss", f"idle, {big}: peak RSS (VmHWM), largest", "MiB"),
            Row("idle_small_peak_rss", f"idle, {small}: peak RSS (VmHWM), largest", "MiB"),
            Row(
                "idle_big_start",
                f"start, {big}: exec → node_started, slowest",
                "s",
                "≤ 2 s",
                lambda v: v <= 2,
            ),
            Row("idle_small_start", f"start, {small}: slowest (baseline)", "s"),
            Row("idle_ratio_start", f"start, ratio {big} / {small}", ""),
            Row("idle_big_start_median", f"start, {big}: median of the nodes", "s"),
            Row("idle_small_start_median", f"start, {small}: median of the nodes", "s"),
            Row("idle_big_cpu", f"idle, {big}: CPU per node", "% core"),
            Row("idle_small_cpu", f"idle, {small}: CPU per node", "% core"),
            Row("idle_big_runs", f"runs claimed meanwhile, {big}", "", *zero),
            Row("idle_small_runs", f"runs claimed meanwhile, {small}", "", *zero),
        ],
        "peak": [
            Row("peak_schedules", "peak: schedules due at the instant", ""),
            Row("peak_runs", "peak: runs (one row per period)", ""),
            Row("peak_succeeded", "peak: runs succeeded", ""),
            Row("peak_unclaimed", "peak: schedules with no run", "", *zero),
            Row("peak_not_fired", "peak: schedules still due after", "", *zero),
            Row("peak_duplicates", "peak: executions twice (execution log)", "", *zero),
            Row("peak_missed", "peak: periods never executed", "", *zero),
            Row("peak_created_s", f"peak: creating {top} (while nodes run)", "s"),
            Row("peak_pass_ms", f"one pass's due SELECT, {top} due (EXPLAIN)", "ms"),
            Row("peak_first_claim", "peak: instant → first claim", "s"),
            Row("peak_last_fired", "peak: instant → last schedule fired", "s"),
            Row("peak_last_claim", "peak: instant → last claim", "s"),
            Row(
                "peak_last_start",
                f"peak {top}: instant → last start",
                "s",
                "≤ 10 s",
                lambda v: v <= 10,
            ),
            Row("peak_last_finish", "peak: instant → last finish", "s"),
            Row("peak_per_node", "peak: share of the busiest node", "%"),
            Row("peak_nodes_ms_per_run", "peak: CPU of the nodes per run", "ms"),
            Row("peak_server_ms_per_run", "peak: CPU of the server per run", "ms"),
            Row("peak_busiest_node_cpu", "peak: CPU of the busiest node", "% core"),
            Row("peak_due_select_s", "peak: server time in fire passes' due SELECT", "s"),
            Row("peak_due_select_share", "peak: its share of all statement time", "%"),
            Row("peak_due_select_mean_ms", "peak: due SELECT, mean per pass", "ms"),
            Row("peak_statements_per_run", "peak: statements per run (batches count one)", ""),
            Row("peak_schedule_selects", "peak: SELECTs of scheduler_schedules", ""),
            Row("peak_lock_waits", "peak: waits for a lock past 1 s (server log)", ""),
            Row("peak_base_pass_ms", f"one pass's due SELECT, {base} due (EXPLAIN)", "ms"),
            Row("peak_base_last_claim", f"baseline {base}: instant → last claim", "s"),
            Row("peak_base_last_start", f"baseline {base}: instant → last start", "s"),
            Row("peak_base_nodes_ms_per_run", f"baseline {base}: CPU of the nodes per run", "ms"),
            Row("peak_base_server_ms_per_run", f"baseline {base}: CPU of the server per run", "ms"),
            Row("peak_base_due_select_s", f"baseline {base}: server time in due SELECT", "s"),
            Row("peak_base_due_select_share", f"baseline {base}: its share", "%"),
            Row("peak_base_duplicates", f"baseline {base}: executions twice", "", *zero),
            Row("peak_base_missed", f"baseline {base}: never executed", "", *zero),
            Row("peak_ratio_last_start", f"last start, ratio {top} / {base}", ""),
            Row("peak_ratio_per_run", "last start per run, ratio (1: linear)", ""),
        ],
        "sqlite": [
            Row("sqlite_total", "SQLite: schedules in the file", ""),
            Row("sqlite_schedules", "SQLite: of them due at the instant", ""),
            Row("sqlite_runs", "SQLite: runs", ""),
            Row("sqlite_unclaimed", "SQLite: due schedules with no run", "", *zero),
            Row("sqlite_duplicates", "SQLite: executions twice", "", *zero),
            Row("sqlite_missed", "SQLite: never executed", "", *zero),
            Row("sqlite_not_fired", "SQLite: due schedules still due after", "", *zero),
            Row("sqlite_last_claim", "SQLite: instant → last claim", "s"),
            Row("sqlite_last_start", "SQLite: instant → last start", "s"),
            Row("sqlite_base_last_start", "SQLite, only the due ones (baseline)", "s"),
            Row("sqlite_ratio_last_start", "SQLite: last start, ratio to the baseline", ""),
            Row("sqlite_base_missed", "SQLite baseline: never executed", "", *zero),
        ],
    }


# --- the whole ----------------------------------------------------------------------


def run_once(options: argparse.Namespace, parts: Sequence[str]) -> Figures:
    figures: Figures = {}
    with harness.workspace("n") as folder, bytecode_cache() as cache, ExitStack() as stack:
        workers = {} if options.workers is None else {"SCHEDULER_WORKERS": str(options.workers)}
        env = {**cache, **workers}
        if {"create", "list", "idle"} & set(parts):
            big = stack.enter_context(harness.fresh_database())
            small = stack.enter_context(harness.fresh_database())
            created, quiet_until = populate(big, options.schedules, options.batch)
            populate(small, options.small, options.batch)
            if "create" in parts:
                figures |= created
            if "list" in parts:
                figures |= listing({"big": big, "small": small}, options.pages)
            if "create" in parts:
                figures |= app_transactions(big, options.tries)
            if "idle" in parts:
                figures |= idle(folder, {"big": big, "small": small}, options.seconds, env)
                if datetime.now(UTC) > quiet_until:
                    harness.log("[n] the idle window outlasted the quiet schedules: see runs")
            stack.close()
        if "peak" in parts:
            figures |= peak(folder, options, env)
        if "sqlite" in parts:
            figures |= sqlite(folder, options.sqlite, options.sqlite_due, env)
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    harness.stop_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--parts", default=",".join(PARTS), help="comma-separated: " + ", ".join(PARTS)
    )
    parser.add_argument("--schedules", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=1_000, help="the baseline's size")
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--tries", type=int, default=200, help="app transactions of each kind")
    parser.add_argument("--pages", type=int, default=50, help="tries of each page")
    parser.add_argument("--seconds", type=float, default=60.0, help="idle window")
    parser.add_argument("--peak", type=int, default=100_000)
    parser.add_argument("--peak-baseline", type=int, default=10_000)
    parser.add_argument(
        "--plans-ms",
        type=float,
        default=0.0,
        help="peak: log the plans of statements slower than this (auto_explain; 0: none)",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="peak: also count the nodes' statements and log the server's time in each"
        " (costs about a sixth of the CPU a run: not for the headline)",
    )
    parser.add_argument(
        "--jit",
        choices=("default", "off"),
        default="default",
        help="peak: the server's JIT compilation on the peak databases (default: the server's)",
    )
    parser.add_argument(
        "--workers", type=int, help="every node's --workers (default: the node's own default)"
    )
    parser.add_argument("--sqlite", type=int, default=10_000)
    parser.add_argument("--sqlite-due", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    options = parser.parse_args(argv)
    parts = [part for part in options.parts.split(",") if part]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    results = []
    try:
        for number in range(1, options.runs + 1):
            harness.log(f"[n] run {number}/{options.runs}: {', '.join(parts)}")
            began = time.monotonic()
            results.append(run_once(options, parts))
            harness.log(f"[n] run {number} took {time.monotonic() - began:.0f}s")
    finally:
        harness.drop_template()
    tables = {}
    for part, rows in _rows(options).items():
        if part in parts:
            tables[part] = harness.summarise(rows, results)
            harness.print_table(f"n/{part}: schedules created at run time", tables[part])
    if options.json:
        options.json.write_text(json.dumps({"tables": tables, "runs": results}, indent=2))
    summary: dict[str, Any] = {
        entry["key"]: entry["value"] for table in tables.values() for entry in table
    }
    print(json.dumps(summary))
    met = all(entry["met"] is not False for table in tables.values() for entry in table)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
