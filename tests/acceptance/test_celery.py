"""Runs on Celery workers, with real brokers, workers, nodes and PostgreSQL: each period
is sent once, run once on a worker, and recorded with its time in the queue."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from scheduler.states import RunStatus
from tests.acceptance.celery_workers import (
    RABBITMQ_URL,
    REDIS_URL,
    start_worker,
    unique_queue,
)
from tests.acceptance.processes import start_node
from tests.acceptance.records import executions, missing_seconds, run_rows

pytestmark = pytest.mark.slow


def _broker(kind: str) -> str:
    return f"{REDIS_URL}/14" if kind == "redis" else RABBITMQ_URL


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_each_period_is_sent_once_and_run_once_on_a_worker(
    tmp_path: Path, postgres_url: str, broker: str
) -> None:
    evidence = tmp_path / "executions.txt"
    env = {
        "SCHEDULER_DATABASE_URL": postgres_url,
        "CELERY_TEST_BROKER": _broker(broker),
        "CELERY_TEST_QUEUE": unique_queue(),
        "EXECUTION_LOG": str(evidence),
    }
    worker = start_worker(tmp_path, "w1", queue=env["CELERY_TEST_QUEUE"], **env)
    node = start_node(tmp_path, "node1", postgres_url, "on_celery", **env)
    try:
        node.wait_for(lambda event: event.get("event") == "node_started")
        time.sleep(6)
    finally:
        assert node.stop() == 0, node.log_path.read_text()[-3000:]
        time.sleep(1)
        worker.stop()
    rows = [row for row in run_rows(postgres_url, "remote_tick") if row["status"] != "queued"]
    ran = executions(evidence)
    assert len(rows) >= 4
    assert {row["status"] for row in rows} == {RunStatus.SUCCEEDED}, rows
    assert missing_seconds([row["period"] for row in rows]) == []
    assert [period for period, times in ran.items() if times > 1] == []
    assert sorted(ran) == sorted(row["period"].isoformat() for row in rows)
    for row in rows:
        assert row["holder"].startswith("w1@"), row["holder"]
        assert row["queue"] == env["CELERY_TEST_QUEUE"]
        assert row["queued_at"] <= row["started_at"] <= row["finished_at"]
    sent = [e for e in node.events() if e.get("event") == "run_queued"]
    assert len(sent) >= len(rows)
    started = [e for e in worker.events() if e.get("event") == "run_started"]
    assert {e["run_id"] for e in started} >= {row["id"] for row in rows}
