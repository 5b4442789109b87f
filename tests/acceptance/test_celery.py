"""Runs on Celery workers, with real brokers, workers, nodes and PostgreSQL: each period
is sent once, run once on a worker, and recorded with its time in the queue."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler.states import RunStatus
from tests.acceptance.celery_workers import (
    RABBITMQ_URL,
    REDIS_URL,
    Worker,
    celery_env,
    start_worker,
    unique_queue,
)
from tests.acceptance.processes import REPOSITORY, SCHEDULER, environment, jobmods, start_node
from tests.acceptance.records import attempt_rows, executions, missing_seconds, run_rows
from tests.acceptance.tcp_proxy import Proxy

pytestmark = pytest.mark.slow


def _broker(kind: str) -> str:
    return f"{REDIS_URL}/14" if kind == "redis" else RABBITMQ_URL


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_each_period_is_sent_once_and_run_once_on_a_worker(
    tmp_path: Path, postgres_url: str, broker: str
) -> None:
    evidence = tmp_path / "executions.txt"
    env = celery_env(tmp_path, postgres_url, _broker(broker))
    worker = start_worker(tmp_path, "w1", queue=env["CELERY_TEST_QUEUE"], env=env)
    node = start_node(tmp_path, "node1", postgres_url, "on_celery", **env)
    try:
        node.wait_for(lambda event: event.get("event") == "node_started")
        time.sleep(6)
    finally:
        assert node.stop() == 0, node.log_path.read_text()[-3000:]
        time.sleep(1)
        worker.stop()
    recorded = [row for row in run_rows(postgres_url, "remote_tick") if row["status"] != "queued"]
    # A period claimed at the instant SIGTERM came, not yet queued, is given back for
    # another node to take (never started, never lost): at most that one.
    given_back = [
        row
        for row in recorded
        if row["status"] == RunStatus.ABANDONED
        and row["reason"] == "shutdown"
        and row["started_attempts"] == 0
    ]
    assert len(given_back) <= 1, given_back
    rows = [row for row in recorded if row not in given_back]
    ran = executions(evidence)
    assert len(rows) >= 4
    assert {row["status"] for row in rows} == {RunStatus.SUCCEEDED}, rows
    assert missing_seconds([row["period"] for row in recorded]) == []
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


def test_a_body_running_on_a_worker_makes_the_periods_due_meanwhile_skip(
    tmp_path: Path, postgres_url: str
) -> None:
    """The worker says its body began (its renewal thread writes `began_at`), and only
    that makes a later period skip for overlap."""
    env = celery_env(tmp_path, postgres_url, _broker("redis"))
    env["CELERY_TEST_SLOW"] = "2.5"
    worker = start_worker(tmp_path, "w1", queue=env["CELERY_TEST_QUEUE"], env=env)
    node = start_node(tmp_path, "node1", postgres_url, "on_celery", **env)
    try:
        node.wait_for(lambda event: event.get("event") == "node_started")
        time.sleep(9)
    finally:
        assert node.stop() == 0, node.log_path.read_text()[-3000:]
        time.sleep(3)
        worker.stop()
    rows = run_rows(postgres_url, "remote_slow")
    ran = [row for row in rows if row["status"] == RunStatus.SUCCEEDED]
    skipped = [row for row in rows if row["status"] == RunStatus.SKIPPED]
    assert len(ran) >= 2, rows
    assert len(skipped) >= 4, rows
    assert {row["reason"] for row in skipped} == {"overlap"}
    for row in ran:
        assert row["started_at"] <= row["began_at"] < row["finished_at"], row
    for skip in skipped:  # each behind a body said to have begun by its instant
        assert any(
            row["began_at"] <= skip["period"] and row["finished_at"] >= skip["claimed_at"]
            for row in ran
        ), skip


def _wait_row(
    url: str, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for row in run_rows(url, "remote_tick"):
            if predicate(row):
                return row
        time.sleep(0.1)
    raise AssertionError(f"no such row in {timeout}s: {run_rows(url, 'remote_tick')}")


def _events(worker: Worker, name: str) -> list[dict[str, Any]]:
    return [event for event in worker.events() if event.get("event") == name]


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_a_worker_killed_mid_run_loses_the_attempt_and_the_period_runs_once_elsewhere(
    tmp_path: Path, postgres_url: str, broker: str
) -> None:
    """SIGKILL of a worker (and its pool) inside the function: its lease runs out, a
    node retakes the run as attempt 2 and sends it again; the other worker runs it. On
    RabbitMQ the dead worker's unacknowledged message comes back at once and is refused."""
    env = celery_env(
        tmp_path,
        postgres_url,
        _broker(broker),
        CELERY_TEST_CRON="*/10 * * * * *",
        CELERY_TEST_SLEEP="3",
        CELERY_TEST_LEASE="2s",
    )
    workers = [
        start_worker(tmp_path, f"w{n}", queue=env["CELERY_TEST_QUEUE"], concurrency=1, env=env)
        for n in (1, 2)
    ]
    node = start_node(tmp_path, "node1", postgres_url, "on_celery", **env)
    try:
        first = _wait_row(postgres_url, lambda row: row["status"] == "running", timeout=20)
        (victim,) = [w for w in workers if first["holder"].startswith(f"{w.name}@")]
        (survivor,) = [w for w in workers if w is not victim]
        victim.kill()
        done = _wait_row(
            postgres_url,
            lambda row: row["id"] == first["id"] and row["status"] == "succeeded",
            timeout=20,
        )
    finally:
        node.stop()
        for worker in workers:
            worker.stop()
    assert done["attempt"] >= 2
    assert done["holder"].startswith(f"{survivor.name}@")
    lost = attempt_rows(postgres_url, run_id=first["id"])[0]
    assert (lost["attempt"], lost["status"], lost["reason"]) == (1, "abandoned", "lease_expired")
    assert lost["node"] == first["holder"]
    assert executions(tmp_path / "executions.txt")[first["period"].isoformat()] == 1
    retaken = [e for e in node.events() if e.get("event") == "run_retaken"]
    assert any(e["run_id"] == first["id"] and e["cause"] == "lease_expired" for e in retaken)
    if broker == "rabbitmq":
        refused = _events(survivor, "delivery_refused")
        assert any(e["run_id"] == first["id"] and e["attempt"] == 1 for e in refused)


