"""a: one every-second job for 60 s on 1 node and on 3 nodes.

Start lag is started_at - period from the runs table (both on the database clock);
duplicates and missed periods come from the execution log the job body writes.
"""

from __future__ import annotations

import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from bench import harness
from bench.harness import Figures, Row, Scenario

DURATION_S = 60
SMOKE_DURATION_S = 5


def _one(node_count: int, duration: int) -> Figures:
    with harness.workspace("a") as folder, harness.fresh_database() as url:
        jobs = harness.job_module(folder, "bench_jobs", [("* * * * * *", 1, "")])
        executions = folder / "executions.log"
        env = {"BENCH_EXECUTION_LOG": str(executions)}
        nodes = [harness.start_node(folder, f"n{i}", url, jobs, env=env) for i in range(node_count)]
        with harness.running(nodes):
            for node in nodes:
                node.wait_for("node_started")
            first = math.ceil(time.time()) + 1
            last = first + duration - 1
            harness.sleep_until(last + 2)
        window = (datetime.fromtimestamp(first, UTC), datetime.fromtimestamp(last, UTC))
        rows = harness.query(
            url,
            "SELECT period, started_at FROM scheduler_runs "
            "WHERE period BETWEEN %s AND %s AND started_at IS NOT NULL",
            window,
        )
        lags = [(started - period).total_seconds() * 1000 for period, started in rows]
        ran = harness.executions(executions)
        expected = {datetime.fromtimestamp(second, UTC) for second in range(first, last + 1)}
        done = {datetime.fromisoformat(period) for _, period in ran}
        return {
            "p50": harness.percentile(lags, 50),
            "p99": harness.percentile(lags, 99),
            "max": max(lags, default=math.nan),
            "duplicates": sum(count - 1 for count in ran.values() if count > 1),
            "missed": len(expected - done),
            "periods": len(expected),
        }


def run_once(smoke: bool) -> Figures:
    """The 1-node and 3-node clusters run side by side, each on a database of its own:
    one job a second is light, and it halves the time a run takes."""
    duration = SMOKE_DURATION_S if smoke else DURATION_S
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {count: pool.submit(_one, count, duration) for count in (1, 3)}
        return {
            f"{key}_{count}": value
            for count, future in futures.items()
            for key, value in future.result().items()
        }


ROWS = [
    Row("p50_1", "start lag p50, 1 node", "ms"),
    Row("p99_1", "start lag p99, 1 node", "ms"),
    Row("max_1", "start lag max, 1 node", "ms"),
    Row("p50_3", "start lag p50, 3 nodes", "ms"),
    Row("p99_3", "start lag p99, 3 nodes", "ms", "< 25 ms", lambda v: v < 25),
    Row("max_3", "start lag max, 3 nodes", "ms"),
    Row("duplicates_1", "duplicates, 1 node", "", "0", lambda v: v == 0, "max"),
    Row("duplicates_3", "duplicates, 3 nodes", "", "0", lambda v: v == 0, "max"),
    Row("missed_1", "missed periods, 1 node", "", "0", lambda v: v == 0, "max"),
    Row("missed_3", "missed periods, 3 nodes", "", "0", lambda v: v == 0, "max"),
]
SCENARIO = Scenario("a", "one every-second job for 60 s, 1 and 3 nodes", run_once, ROWS)

if __name__ == "__main__":
    sys.exit(harness.main(SCENARIO))
