"""The benchmark harness still works: one scenario's --smoke mode, end to end.

Benchmarks are not tests (their figures depend on the machine); this only proves that
bench/ starts real nodes, reads their logs and /proc, and prints and writes its figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.acceptance.processes import REPOSITORY, environment
from tests.databases import POSTGRES_ADMIN_URL

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def test_the_startup_benchmark_runs_in_smoke_mode(tmp_path: Path) -> None:
    figures = tmp_path / "g.json"
    result = subprocess.run(
        [sys.executable, "-m", "bench.g_startup", "--smoke", "--json", str(figures)],
        cwd=REPOSITORY,
        env=environment(SCHEDULER_BENCH_POSTGRES_URL=POSTGRES_ADMIN_URL),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr[-2000:]
    assert "exec → node_started" in result.stdout
    table = {entry["key"]: entry for entry in json.loads(figures.read_text())["table"]}
    assert 0 < table["node_started"]["value"] < table["first_claim"]["value"] < 60
    assert table["rss"]["value"] > 10