def test_a_message_no_worker_picks_up_is_sent_again_after_its_deadline(
    tmp_path: Path, postgres_url: str
) -> None:
    """No worker for 5 s, deadline 2 s: every period is retaken (`queue_expired`) and sent
    again; once a worker comes, the older copies are refused and each period runs once."""
    env = celery_env(tmp_path, postgres_url, f"{REDIS_URL}/14", CELERY_TEST_DEADLINE="2s")
    node = start_node(tmp_path, "node1", postgres_url, "on_celery", **env)
    worker: Worker | None = None
    try:
        node.wait_for(lambda event: event.get("event") == "node_started")
        time.sleep(5)
        queued = list(run_rows(postgres_url, "remote_tick"))
        assert queued
        # A period read between its claim and its `queued` write is still `claimed`.
        assert {row["status"] for row in queued} - {"claimed"} == {"queued"}
        worker = start_worker(tmp_path, "w1", queue=env["CELERY_TEST_QUEUE"], env=env)
        cutoff = max(row["period"] for row in queued)
        _wait_row(
            postgres_url,
            lambda row: (
                row["period"] == cutoff + timedelta(seconds=2) and row["status"] == "succeeded"
            ),
        )
    finally:
        node.stop()
        if worker is not None:
            worker.stop()
    rows = [row for row in run_rows(postgres_url, "remote_tick") if row["period"] <= cutoff]
    assert {row["status"] for row in rows} == {RunStatus.SUCCEEDED}
    assert max(row["attempt"] for row in rows) >= 2
    expired = attempt_rows(postgres_url, job="remote_tick")
    assert expired
    assert {(a["status"], a["reason"]) for a in expired} == {("abandoned", "queue_expired")}
    ran = executions(tmp_path / "executions.txt")
    assert [p for p, times in ran.items() if times > 1] == []
    assert all(ran[row["period"].isoformat()] == 1 for row in rows)
    assert worker is not None
    refused = {e["refusal"] for e in _events(worker, "delivery_refused")}
    assert "superseded" in refused


