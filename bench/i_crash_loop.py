"""i: a crash loop. One node (catch-up `all`, an every-second job whose body takes
0.2 s, the default lease) is SIGKILLed and started again under the same name every k
seconds for 40 s, for k in 1, 2, 3, 5 and 7; then one last node runs until it is
caught up and is stopped with SIGTERM. How many periods of the windows never ran, and
how many were given up?

The baseline, in the same run, is the same loop stopped with SIGTERM instead of
SIGKILL: a clean shutdown, which lost nothing before issue 13 either.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta

from bench import harness
from bench.harness import Figures, Row, Scenario

EVERY = (1, 2, 3, 5, 7)
WINDOW_S = 40
SETTLE_S = 40
BODY_S = 0.2


def run_once(smoke: bool) -> Figures:
    window = 10 if smoke else WINDOW_S
    figures: Figures = {"not_run": 0.0, "given_up": 0.0, "baseline_not_run": 0.0}
    for every in EVERY[:2] if smoke else EVERY:
        not_run, given_up = _loop(every, window, kill=True)
        figures["not_run"] += not_run
        figures["given_up"] += given_up
        figures[f"not_run_k{every}"] = not_run
        baseline, _ = _loop(every, window, kill=False)
        figures["baseline_not_run"] += baseline
    return figures


def _loop(every: int, window: int, *, kill: bool) -> tuple[float, float]:
    with harness.workspace("i") as folder, harness.fresh_database() as url:
        jobs = harness.job_module(folder, "bench_jobs", [("* * * * * *", 1, "")])
        env = {"BENCH_JOB_SLEEP": str(BODY_S)}
        began = datetime.now(UTC)
        nodes: list[harness.Node] = []
        while datetime.now(UTC) - began < timedelta(seconds=window):
            name = f"looper-{len(nodes)}"
            node = harness.start_node(
                folder, name, url, jobs, ["--node-name", "looper"], counted=False, env=env
            )
            nodes.append(node)
            time.sleep(every)
            if kill:
                node.kill()
            else:
                node.stop()
        ended = datetime.now(UTC)
        final = harness.start_node(
            folder, "final", url, jobs, ["--node-name", "looper"], counted=False, env=env
        )
        with harness.running([final]):
            final.wait_for("node_started")
            time.sleep(SETTLE_S)
        rows = harness.query(
            url,
            "SELECT status FROM scheduler_runs WHERE period >= %s AND period <= %s",
            (began + timedelta(seconds=2), ended),
        )
        expected = int((ended - began).total_seconds()) - 2
        given_up = sum(
            1
            for node in [*nodes, final]
            for event in node.events()
            if event.get("event") == "run_given_up"
        )
    not_run = max(0, expected - len(rows)) + sum(1 for (status,) in rows if status != "succeeded")
    return float(not_run), float(given_up)


ROWS = [
    Row(
        "not_run",
        f"periods never run, k in {EVERY}, {WINDOW_S} s each",
        "",
        "0",
        lambda v: v == 0,
        over_runs="max",
    ),
    Row("given_up", "periods given up", "", "0", lambda v: v == 0, over_runs="max"),
    Row("baseline_not_run", "baseline (SIGTERM loop): periods never run", "", over_runs="max"),
    *(Row(f"not_run_k{k}", f"  of them with k = {k} s", "", over_runs="max") for k in EVERY),
]
SCENARIO = Scenario("i", "a crash loop of one node, SIGKILL every k seconds", run_once, ROWS)

if __name__ == "__main__":
    sys.exit(harness.main(SCENARIO))
