"""k: what an idle node costs the database, counted by the server itself.

One node per database (10, 1,000 and 10,000 yearly jobs, so none fires), measured for
`--seconds` after start-up has settled: transactions per second as the server logged
them (`log_statement = 'all'` set on each bench database; every session on it: the
node's pool, its liveness session, its watch; a transaction is a COMMIT or ROLLBACK,
or a statement outside BEGIN), CPU as % of one core and RSS from /proc. The server's
own `pg_stat_database` counts are not used: an idle backend reports them late, so a
pooled connection used at start-up dumps its start-up transactions into the window
whenever it is next used. The log is read from PGLOG (default: Debian's
/var/log/postgresql/postgresql-15-main.log).

Each size runs twice side by side, the same moment on the same machine: once with this
tree and once with the tree given by `--baseline` (for example a checkout of the
previous release), so a figure can be read as a ratio to the baseline and a noisy
neighbour moves both.

`--python` runs the nodes with another interpreter, for example a virtualenv with only
`pip install .` in it: the RSS users see (the development environment's extra packages,
such as rich, which structlog imports when it is there, add about 5 MiB).

    .venv/bin/python -m bench.k_idle_database [--baseline ../bench-snap] [--seconds 60] \
        [--runs 3] [--python /tmp/prodenv/bin/python]
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from bench import harness, server_log

SIZES = (10, 1_000, 10_000)


def measure(baseline: Path | None, seconds: float, python: str | None) -> dict[str, float]:
    trees = {"this": harness.REPOSITORY} | ({"baseline": baseline} if baseline else {})
    figures: dict[str, float] = {}
    with harness.workspace("k") as folder, ExitStack() as stack:
        started: list[tuple[str, int, str, harness.Node]] = []
        for size in SIZES:
            module = harness.job_module(folder, f"yearly_{size}", [("@yearly", size, "")])
            for label, tree in trees.items():
                url = stack.enter_context(harness.fresh_database(empty=label != "this"))
                if label != "this":
                    harness.migrate_with(tree, url)
                server_log.log_statements(url)
                node = harness.start_node(
                    folder, f"{label}-{size}", url, module, counted=False, tree=tree, python=python
                )
                stack.callback(node.stop)
                started.append((label, size, url, node))
        for *_, node in started:
            node.wait_for("node_started", timeout=120)
        time.sleep(server_log.SETTLE_S)
        since = server_log.clock()
        before = [node.cpu_seconds() for *_, node in started]
        time.sleep(seconds)
        until = server_log.clock()
        for (label, size, url, node), cpu in zip(started, before, strict=True):
            figures[f"{label} {size} tx/s"] = server_log.transactions(url, since, until) / seconds
            figures[f"{label} {size} cpu %"] = (node.cpu_seconds() - cpu) / seconds * 100
            figures[f"{label} {size} rss MiB"] = node.memory_mb()[0]
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--python", default=None)
    options = parser.parse_args()
    results = [
        measure(options.baseline, options.seconds, options.python) for _ in range(options.runs)
    ]
    print(f"idle node, {options.seconds:g} s after start-up, median of {options.runs}")
    server_log.print_medians(results, 28, 3)
    if options.baseline:
        print("ratios, this / baseline (medians)")
        for size in SIZES:
            for unit in ("tx/s", "cpu %", "rss MiB"):
                ratio = server_log.ratio(results, f"this {size} {unit}", f"baseline {size} {unit}")
                print(f"  {size:>6} jobs {unit:<8} {ratio:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
