"""Jitter delays the start by the amount derived from (job, period); the period stays nominal.

A period whose jittered claim time passed before the node was up (but within the
jitter window, which the node still claims at start) starts at once, as late as it
already is: only the periods due after `node_started` can be judged against their delay.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from scheduler.node.upcoming import jitter_delay
from scheduler.registry import load_jobs
from scheduler.states import RunStatus
from tests.acceptance.processes import jobmods, start_node, when
from tests.acceptance.records import run_rows

pytestmark = pytest.mark.slow


def test_a_jittered_job_starts_late_by_its_own_delay(tmp_path: Path, postgres_url: str) -> None:
    node = start_node(tmp_path, "spread", postgres_url, "jittered")
    started = datetime.fromtimestamp(
        when(node.wait_for(lambda event: event.get("event") == "node_started")), UTC
    )
    time.sleep(11)
    assert node.stop() == 0
    (job,) = load_jobs([jobmods("jittered")]).values()
    rows = [
        row for row in run_rows(postgres_url, "jittered") if row["status"] == RunStatus.SUCCEEDED
    ]
    on_time = [row for row in rows if row["period"] + jitter_delay(job, row["period"]) > started]
    assert len(on_time) >= 2
    for row in rows:
        assert row["period"].second % 4 == 0
        assert row["period"].microsecond == 0
        expected = jitter_delay(job, row["period"])
        late = row["started_at"] - row["period"]
        assert late >= expected - timedelta(milliseconds=50)
        if row in on_time:
            assert late <= expected + timedelta(milliseconds=1500)
        else:  # due before the node was up: claimed at its start
            assert row["started_at"] <= started + timedelta(milliseconds=1500)
    assert len({jitter_delay(job, row["period"]) for row in rows}) == len(rows)
