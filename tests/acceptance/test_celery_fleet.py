"""The acceptance test of issue 17: two scheduler nodes, three Celery workers, an
every-second job for a minute, while one worker is SIGKILLed and the broker (a Redis of
the test's own) is killed and started again: no period runs twice, none goes missing,
every outcome is recorded."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis

from scheduler.states import RunStatus
from tests.acceptance.celery_workers import ThrowawayRedis, free_port, start_worker, unique_queue
from tests.acceptance.processes import start_node
from tests.acceptance.records import attempt_rows, executions, missing_seconds, run_rows

pytestmark = pytest.mark.slow

SECONDS = 60
KILL_AT = 15
BROKER_DOWN_AT = 35
BROKER_DOWN_FOR = 3
# Longest time after the nodes stop for the runs already sent to end: the wait ends
# sooner, as soon as the broker holds no message (none waiting, none delivered and not
# yet acknowledged). The task acknowledges late (after its outcome is written), and the
# stopped nodes send nothing more, so no period can run after that.
SETTLE_S = 12


def test_two_nodes_three_workers_a_worker_killed_and_the_broker_restarted(
    tmp_path: Path, postgres_url: str
) -> None:
    broker = ThrowawayRedis(free_port())
    broker.start()
    evidence = tmp_path / "executions.txt"
    env = {
        "SCHEDULER_DATABASE_URL": postgres_url,
        "CELERY_TEST_BROKER": broker.url,
        "CELERY_TEST_QUEUE": unique_queue(),
        "CELERY_TEST_LEASE": "3s",
        "CELERY_TEST_DEADLINE": "5s",
        # Long enough that a run is under way on the worker when it is killed.
        "CELERY_TEST_SLEEP": "1.5",
        "EXECUTION_LOG": str(evidence),
    }
    queue = env["CELERY_TEST_QUEUE"]
    # The three start side by side (each waits until it is ready), not one after another.
    with ThreadPoolExecutor(max_workers=3) as starting:
        workers = list(
            starting.map(lambda n: start_worker(tmp_path, f"w{n}", queue=queue, env=env), (1, 2, 3))
        )
    nodes = [start_node(tmp_path, f"node{n}", postgres_url, "on_celery", **env) for n in (1, 2)]
    try:
        for node in nodes:
            node.wait_for(lambda event: event.get("event") == "node_started")
        began = time.monotonic()
        _sleep_until(began + KILL_AT)
        holder = _wait_running(postgres_url)
        (victim,) = [w for w in workers if holder.startswith(f"{w.name}@")]
        victim.kill()
        _sleep_until(began + BROKER_DOWN_AT)
        broker.kill()
        outage = (time.time(), time.time() + BROKER_DOWN_FOR)
        time.sleep(BROKER_DOWN_FOR)
        broker.start()
        _sleep_until(began + SECONDS)
        stopped_at = time.time()
    finally:
        codes = [node.stop() for node in nodes]
        _wait_drained(broker.url, queue, SETTLE_S)
        for worker in workers:
            worker.stop()
        for worker in workers:
            worker.kill()
        broker.kill()
    assert codes == [0, 0], [node.log_path.read_text()[-3000:] for node in nodes]

    rows = run_rows(postgres_url, "remote_tick")
    ran = executions(evidence)
    assert len(rows) >= SECONDS - 3
    assert [period for period, times in ran.items() if times > 1] == [], "a period ran twice"
    assert missing_seconds([row["period"] for row in rows]) == [], "a period has no row"
    # Every period up to a few seconds before the nodes stopped has its outcome: the ones
    # of the outage too (sent again after their deadline), not only those outside it.
    settled = [row for row in rows if row["period"].timestamp() < stopped_at - 8]
    unsettled = [(row["period"], row["status"]) for row in settled if row["status"] != "succeeded"]
    assert unsettled == [], f"outage {outage}"
    assert {row["status"] for row in settled} == {RunStatus.SUCCEEDED}
    assert all(ran[row["period"].isoformat()] == 1 for row in settled)
    # Each fault is recorded: the killed worker's runs and the messages the broker lost
    # were retaken as later attempts, their earlier attempts kept with why they ended.
    kept = attempt_rows(postgres_url, job="remote_tick")
    reasons = {row["reason"] for row in kept}
    assert "lease_expired" in reasons, kept
    assert reasons <= {"lease_expired", "queue_expired"}
    assert all(
        row["node"].startswith(f"{victim.name}@")
        for row in kept
        if row["reason"] == "lease_expired"
    )
    assert max(row["attempt"] for row in rows) >= 2
    events = [event for node in nodes for event in node.events()]
    assert any(event.get("event") == "run_retaken" for event in events)
    for node in nodes:
        assert "Traceback" not in node.log_path.read_text()


def _wait_running(url: str, timeout: float = 20) -> str:
    """The holder of a run under way on a worker, as soon as there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for row in run_rows(url, "remote_tick"):
            if row["status"] == "running":
                return str(row["holder"])
        time.sleep(0.05)
    raise AssertionError(f"no run under way on a worker in {timeout}s")


def _sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))


def _wait_drained(url: str, queue: str, timeout: float) -> None:
    """Until the broker holds no message of the queue: none waiting (in any of its
    priority lists) and none delivered to a worker and not yet acknowledged; at most
    `timeout` seconds (the assertions then judge what ran)."""
    client = redis.Redis.from_url(url, socket_timeout=2)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                waiting = sum(
                    client.llen(key)
                    for key in client.scan_iter(match=f"{queue}*")
                    if client.type(key) == b"list"
                )
                if waiting == 0 and client.hlen("unacked") == 0:
                    return
            except redis.RedisError:
                pass
            time.sleep(0.1)
    finally:
        client.close()
