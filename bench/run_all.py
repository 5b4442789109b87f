"""Run every scenario (a to g) and write the figures into BENCHMARKS.md.

    .venv/bin/python -m bench.run_all            # 3 runs each, about 12 minutes
    .venv/bin/python -m bench.run_all --smoke    # 1 small run each, under 2 minutes

Only the part of BENCHMARKS.md between the `figures` markers is rewritten; the notes
around it are kept.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import (
    a_every_second,
    b_burst,
    c_sustained,
    d_catchup,
    e_idle,
    f_failover,
    g_startup,
    h_holder_killed,
    harness,
)

SCENARIOS = [
    module.SCENARIO
    for module in (
        a_every_second,
        b_burst,
        c_sustained,
        d_catchup,
        e_idle,
        f_failover,
        g_startup,
        h_holder_killed,
    )
]
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"
TOGETHER = ("a", "e")


def machine() -> str:
    memory_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "?",
    )
    return (
        f"{os.cpu_count()} cores ({model}), {memory_kb / 1024 / 1024:.0f} GiB memory, "
        f"PostgreSQL {harness.server_version()} on 127.0.0.1, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )


def render(command: str, results: Sequence[tuple[Any, list[dict[str, Any]]]], took: float) -> str:
    lines = [
        BEGIN,
        "",
        f"- **Command:** `{command}` ({took / 60:.1f} minutes)",
        f"- **Machine:** {machine()}",
        f"- **Date:** {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "- **Figures:** the median of the runs listed; duplicates and missed periods are "
        "the worst run. Scenario a (its 1-node and 3-node clusters) and scenario e ran side "
        "by side, the others one at a time.",
        "",
        "| # | figure | result | runs | target | |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for scenario, table in results:
        for entry in table:
            runs = ", ".join(f"{value:.4g}" for value in entry["runs"])
            mark = {True: "met", False: "**missed**", None: ""}[entry["met"]]
            lines.append(
                f"| {scenario.key} | {entry['label']} | "
                f"{harness.format_value(entry['value'], entry['unit'])} | {runs} | "
                f"{entry['target']} | {mark} |"
            )
    lines += ["", END]
    return "\n".join(lines)


def write(path: Path, section: str) -> None:
    text = path.read_text() if path.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text:
        text += f"\n{BEGIN}\n{END}\n"
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.DOTALL)
    path.write_text(pattern.sub(lambda _: section, text, count=1))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run benchmarks a-g, write BENCHMARKS.md")
    parser.add_argument("--smoke", action="store_true", help="one small run of each")
    parser.add_argument("--runs", type=int, default=None, help="runs of each (default 3)")
    parser.add_argument("--only", default="", help="comma-separated scenarios, e.g. a,f")
    parser.add_argument("--output", type=Path, default=harness.REPOSITORY / "BENCHMARKS.md")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    options = parser.parse_args(argv)
    harness.stop_on_sigterm()
    runs = options.runs or (1 if options.smoke else 3)
    chosen = [s for s in SCENARIOS if not options.only or s.key in options.only.split(",")]
    began = time.monotonic()
    measured: dict[str, tuple[list[dict[str, Any]], list[harness.Figures]]] = {}
    try:
        # a and e are light (one job a second; idle nodes), so they share the machine and
        # the 15 minutes; every figure they report is per process or from the runs table.
        side_by_side = [s for s in chosen if s.key in TOGETHER]
        with ThreadPoolExecutor(max_workers=len(TOGETHER)) as pool:
            futures = {
                s.key: pool.submit(s.measure, runs, smoke=options.smoke) for s in side_by_side
            }
            measured |= {key: future.result() for key, future in futures.items()}
        for scenario in chosen:
            if scenario.key not in measured:
                measured[scenario.key] = scenario.measure(runs, smoke=options.smoke)
    finally:
        harness.drop_template()
    results = [(scenario, measured[scenario.key][0]) for scenario in chosen]
    raw = {key: {"table": table, "runs": figures} for key, (table, figures) in measured.items()}
    for scenario, table in results:
        harness.print_table(f"{scenario.key}: {scenario.title}", table)
    took = time.monotonic() - began
    command = " ".join([".venv/bin/python -m bench.run_all", *(argv or sys.argv[1:])])
    section = render(command, results, took)
    if options.json:
        options.json.write_text(json.dumps(raw, indent=2))
    if not options.no_write and not options.smoke:
        write(options.output, section)
        harness.log(f"wrote {options.output}")
    else:
        print(section)
    harness.log(f"took {took / 60:.1f} minutes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
