"""d: catch-up of one every-second job whose last 24 h (86,400 periods) have no runs.

The job's row is seeded as first seen 24 h 10 min ago, so the first pass finds 86,400
periods inside the 1-day window plus 600 older ones, which it records as missed. The
time to find and claim runs from the first node_started to the moment the job's
watermark moves, which a pass does after its plan is written. Policy `all` claims the
oldest `catchup_limit` (default 1,000) and `latest` the newest, recording the other
86,399 as skipped. With 1 and with 3 nodes at once: the cost should not grow. CPU is
per node, from exec (about 0.7 s of start-up included) until the plan was written.
"""

from __future__ import annotations

import sys
import time

import psycopg

from bench import harness
from bench.harness import Figures, Row, Scenario

HISTORY_S, SMOKE_HISTORY_S = 86_400, 3_600
BEYOND_WINDOW_S = 600
JOB = "j0_00000"


def _one(policy: str, node_count: int, history: int) -> Figures:
    with harness.workspace("d") as folder, harness.fresh_database() as url:
        window = f'catchup="{policy}", catchup_window="{history}s"'
        jobs = harness.job_module(folder, "bench_jobs", [("* * * * * *", 1, window)])
        harness.query(
            url,
            "INSERT INTO scheduler_jobs (name, cron, timezone, first_seen, last_seen, paused) "
            "VALUES (%s, '* * * * * *', 'UTC', now() - make_interval(secs => %s), now(), false)",
            (JOB, history + BEYOND_WINDOW_S),
        )
        nodes = [harness.start_node(folder, f"n{i}", url, jobs) for i in range(node_count)]
        with harness.running(nodes):
            for node in nodes:
                node.wait_for("node_started")
            started = min(node.time_of("node_started") for node in nodes)
            done = _wait_for_watermark(url, deadline=time.time() + 120)
            cpu = max(node.cpu_seconds() for node in nodes)
            time.sleep(0.5)
            peak = max(node.memory_mb()[1] for node in nodes)
            statements = harness.total_statements(nodes)["statements"]
        (rows, claimed) = harness.query(
            url,
            "SELECT count(*), count(*) FILTER (WHERE status <> 'skipped' AND status <> 'missed') "
            "FROM scheduler_runs WHERE origin = 'catchup'",
        )[0]
        return {
            "seconds": done - started,
            "peak_rss": peak,
            "cpu": cpu,
            "statements": statements / node_count,
            "rows": rows,
            "claimed": claimed,
        }


def _wait_for_watermark(url: str, deadline: float) -> float:
    """When a pass has written its plan: it moves the job's watermark last."""
    with psycopg.connect(url, autocommit=True) as connection:
        while time.time() < deadline:
            row = connection.execute(
                "SELECT caught_up_to IS NOT NULL FROM scheduler_jobs WHERE name = %s", (JOB,)
            ).fetchone()
            if row and row[0]:
                return time.time()
            time.sleep(0.01)
    raise RuntimeError("no catch-up pass finished in time")


def run_once(smoke: bool) -> Figures:
    history = SMOKE_HISTORY_S if smoke else HISTORY_S
    figures: Figures = {}
    for policy in ("all", "latest"):
        for node_count in (1, 3):
            one = _one(policy, node_count, history)
            figures |= {f"{key}_{policy}_{node_count}": value for key, value in one.items()}
    return figures


def _rows() -> list[Row]:
    rows = []
    for policy in ("all", "latest"):
        for nodes in (1, 3):
            where = f"`{policy}`, {nodes} node{'s' if nodes > 1 else ''}"
            rows += [
                Row(
                    f"seconds_{policy}_{nodes}",
                    f"find and claim, {where}",
                    "s",
                    "< 5 s",
                    lambda v: v < 5,
                ),
                Row(
                    f"peak_rss_{policy}_{nodes}",
                    f"peak RSS, {where}",
                    "MiB",
                    "< 200 MiB",
                    lambda v: v < 200,
                ),
                Row(f"cpu_{policy}_{nodes}", f"CPU of the busiest node until then, {where}", "s"),
                Row(f"statements_{policy}_{nodes}", f"statements per node, {where}", ""),
                Row(f"rows_{policy}_{nodes}", f"catch-up rows written, {where}", ""),
            ]
    return rows


SCENARIO = Scenario("d", "catch-up of 24 h of an every-second job", run_once, _rows())

if __name__ == "__main__":
    sys.exit(harness.main(SCENARIO))
