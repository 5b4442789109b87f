"""docs/reference/metrics.md lists every metric a node serves on /metrics, and none it
does not: read from the constructors in scheduler/metrics.py, with the suffix the
Prometheus client adds to each kind."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
PAGE = (ROOT / "docs" / "reference" / "metrics.md").read_text()
# What the client appends to the name a constructor is given.
SUFFIX = {
    "Counter": "_total",
    "LabelledCounter": "_total",
    "Info": "_info",
    "Gauge": "",
    "JobHistogram": "",
    "GaugeMetricFamily": "",
    "_per_job": "",
}


def _served() -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse((ROOT / "scheduler" / "metrics.py").read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
            continue
        first = node.args[0]
        if (
            node.func.id in SUFFIX
            and isinstance(first, ast.Constant)
            and isinstance(first.value, str)
            and first.value.startswith("scheduler_")
        ):
            names.add(first.value + SUFFIX[node.func.id])
    return names


def _documented() -> set[str]:
    table = PAGE[PAGE.index("| metric | type |") :]
    return set(re.findall(r"^\| `(scheduler_\w+)` \|", table, re.M))


def test_every_metric_is_documented() -> None:
    served = _served()
    assert len(served) >= 18
    assert _documented() == served
