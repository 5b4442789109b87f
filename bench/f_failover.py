"""f: failover. Three nodes; SIGKILL the one running a 60 s job; time until another node
logs `run_retaken`.

The job's lease is 10 s (so the heartbeat renews it every 3.3 s); --recovery-interval is
the default 1 s. The figure is measured from the SIGKILL to the retaking node's
`run_retaken` event (same host clock); "after expiry" is from the lease expiry in the
runs table (database clock) to that event.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime

from bench import harness
from bench.harness import Figures, Row, Scenario

LEASE_S = 10
NODES = 3


def run_once(smoke: bool) -> Figures:
    del smoke  # one failover takes about a lease either way
    with harness.workspace("f") as folder, harness.fresh_database() as url:
        jobs = harness.job_module(folder, "bench_jobs", [("* * * * * *", 1, f'lease="{LEASE_S}s"')])
        env = {"BENCH_JOB_SLEEP": "60"}
        nodes = [harness.start_node(folder, f"n{i}", url, jobs, env=env) for i in range(NODES)]
        with harness.running(nodes):
            holder, started = _first_start(nodes)
            time.sleep(LEASE_S / 2)  # let a heartbeat or two renew the lease
            killed_at = time.time()
            holder.kill()
            (expires,) = harness.query(
                url,
                "SELECT lease_expires_at FROM scheduler_runs WHERE id = %s",
                (started["run_id"],),
            )[0]
            others = [node for node in nodes if node is not holder]
            deadline = time.monotonic() + LEASE_S + 10
            retaken: float | None = None
            while retaken is None and time.monotonic() < deadline:
                times = [
                    node.event_time("run_retaken", run_id=started["run_id"]) for node in others
                ]
                retaken = min((t for t in times if t is not None), default=None)
                time.sleep(0.02)
            if retaken is None:
                raise RuntimeError("no node retook the run")
        return {
            "retaken_s": retaken - killed_at,
            "after_expiry_s": retaken - _timestamp(expires),
            "lease_left_s": _timestamp(expires) - killed_at,
        }


def _timestamp(moment: datetime) -> float:
    return moment.timestamp()


def _first_start(nodes: list[harness.Node]) -> tuple[harness.Node, dict[str, object]]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for node in nodes:
            event = node.find("run_started")
            if event is not None:
                return node, event
        time.sleep(0.02)
    raise RuntimeError("no node started the job")


ROWS = [
    Row(
        "retaken_s",
        f"SIGKILL → run_retaken (lease {LEASE_S} s)",
        "s",
        f"≤ {LEASE_S + 1} s",
        lambda v: v <= LEASE_S + 1,
    ),
    Row("lease_left_s", "lease left at the kill", "s"),
    Row("after_expiry_s", "lease expiry → run_retaken", "s"),
]
SCENARIO = Scenario("f", "failover of a 60 s job", run_once, ROWS)

if __name__ == "__main__":
    sys.exit(harness.main(SCENARIO))
