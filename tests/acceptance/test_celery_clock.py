"""A node whose host clock is behind the worker's sends Celery messages that run: the
nodes promise that host clocks play no part, so a message carries no absolute expiry
for a worker to compare with its own clock. The node runs under libfaketime, its wall
clock 120 s behind; the worker, the broker and PostgreSQL keep the real time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from scheduler.states import RunStatus
from tests.acceptance.celery_workers import RABBITMQ_URL, REDIS_URL, celery_env, start_worker
from tests.acceptance.processes import start_node
from tests.acceptance.records import attempt_rows, executions, run_rows

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
LIBFAKETIME = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))), None)
BEHIND_S = 120
RUNS = 4


def _behind() -> dict[str, str]:
    if LIBFAKETIME is None:
        pytest.fail("libfaketime is missing: run scripts/ensure-faketime")
    return {
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME": f"-{BEHIND_S}",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_a_node_whose_clock_is_behind_sends_messages_a_worker_runs(
    tmp_path: Path, postgres_url: str, broker: str
) -> None:
    url = f"{REDIS_URL}/13" if broker == "redis" else RABBITMQ_URL
    evidence = tmp_path / "executions.txt"
    env = celery_env(tmp_path, postgres_url, url)
    queue = env["CELERY_TEST_QUEUE"]
    # A worker name of its own: RabbitMQ holds one control queue per name, and other
    # tests may run workers on the same broker at the same time.
    worker = start_worker(tmp_path, f"w-{queue[-10:]}", queue=queue, env=env)
    node = start_node(tmp_path, "behind", postgres_url, "on_celery", **env, **_behind())
    try:
        node.wait_for(lambda event: event.get("event") == "node_started")
        # Every second a period, each message's deadline 5 s: within 20 s, the worker
        # has run several, and a message discarded on arrival would have run none.
        deadline = time.monotonic() + 20
        while sum(executions(evidence).values()) < RUNS and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        assert node.stop() == 0, node.log_path.read_text()[-3000:]
        time.sleep(1)
        worker.stop()
    skew = [event for event in node.events() if event.get("event") == "clock_skew"]
    assert skew, "the node's clock was not behind: libfaketime did not take"
    assert "revoked" not in worker.text(), worker.text()[-3000:]
    ran = executions(evidence)
    assert sum(ran.values()) >= RUNS, f"the worker ran {dict(ran)}; log:\n{worker.text()[-3000:]}"
    assert [period for period, times in ran.items() if times > 1] == []
    assert attempt_rows(postgres_url, job="remote_tick") == [], "a message was lost in the queue"
    succeeded = [
        row for row in run_rows(postgres_url, "remote_tick") if row["status"] == RunStatus.SUCCEEDED
    ]
    assert len(succeeded) >= RUNS
