"""m: what a busy fleet costs the database: 3 replicas, one every-second job.

Three nodes per tree on a database of their own, each tree measured for `--seconds`
once the nodes have settled: transactions per second as the server logged them (as in
bench k: `log_statement = 'all'` on each bench database, a transaction is a COMMIT or
ROLLBACK, or a statement outside BEGIN; every session of every node counts), and the
start lag of the periods in the window (started_at - period, both by the database
clock), p50 and p99. The tree given by `--baseline` runs side by side, the same moment
on the same machine, so each figure is also a ratio.

    .venv/bin/python -m bench.m_busy_database [--baseline ../bench-snap] [--seconds 60] [--runs 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path

from bench import harness, server_log

NODES = 3
# `--breakdown`: also say which statements begin the transactions (on stderr).
BREAKDOWN = "--breakdown" in sys.argv


def measure(baseline: Path | None, seconds: float) -> dict[str, float]:
    trees = {"this": harness.REPOSITORY} | ({"baseline": baseline} if baseline else {})
    figures: dict[str, float] = {}
    with harness.workspace("m") as folder, ExitStack() as stack:
        module = harness.job_module(folder, "every_second", [("* * * * * *", 1, "")])
        clusters: dict[str, tuple[str, list[harness.Node]]] = {}
        for label, tree in trees.items():
            url = stack.enter_context(harness.fresh_database(empty=label != "this"))
            if label != "this":
                harness.migrate_with(tree, url)
            server_log.log_statements(url)
            nodes = [
                harness.start_node(folder, f"{label}-{i}", url, module, counted=False, tree=tree)
                for i in range(NODES)
            ]
            for node in nodes:
                stack.callback(node.stop)
            clusters[label] = (url, nodes)
        for _, nodes in clusters.values():
            for node in nodes:
                node.wait_for("node_started", timeout=120)
        time.sleep(server_log.SETTLE_S)
        since, began = server_log.clock(), datetime.now().astimezone()
        time.sleep(seconds)
        until, ended = server_log.clock(), datetime.now().astimezone()
        for label, (url, _) in clusters.items():
            figures[f"{label} tx/s"] = server_log.transactions(url, since, until) / seconds
            if BREAKDOWN:
                kinds = server_log.transactions_by_kind(url, since, until)
                for kind, count in sorted(kinds.items(), key=lambda item: -item[1]):
                    print(f"  {label} {count / seconds:6.2f}/s  {kind}", file=sys.stderr)
            rows = harness.query(
                url,
                "SELECT period, started_at FROM scheduler_runs "
                "WHERE period BETWEEN %s AND %s AND started_at IS NOT NULL",
                (began, ended),
            )
            lags = [(started - period).total_seconds() * 1000 for period, started in rows]
            figures[f"{label} lag p50 ms"] = harness.percentile(lags, 50)
            figures[f"{label} lag p99 ms"] = harness.percentile(lags, 99)
            figures[f"{label} runs"] = len(rows)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--breakdown", action="store_true")
    options = parser.parse_args()
    results = [measure(options.baseline, options.seconds) for _ in range(options.runs)]
    print(f"{NODES} nodes, one every-second job, {options.seconds:g} s, median of {options.runs}")
    server_log.print_medians(results, 22, 2)
    if options.baseline:
        print("ratios, this / baseline (medians)")
        for unit in ("tx/s", "lag p50 ms", "lag p99 ms"):
            print(
                f"  {unit:<12} {server_log.ratio(results, f'this {unit}', f'baseline {unit}'):6.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
