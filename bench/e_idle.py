"""e: idle cost of a node with 10,000 registered jobs that fire yearly.

A node with 10 such jobs runs beside it on a database of its own, so that statements
per minute can be compared: they must not grow with the number of jobs. CPU from
/proc/PID/stat over 60 s after start-up has settled; RSS from /proc/PID/status.
"""

from __future__ import annotations

import sys
import time

from bench import harness
from bench.harness import Figures, Row, Scenario

DURATION_S, SMOKE_DURATION_S = 60, 5
SETTLE_S = 3
SIZES = (10_000, 10)


def run_once(smoke: bool) -> Figures:
    duration = SMOKE_DURATION_S if smoke else DURATION_S
    with (
        harness.workspace("e") as folder,
        harness.fresh_database() as big_url,
        harness.fresh_database() as small_url,
    ):
        nodes = []
        for size, url in zip(SIZES, (big_url, small_url), strict=True):
            jobs = harness.job_module(folder, f"yearly_{size}", [("@yearly", size, "")])
            nodes.append(harness.start_node(folder, f"jobs{size}", url, jobs))
        with harness.running(nodes):
            for node in nodes:
                node.wait_for("node_started")
            time.sleep(SETTLE_S)
            cpu = [node.cpu_seconds() for node in nodes]
            statements = [node.statements()["statements"] for node in nodes]
            time.sleep(duration)
            figures: Figures = {}
            for index, (size, node) in enumerate(zip(SIZES, nodes, strict=True)):
                rss, _ = node.memory_mb()
                figures |= {
                    f"cpu_{size}": (node.cpu_seconds() - cpu[index]) / duration * 100,
                    f"rss_{size}": rss,
                    f"per_minute_{size}": (node.statements()["statements"] - statements[index])
                    * 60
                    / duration,
                }
            harness.log(f"[e] statements by kind, 10,000 jobs: {nodes[0].statements()['kinds']}")
    return figures


ROWS = [
    Row("cpu_10000", "CPU, 10,000 jobs", "% core", "< 1 %", lambda v: v < 1),
    Row("rss_10000", "RSS, 10,000 jobs", "MiB", "< 150 MiB", lambda v: v < 150),
    Row("per_minute_10000", "statements per minute, 10,000 jobs", ""),
    Row("cpu_10", "CPU, 10 jobs", "% core"),
    Row("rss_10", "RSS, 10 jobs", "MiB"),
    Row("per_minute_10", "statements per minute, 10 jobs", ""),
]
SCENARIO = Scenario("e", "idle node with 10,000 yearly jobs", run_once, ROWS)

if __name__ == "__main__":
    sys.exit(harness.main(SCENARIO))
