"""g: start-up of a node with 10,000 jobs (9,999 yearly, one every second).

Measured on the plain `scheduler run` (no statement counter): from exec to the
`node_started` event, and to the first `run_claimed` (the every-second job's first
period after start, so up to a second of waiting for it is included; the row "node
started → first claim" shows it).
"""

from __future__ import annotations

import sys

from bench import harness
from bench.harness import Figures, Row, Scenario

JOBS, SMOKE_JOBS = 10_000, 1_000


def run_once(smoke: bool) -> Figures:
    count = SMOKE_JOBS if smoke else JOBS
    harness.compile_tree(harness.REPOSITORY)  # the bytecode a user's install has
    with harness.workspace("g") as folder, harness.fresh_database() as url:
        jobs = harness.job_module(
            folder, "bench_jobs", [("@yearly", count - 1, ""), ("* * * * * *", 1, "")]
        )
        node = harness.start_node(folder, "n0", url, jobs, counted=False)
        with harness.running([node]):
            node.wait_for("run_claimed", timeout=60)
            started, claimed = node.time_of("node_started"), node.time_of("run_claimed")
            rss, _ = node.memory_mb()
        return {
            "node_started": started - node.exec_at,
            "first_claim": claimed - node.exec_at,
            "started_to_claim": claimed - started,
            "rss": rss,
        }


ROWS = [
    Row("node_started", "exec → node_started", "s", "< 3 s", lambda v: v < 3),
    Row("first_claim", "exec → first claim", "s", "< 3 s", lambda v: v < 3),
    Row("started_to_claim", "node_started → first claim", "s"),
    Row("rss", "RSS after start", "MiB"),
]
SCENARIO = Scenario("g", "start-up with 10,000 jobs", run_once, ROWS)

if __name__ == "__main__":
    sys.exit(harness.main(SCENARIO))
