"""c: sustained load, 1,000 every-second jobs on 3 nodes for 60 s.

Runs per second completed come from the execution log the bodies write (periods of the
window that ran, divided by its length); start lag from the runs table; CPU of each node
from /proc/PID/stat over the window, as % of one core.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from datetime import UTC, datetime

from bench import harness
from bench.harness import Figures, Row, Scenario

JOBS, SMOKE_JOBS = 1_000, 100
NODES = 3
DURATION_S, SMOKE_DURATION_S = 60, 5


def run_once(smoke: bool) -> Figures:
    count, duration = (SMOKE_JOBS, SMOKE_DURATION_S) if smoke else (JOBS, DURATION_S)
    with harness.workspace("c") as folder, harness.fresh_database() as url:
        jobs = harness.job_module(folder, "bench_jobs", [("* * * * * *", count, "")])
        executions = folder / "executions.log"
        env = {"BENCH_EXECUTION_LOG": str(executions)}
        # The default 30 s grace: with a backlog, 2 s would abandon runs whose body had
        # run but whose outcome was not written yet, and another node would run them again.
        grace = ["--grace", "30s"]
        nodes = [
            harness.start_node(folder, f"n{i}", url, jobs, grace, env=env) for i in range(NODES)
        ]
        with harness.running(nodes):
            for node in nodes:
                node.wait_for("node_started")
            first = math.ceil(time.time()) + 2
            last = first + duration - 1
            harness.sleep_until(first)
            cpu_before = [node.cpu_seconds() for node in nodes]
            machine_before = harness.machine_busy_seconds()
            statements_before = harness.total_statements(nodes)
            harness.sleep_until(last + 1)
            cpu = [
                (node.cpu_seconds() - before) / duration * 100
                for node, before in zip(nodes, cpu_before, strict=True)
            ]
            machine = (harness.machine_busy_seconds() - machine_before) / duration * 100
            statements = harness.difference(harness.total_statements(nodes), statements_before)
            rss = max(node.memory_mb()[0] for node in nodes)
            harness.sleep_until(last + 4)
        window = (datetime.fromtimestamp(first, UTC), datetime.fromtimestamp(last, UTC))
        rows = harness.query(
            url,
            "SELECT period, started_at FROM scheduler_runs "
            "WHERE period BETWEEN %s AND %s AND started_at IS NOT NULL",
            window,
        )
        lags = [(started - period).total_seconds() * 1000 for period, started in rows]
        ran = harness.executions(executions)
        in_window = {
            key for key in ran if first <= datetime.fromisoformat(key[1]).timestamp() <= last
        }
        expected = count * duration
        harness.log(f"[c] statements by kind: {statements['kinds']}")
        return {
            "runs_per_s": len(in_window) / duration,
            "p50": harness.percentile(lags, 50),
            "p99": harness.percentile(lags, 99),
            "max": max(lags, default=math.nan),
            "cpu_max": max(cpu),
            "cpu_mean": statistics.mean(cpu),
            "cpu_nodes": sum(cpu),
            "machine_cpu": machine,
            "machine_ms_per_run": machine * 10 / max(1, len(in_window) / duration),
            "rss": rss,
            "statements_per_run": statements["statements"] / max(1, len(in_window)),
            "duplicates": sum(n - 1 for n in ran.values() if n > 1),
            "missed": expected - len(in_window),
        }


ROWS = [
    Row("runs_per_s", "runs completed per second", "runs/s", "≥ 1,000", lambda v: v >= 999.5),
    Row("p50", "start lag p50", "ms"),
    Row("p99", "start lag p99", "ms", "< 250 ms", lambda v: v < 250),
    Row("max", "start lag max", "ms"),
    Row("cpu_max", "CPU of the busiest node", "% core"),
    Row("cpu_mean", "CPU per node, mean", "% core"),
    Row("cpu_nodes", "CPU of the 3 nodes together", "% core"),
    Row("machine_cpu", "CPU of the whole machine (of 200 %)", "% core"),
    Row("machine_ms_per_run", "CPU of the whole machine per completed run", "ms"),
    Row("rss", "RSS of the largest node", "MiB"),
    Row("statements_per_run", "statements per run", ""),
    Row("duplicates", "duplicates", "", "0", lambda v: v == 0, "max"),
    Row("missed", "periods not run (missed or skipped)", "", "0", lambda v: v == 0, "max"),
]
SCENARIO = Scenario("c", "1,000 every-second jobs, 3 nodes, 60 s", run_once, ROWS)

if __name__ == "__main__":
    sys.exit(harness.main(SCENARIO))
