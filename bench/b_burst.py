"""b: 10,000 jobs all due at the same instant, 3 nodes, trivial bodies.

The jobs fire once a day at an instant a few seconds after the nodes start (a six-field
cron generated for it). Figures: from that instant to the last claim and the last start
(claimed_at and started_at in the runs table, database clock), and the statements all
nodes sent per run, counted at the driver (bench/node.py): from just before the instant
until every run finished, and again including the catch-up pass that follows (each node
looks at each job's new period once; --catchup-interval 5s brings that pass into the
window).

In the same run, once the nodes are stopped, the baseline: APScheduler 3 firing the same
number of jobs at one instant in one process with no database (`apscheduler_burst`,
as many workers as a node), so that the last start is also a ratio a reader can compare
across runs on a busy machine. That baseline logs nothing; a second one, right after,
logs APScheduler's own INFO lines (two a run) to a file, as a team that logs at INFO
runs it, since the nodes write their three lines a run too.

The runs table, once the nodes have stopped: the share of its row updates that were
HOT (PostgreSQL wrote the new version on the same page and touched no index; a start
can be one since migration 0011, an outcome cannot, so at most half), and its size.

The longest stall: a thread of the bench sleeps 5 ms at a time from just before the
instant until every run finished, and keeps the longest it overslept. A machine that
froze (every node late alike, as once in the fourteenth part of issue 19) shows here in
seconds; a busy one in tens of milliseconds.

The floor: (the database server's CPU in this run + the silent baseline's CPU) ÷ the
cores, the last start of nodes that each spent per run what APScheduler 3 alone spends,
beside the server's work as measured, with every core busy on nothing else throughout.
A last start below it needs nodes cheaper per run than APScheduler 3 with no database
and no log lines, or a server that does less per run.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import harness
from bench.harness import Figures, Row, Scenario
from scheduler.config import DEFAULT_WORKERS

JOBS, SMOKE_JOBS = 10_000, 500
NODES = 3
# Seconds from starting the nodes to the instant every job is due; must cover start-up.
LEAD_S, SMOKE_LEAD_S = 15, 6
CATCHUP_INTERVAL_S = 5
# Seconds from starting the baseline to its instant (it loads 10,000 jobs in about 0.4 s).
BASELINE_LEAD_S = 4
# The cores this process may run on: the floor below spreads CPU time over them.
CORES = len(os.sched_getaffinity(0))
FINISHED = "('succeeded', 'failed', 'timed_out', 'skipped', 'abandoned')"


def run_once(smoke: bool) -> Figures:
    count, lead = (SMOKE_JOBS, SMOKE_LEAD_S) if smoke else (JOBS, LEAD_S)
    with harness.workspace("b") as folder, harness.fresh_database() as url:
        due = math.ceil(time.time()) + lead
        jobs = harness.job_module(folder, "bench_jobs", [(harness.cron_at(due), count, "")])
        executions = folder / "executions.log"
        nodes = [
            harness.start_node(
                folder,
                f"n{i}",
                url,
                jobs,
                ["--catchup-interval", f"{CATCHUP_INTERVAL_S}s"],
                env={"BENCH_EXECUTION_LOG": str(executions)},
            )
            for i in range(NODES)
        ]
        with harness.running(nodes):
            for node in nodes:
                node.wait_for("node_started", timeout=lead)
            if time.time() > due - 1:
                raise RuntimeError(f"the nodes took more than {lead - 1}s to start; raise LEAD_S")
            harness.sleep_until(due - 0.5)
            stalls = harness.StallWatch()
            before = harness.total_statements(nodes)
            cpu_before = [node.cpu_seconds() for node in nodes]
            machine_before = harness.machine_busy_seconds()
            server_before = harness.server_busy_seconds()
            finished_at = _wait_finished(url, count, due + 120)
            longest_stall = stalls.stop()
            busy = finished_at - (due - 0.5)
            nodes_cpu = sum(n.cpu_seconds() - c for n, c in zip(nodes, cpu_before, strict=True))
            machine_cpu = harness.machine_busy_seconds() - machine_before
            server_cpu = harness.server_busy_seconds() - server_before
            time.sleep(0.5)  # the counters flush every 0.2 s
            runs_only = harness.difference(harness.total_statements(nodes), before)
            harness.sleep_until(finished_at + CATCHUP_INTERVAL_S + 2)
            with_catchup = harness.difference(harness.total_statements(nodes), before)
        (first_claim, last_claim, last_start, started) = harness.query(
            url,
            "SELECT min(claimed_at), max(claimed_at), max(started_at), count(started_at) "
            "FROM scheduler_runs WHERE period = %s",
            (datetime.fromtimestamp(due, UTC),),
        )[0]
        table = _runs_table(url)
        ran = harness.executions(executions)
        baseline = _baseline(folder, count)
        logged = _baseline(folder, count, log_lines=True)
        harness.log(f"[b] statements by kind, claim to finish: {runs_only['kinds']}")
        harness.log(f"[b] statements by kind, with catch-up: {with_catchup['kinds']}")
        return {
            "first_claim": first_claim.timestamp() - due,
            "last_claim": last_claim.timestamp() - due,
            "last_start": last_start.timestamp() - due,
            "started": started,
            "last_finish": finished_at - due,
            "longest_stall": longest_stall * 1000,
            "nodes_cpu": nodes_cpu / busy * 100,
            "machine_cpu": machine_cpu / busy * 100,
            "nodes_ms_per_run": nodes_cpu / count * 1000,
            "machine_ms_per_run": machine_cpu / count * 1000,
            "server_ms_per_run": server_cpu / count * 1000,
            "per_node": _busiest_share(url, due, count),
            "statements_per_run": runs_only["statements"] / count,
            "round_trips_per_run": runs_only["round_trips"] / count,
            "transactions_per_run": runs_only["transactions"] / count,
            "statements_per_run_catchup": with_catchup["statements"] / count,
            **table,
            "duplicates": sum(n - 1 for n in ran.values() if n > 1),
            "missed": count - len(ran),
            "baseline_last_start": baseline["last_start"],
            "ratio_last_start": (last_start.timestamp() - due) / baseline["last_start"],
            "baseline_ms_per_run": baseline["cpu_s"] / count * 1000,
            "floor_last_start": (server_cpu + baseline["cpu_s"]) / CORES,
            "baseline_missed": count - baseline["started"],
            "logged_last_start": logged["last_start"],
            "ratio_logged_last_start": (last_start.timestamp() - due) / logged["last_start"],
            "logged_ms_per_run": logged["cpu_s"] / count * 1000,
        }


def _baseline(folder: Path, count: int, *, log_lines: bool = False) -> dict[str, float]:
    """APScheduler 3, one process, no database: the same burst, measured right after;
    with `log_lines`, logging its INFO lines to a file as a team that logs runs it."""
    due = math.ceil(time.time()) + BASELINE_LEAD_S
    lines = ["--log-lines", str(folder / "baseline-lines.log")] if log_lines else []
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.apscheduler_burst",
            *("--jobs", str(count), "--due", str(due)),
            *("--log", str(folder / "baseline.log"), "--workers", str(_node_workers())),
            *lines,
        ],
        capture_output=True,
        text=True,
        timeout=BASELINE_LEAD_S + 150,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the baseline failed: {done.stdout}{done.stderr}")
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def _node_workers() -> int:
    """A node's workers in this run (`BENCH_WORKERS` overrides the default for the nodes),
    which the baseline gets too."""
    return int(os.environ.get("BENCH_WORKERS") or DEFAULT_WORKERS)


def _runs_table(url: str) -> dict[str, float]:
    """The runs table once the nodes have stopped (their statistics sent as their
    connections closed): the share of its row updates that were HOT (no index touched;
    a start can be, an outcome cannot), and its size, rows and indexes."""
    statement = (
        "SELECT n_tup_upd, n_tup_hot_upd, pg_relation_size(relid), pg_indexes_size(relid)"
        " FROM pg_stat_user_tables WHERE relname = 'scheduler_runs'"
    )
    deadline = time.monotonic() + 5
    while True:
        ((updates, hot, heap, indexes),) = harness.query(url, statement)
        if updates or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return {
        "hot_updates": hot / updates * 100 if updates else 0.0,
        "table_mb": heap / 2**20,
        "indexes_mb": indexes / 2**20,
    }


def _busiest_share(url: str, due: int, count: int) -> float:
    """% of the periods won by the node that won most."""
    held = harness.query(
        url,
        "SELECT count(*) FROM scheduler_runs WHERE period = %s GROUP BY holder",
        (datetime.fromtimestamp(due, UTC),),
    )
    return max(int(won) for (won,) in held) / count * 100


def _wait_finished(url: str, count: int, deadline: float) -> float:
    while time.time() < deadline:
        (done,) = harness.query(
            url, f"SELECT count(*) FROM scheduler_runs WHERE status IN {FINISHED}"
        )[0]
        if done >= count:
            return time.time()
        time.sleep(0.2)
    raise RuntimeError("the runs did not finish in time")


ROWS = [
    Row("first_claim", "first claim after the instant", "s"),
    Row("last_claim", "last claim after the instant", "s", "< 1 s", lambda v: v < 1),
    Row("last_start", "last start after the instant", "s", "≤ 1.5 s", lambda v: v <= 1.5),
    Row("baseline_last_start", "last start, APScheduler 3 alone (baseline)", "s"),
    Row("ratio_last_start", "last start, ratio to the baseline", ""),
    Row("last_finish", "all runs finished after the instant (±0.2 s)", "s"),
    Row("per_node", "share of the runs won by the busiest node", "%"),
    Row("hot_updates", "runs table: updates that touched no index (HOT)", "%"),
    Row("table_mb", "runs table after the burst: rows", "MiB"),
    Row("indexes_mb", "runs table after the burst: indexes", "MiB"),
    Row("longest_stall", "longest stall of a 5 ms ticker in the bench", "ms"),
    Row("nodes_cpu", "CPU of the 3 nodes until all finished", "% core"),
    Row("machine_cpu", "CPU of the whole machine until then (of 200 %)", "% core"),
    Row("nodes_ms_per_run", "CPU of the nodes per run", "ms"),
    Row("machine_ms_per_run", "CPU of the whole machine per run", "ms"),
    Row("server_ms_per_run", "CPU of the PostgreSQL server per run", "ms"),
    Row("baseline_ms_per_run", "CPU per run, APScheduler 3 alone (baseline)", "ms"),
    Row("floor_last_start", "floor: server + baseline CPU, all cores busy", "s"),
    Row("statements_per_run", "statements per run (claim → finish)", "", "≤ 3", lambda v: v <= 3),
    Row("round_trips_per_run", "round trips per run (claim → finish)", ""),
    Row("transactions_per_run", "transactions per run (claim → finish)", ""),
    Row(
        "statements_per_run_catchup",
        "statements per run incl. next catch-up pass",
        "",
        "≤ 3",
        lambda v: v <= 3,
    ),
    Row("duplicates", "duplicates", "", "0", lambda v: v == 0, "max"),
    Row("missed", "missed", "", "0", lambda v: v == 0, "max"),
    Row("baseline_missed", "missed, APScheduler 3 alone (baseline)", "", "", None, "max"),
    Row("logged_last_start", "last start, APScheduler 3 alone logging at INFO", "s"),
    Row("ratio_logged_last_start", "last start, ratio to APScheduler 3 logging at INFO", ""),
    Row("logged_ms_per_run", "CPU per run, APScheduler 3 alone logging at INFO", "ms"),
]
SCENARIO = Scenario("b", "10,000 jobs due at one instant, 3 nodes", run_once, ROWS)

if __name__ == "__main__":
    sys.exit(harness.main(SCENARIO))