def test_a_redelivery_after_the_visibility_timeout_is_refused_while_the_first_runs(
    tmp_path: Path, postgres_url: str
) -> None:
    """Redis gives an unacknowledged message to another worker once its visibility
    timeout passes, while the first copy still runs (celery #5935): the fence refuses it."""
    env = celery_env(
        tmp_path,
        postgres_url,
        f"{REDIS_URL}/13",
        CELERY_TEST_CRON="*/10 * * * * *",
        CELERY_TEST_SLEEP="7",
        CELERY_TEST_VISIBILITY="1",
    )
    workers = [
        start_worker(tmp_path, f"w{n}", queue=env["CELERY_TEST_QUEUE"], concurrency=1, env=env)
        for n in (1, 2)
    ]
    node = start_node(tmp_path, "node1", postgres_url, "on_celery", **env)
    try:
        first = _wait_row(postgres_url, lambda row: row["status"] == "running", timeout=20)
        _wait_row(
            postgres_url,
            lambda row: row["id"] == first["id"] and row["status"] == "succeeded",
            timeout=20,
        )
    finally:
        node.stop()
        for worker in workers:
            worker.stop()
    refused = [e for w in workers for e in _events(w, "delivery_refused")]
    assert any(e["run_id"] == first["id"] and e["refusal"] == "taken" for e in refused), [
        w.text()[-3000:] for w in workers
    ]
    assert executions(tmp_path / "executions.txt")[first["period"].isoformat()] == 1


def test_a_worker_cut_off_from_the_database_gives_the_run_up(
    tmp_path: Path, postgres_url: str
) -> None:
    """The worker's database connections die mid-run: its lease watch cancels the run
    before the lease can end, a node retakes it, another worker runs it; the first
    worker's outcome never lands."""
    proxy = Proxy(int(postgres_url.rsplit(":", 1)[1].split("/", maxsplit=1)[0]))
    proxy.start()
    env = celery_env(
        tmp_path,
        postgres_url,
        f"{REDIS_URL}/12",
        CELERY_TEST_CRON="*/10 * * * * *",
        CELERY_TEST_SLEEP="4",
    )
    cut_off = start_worker(
        tmp_path,
        "w1",
        queue=env["CELERY_TEST_QUEUE"],
        concurrency=1,
        env={**env, "SCHEDULER_DATABASE_URL": proxy.url(postgres_url)},
    )
    node = start_node(tmp_path, "node1", postgres_url, "on_celery", **env)
    other: Worker | None = None
    try:
        first = _wait_row(postgres_url, lambda row: row["status"] == "running", timeout=20)
        proxy.cut()
        other = start_worker(tmp_path, "w2", queue=env["CELERY_TEST_QUEUE"], concurrency=1, env=env)
        done = _wait_row(
            postgres_url,
            lambda row: row["id"] == first["id"] and row["status"] == "succeeded",
            timeout=30,
        )
        cut_off.wait_for(lambda text: '"lease_lost"' in text, timeout=10)
    finally:
        node.stop()
        cut_off.kill()
        if other is not None:
            other.stop()
        proxy.cut()
    assert done["attempt"] >= 2
    assert done["holder"].startswith("w2@")
    assert executions(tmp_path / "executions.txt")[first["period"].isoformat()] == 1


def test_sigterm_lets_the_running_task_finish_and_record_its_outcome(
    tmp_path: Path, postgres_url: str
) -> None:
    """Celery's warm shutdown: the worker stops taking messages, the run in progress ends
    and its outcome is written before the worker exits."""
    env = celery_env(
        tmp_path,
        postgres_url,
        RABBITMQ_URL,
        CELERY_TEST_CRON="*/10 * * * * *",
        CELERY_TEST_SLEEP="3",
    )
    worker = start_worker(tmp_path, "w1", queue=env["CELERY_TEST_QUEUE"], concurrency=1, env=env)
    node = start_node(tmp_path, "node1", postgres_url, "on_celery", **env)
    try:
        first = _wait_row(postgres_url, lambda row: row["status"] == "running", timeout=20)
        assert worker.stop() == 0
    finally:
        node.stop()
        worker.kill()
    (row,) = [r for r in run_rows(postgres_url, "remote_tick") if r["id"] == first["id"]]
    assert (row["status"], row["attempt"]) == ("succeeded", 1)
    assert executions(tmp_path / "executions.txt")[first["period"].isoformat()] == 1


