"""Real replicas on one database: each period runs exactly once, none goes missing."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from scheduler.states import RunStatus
from tests.acceptance.processes import start_node
from tests.acceptance.records import executions, missing_seconds, run_rows

pytestmark = pytest.mark.slow


def _run_replicas(tmp_path: Path, database_url: str, count: int, seconds: float) -> None:
    execution_log = tmp_path / "executions.txt"
    nodes = [
        start_node(tmp_path, f"node{n}", database_url, "ticker", EXECUTION_LOG=str(execution_log))
        for n in range(count)
    ]
    try:
        for node in nodes:
            node.wait_for(lambda event: event.get("event") == "node_started")
        time.sleep(seconds)
    finally:
        codes = [node.stop() for node in nodes]
    assert codes == [0] * count, [node.log_path.read_text()[-2000:] for node in nodes]

    rows = run_rows(database_url, "tick")
    periods: list[datetime] = [row["period"] for row in rows]
    ran = executions(execution_log)
    assert len(rows) >= seconds - 2
    assert [p for p, times in ran.items() if times > 1] == [], "a period ran twice"
    assert missing_seconds(periods) == [], "a period between the first and last is missing"
    assert {row["status"] for row in rows} == {RunStatus.SUCCEEDED}
    assert sorted(ran) == sorted(p.isoformat() for p in periods)
    for node in nodes:
        text = node.log_path.read_text()
        assert "database is locked" not in text
        assert "Traceback" not in text


def test_three_replicas_on_postgres(tmp_path: Path, postgres_url: str) -> None:
    _run_replicas(tmp_path, postgres_url, count=3, seconds=22)


def test_two_processes_on_one_sqlite_file(tmp_path: Path, sqlite_url: str) -> None:
    _run_replicas(tmp_path, sqlite_url, count=2, seconds=15)
