"""h: a holder killed mid-run. Three nodes run an every-second job whose body takes
0.5 s, with the default 30 s lease; the node inside the job is SIGKILLed. How soon is
the killed period taken over, and how many of the next 36 periods do not run on time
(skipped, or started more than a second after their period)?

Each run measures both ways a node's death is learnt, one after the other on fresh
databases: the default on a direct PostgreSQL connection (`--liveness session`, the
node's session lock vanishes with it) and the lease alone (`--liveness lease`, as
behind a pooler): the baseline, which is what every node did before issue 13.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timedelta

from bench import harness
from bench.harness import Figures, Row, Scenario

NODES = 3
AFTER = 36  # periods looked at after the killed one
BODY_S = 0.5


def run_once(smoke: bool) -> Figures:
    figures: Figures = {}
    for mode in ("session", "lease"):
        retaken, late = _one(mode, after=8 if smoke else AFTER)
        figures[f"{mode}_retaken_s"] = retaken
        figures[f"{mode}_late"] = late
    figures["retaken_ratio"] = figures["session_retaken_s"] / figures["lease_retaken_s"]
    return figures


def _one(mode: str, *, after: int) -> tuple[float, float]:
    with harness.workspace("h") as folder, harness.fresh_database() as url:
        jobs = harness.job_module(folder, "bench_jobs", [("* * * * * *", 1, "")])
        env = {"BENCH_JOB_SLEEP": str(BODY_S)}
        nodes = [
            harness.start_node(folder, f"n{i}", url, jobs, ["--liveness", mode], env=env)
            for i in range(NODES)
        ]
        with harness.running(nodes):
            for node in nodes:
                node.wait_for("node_started")
            time.sleep(3)
            victim, started = _next_start(nodes, time.time())
            victim.kill()
            killed_at = time.time()
            others = [node for node in nodes if node is not victim]
            retaken_at = _retaken(others, str(started["run_id"]), killed_at + 60)
            period = datetime.fromisoformat(str(started["period"]))
            harness.sleep_until(period.timestamp() + after + 3)
            rows = harness.query(
                url,
                "SELECT period, status, started_at FROM scheduler_runs "
                "WHERE period > %s AND period <= %s",
                (period, period + timedelta(seconds=after)),
            )
    late = sum(
        1
        for moment, status, started_at in rows
        if status != "succeeded" or _late(started_at, moment)
    )
    missing = after - len(rows)
    return retaken_at - killed_at, float(late + missing)


def _late(started_at: datetime | None, period: datetime) -> bool:
    return started_at is None or (started_at - period).total_seconds() > 1


def _next_start(nodes: list[harness.Node], after: float) -> tuple[harness.Node, dict[str, object]]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for node in nodes:
            for event in node.events():
                if (
                    event.get("event") == "run_started"
                    and harness.parse_time(str(event["timestamp"])) > after
                ):
                    return node, event
        time.sleep(0.01)
    raise RuntimeError("no node started the job")


def _retaken(nodes: list[harness.Node], run_id: str, deadline: float) -> float:
    while time.time() < deadline:
        times = [node.event_time("run_retaken", run_id=run_id) for node in nodes]
        found = [moment for moment in times if moment is not None]
        if found:
            return min(found)
        time.sleep(0.02)
    raise RuntimeError("no node retook the killed run")


ROWS = [
    Row(
        "session_retaken_s",
        "SIGKILL → run_retaken (session liveness)",
        "s",
        "≤ 2 s",
        lambda v: v <= 2,
    ),
    Row(
        "session_late",
        f"of the next {AFTER} periods, not run on time",
        "",
        "≤ 2",
        lambda v: v <= 2,
    ),
    Row("lease_retaken_s", "baseline: SIGKILL → run_retaken (lease, 30 s)", "s"),
    Row("lease_late", f"baseline: of the next {AFTER}, not run on time", ""),
    Row("retaken_ratio", "retaken, session / lease", ""),
]
SCENARIO = Scenario("h", "a holder killed mid-run, 3 nodes, default lease", run_once, ROWS)

if __name__ == "__main__":
    sys.exit(harness.main(SCENARIO))