def test_run_once_of_a_celery_job_waits_for_the_workers_outcome(
    tmp_path: Path, postgres_url: str
) -> None:
    """`scheduler run-once` sends the period and exits with the outcome the worker wrote."""
    env = celery_env(tmp_path, postgres_url, f"{REDIS_URL}/12", CELERY_TEST_SLEEP="1")
    worker = start_worker(tmp_path, "w1", queue=env["CELERY_TEST_QUEUE"], env=env)
    try:
        result = subprocess.run(
            [
                SCHEDULER,
                "run-once",
                "remote_tick",
                "--database-url",
                postgres_url,
                "--jobs",
                jobmods("on_celery"),
                "--log-format",
                "json",
            ],
            cwd=tmp_path,
            env=environment(**env),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        worker.stop()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (row,) = run_rows(postgres_url, "remote_tick")
    assert row["status"] == "succeeded"
    assert row["holder"].startswith("w1@")
    assert len(executions(tmp_path / "executions.txt")) == 1


def test_a_worker_without_its_database_refuses_to_start_and_says_why(tmp_path: Path) -> None:
    """The nodes import the app's module without a worker's settings; a worker may not."""
    (tmp_path / "bare_app.py").write_text(
        "from celery import Celery\n"
        "from scheduler.celery import install\n"
        f"app = Celery('bare', broker={REDIS_URL + '/12'!r})\n"
        "install(app, jobs=['bare_app'])\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "bare_app", "worker", "-Q", unique_queue()],
        cwd=tmp_path,
        env=environment(PYTHONPATH=f"{tmp_path}:{REPOSITORY}"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "error: scheduler.celery.install: give database_url= or set SCHEDULER_DATABASE_URL" in (
        result.stderr + result.stdout
    )
    assert "Traceback" not in result.stderr


def test_a_worker_with_a_bad_tracing_setting_refuses_to_start_and_says_why(
    tmp_path: Path, postgres_url: str
) -> None:
    """As a node does: one line naming the variable, before any message is taken."""
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tests.acceptance.jobmods.on_celery", "worker"],
        cwd=tmp_path,
        env=environment(
            SCHEDULER_DATABASE_URL=postgres_url,
            SCHEDULER_TRACING="maybe",
            CELERY_TEST_BROKER=f"{REDIS_URL}/12",
            CELERY_TEST_QUEUE=unique_queue(),
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "error: SCHEDULER_TRACING: 'maybe' is not one of: auto, on, off" in (
        result.stderr + result.stdout
    )
    assert "Traceback" not in result.stderr


def test_a_pool_holds_remote_runs_to_its_limit_on_workers_that_could_run_more(
    tmp_path: Path, postgres_url: str
) -> None:
    """Two jobs in a pool of one, due at the same instants, on a worker of concurrency 2:
    one is queued at a time (the other waits, claimed, for the slot), each period runs
    once, and the two bodies never overlap."""
    env = celery_env(tmp_path, postgres_url, f"{REDIS_URL}/12", CELERY_TEST_POOLED="1")
    worker = start_worker(tmp_path, "w1", queue=env["CELERY_TEST_QUEUE"], concurrency=2, env=env)
    node = start_node(tmp_path, "node1", postgres_url, "on_celery", **env)
    try:
        node.wait_for(lambda event: event.get("event") == "node_started")
        time.sleep(12)
    finally:
        assert node.stop() == 0
        worker.stop()
    notes: dict[tuple[str, str], dict[str, float]] = {}
    for line in (tmp_path / "executions.txt").read_text().splitlines():
        words = line.split()
        if len(words) != 3 or not words[1].startswith("remote_pool_"):
            continue  # remote_tick's evidence
        period, job, what = words
        kind, moment = what.split("@")
        assert kind not in notes.setdefault((period, job), {}), f"{job} {period} ran twice"
        notes[(period, job)][kind] = float(moment)
    bodies = sorted((n["start"], n.get("done", n["start"] + 1.0)) for n in notes.values())
    # From the first due period to the stop, about 10 s: a 1 s body and the hand-over to
    # the next (its outcome, the slot freed, the next one queued and picked up) take 1.2
    # to 1.5 s, so 6 to 8 bodies ran (7 in a loaded CI run).
    assert len(bodies) >= 6, "the jobs hardly ran"
    overlaps = [(a, b) for a, b in itertools.pairwise(bodies) if b[0] < a[1]]
    assert overlaps == [], "two bodies of a pool of one ran at once"
    waited = [e for e in node.events() if e.get("event") == "run_waiting"]
    assert waited, "no run ever waited for the pool"
    assert {e["pool"] for e in waited} == {"remote"}
