"""Jitter delays the start by the amount derived from (job, period); the period stays nominal."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from scheduler.node.upcoming import jitter_delay
from scheduler.registry import load_jobs
from scheduler.states import RunStatus
from tests.acceptance.processes import jobmods, start_node
from tests.acceptance.records import run_rows

pytestmark = pytest.mark.slow


def test_a_jittered_job_starts_late_by_its_own_delay(tmp_path: Path, postgres_url: str) -> None:
    node = start_node(tmp_path, "spread", postgres_url, "jittered")
    node.wait_for(lambda event: event.get("event") == "node_started")
    time.sleep(11)
    assert node.stop() == 0
    (job,) = load_jobs([jobmods("jittered")]).values()
    rows = [
        row for row in run_rows(postgres_url, "jittered") if row["status"] == RunStatus.SUCCEEDED
    ]
    assert len(rows) >= 2
    for row in rows:
        assert row["period"].second % 4 == 0
        assert row["period"].microsecond == 0
        expected = jitter_delay(job, row["period"])
        late = row["started_at"] - row["period"]
        assert (
            expected - timedelta(milliseconds=50) <= late <= expected + timedelta(milliseconds=1500)
        )
    assert len({jitter_delay(job, row["period"]) for row in rows}) == len(rows)
