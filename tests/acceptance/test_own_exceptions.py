"""A job's own exceptions are the job's: a built-in `TimeoutError` (what `asyncio.wait_for`
and most clients raise), a `CancelledError` of its own, `SystemExit`, `KeyboardInterrupt`
and a `BaseException` of its own are a failed attempt with its traceback, on every
executor, in a daemon and under `scheduler trigger`. Only the scheduler's own deadline
makes a run `timed_out` (see test_retries_and_timeouts.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scheduler.states import RunStatus
from tests.acceptance.celery_workers import REDIS_URL, celery_env, start_worker
from tests.acceptance.processes import JOBMODS_PACKAGE, jobmods, run_command, start_node
from tests.acceptance.records import executions, run_rows

pytestmark = pytest.mark.slow
HALT = "tests.acceptance.jobmods.own_errors.Halt"


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_an_async_jobs_own_timeout_error_fails_its_run_and_its_later_periods_run(
    tmp_path: Path, sqlite_url: str
) -> None:
    """`asyncio.wait_for` inside the job, no `timeout=`: each period fails on its own and
    once; none stays running, none is skipped behind it, none runs twice."""
    evidence = tmp_path / "executions.txt"
    node = start_node(tmp_path, "own", sqlite_url, "own_errors", EXECUTION_LOG=str(evidence))
    try:
        node.wait_for(
            lambda event: (
                event.get("event") == "run_failed" and event.get("job") == "waits-too-little"
            ),
            timeout=20,
            count=3,
        )
    finally:
        assert node.stop() == 0
    assert [e for e in node.events() if e.get("event") == "dispatch_crashed"] == []
    rows = run_rows(sqlite_url, "waits-too-little")
    failed = [row for row in rows if row["status"] == RunStatus.FAILED]
    assert len(failed) >= 3
    assert {row["status"] for row in rows} <= {RunStatus.FAILED, RunStatus.ABANDONED}, rows
    for row in failed:
        assert (row["error_type"], row["attempt"], row["retry_at"]) == ("TimeoutError", 1, None)
        assert "wait_for" in row["error_traceback"], row["error_traceback"]
        assert row["error_traceback"].rstrip().endswith("TimeoutError")
        assert row["lease_expires_at"] is None
    assert [period for period, times in executions(evidence).items() if times > 1] == []


@pytest.mark.parametrize(
    ("job", "error_type", "shown"),
    [
        ("waits-too-little", "TimeoutError", "wait_for"),
        ("waits-too-little-30s", "TimeoutError", "wait_for"),
        ("own-cancel", "asyncio.exceptions.CancelledError", "await task"),
        *[
            (f"{executor}-{kind}", error_type, "raise make()")
            for executor in ("thread", "async", "process")
            for kind, error_type in (
                ("system-exit", "SystemExit"),
                ("keyboard-interrupt", "KeyboardInterrupt"),
                ("halt", HALT),
            )
        ],
    ],
)
def test_trigger_reports_the_jobs_own_exception_as_its_failure(
    tmp_path: Path, sqlite_url: str, job: str, error_type: str, shown: str
) -> None:
    evidence = tmp_path / "executions.txt"
    result = run_command(
        [
            *("trigger", job, "--database-url", sqlite_url),
            *("--jobs", jobmods("own_errors"), "--log-format", "json"),
        ],
        tmp_path,
        timeout=30,
        EXECUTION_LOG=str(evidence),
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    events = _events(result.stdout)
    (failed,) = [event for event in events if event["event"] == "run_failed"]
    assert failed["error_type"] == error_type
    assert [event for event in events if event["event"] == "dispatch_crashed"] == []
    (row,) = run_rows(sqlite_url, job)
    assert (row["status"], row["attempt"], row["error_type"]) == (
        RunStatus.FAILED,
        1,
        error_type,
    )
    assert shown in row["error_traceback"], row["error_traceback"]
    assert row["error_traceback"].startswith("Traceback (most recent call last)")
    assert row["lease_expires_at"] is None
    assert sum(executions(evidence).values()) == 1


def test_a_celery_worker_records_the_jobs_own_exceptions_as_its_failures(
    tmp_path: Path, postgres_url: str
) -> None:
    """A real worker (prefork, one pool process) runs a function raising `SystemExit`,
    then a coroutine whose client raises `TimeoutError`: each is a failed attempt, run
    once, and the same pool process serves both (none died)."""
    env = celery_env(tmp_path, postgres_url, f"{REDIS_URL}/14")
    worker = start_worker(
        tmp_path,
        "w1",
        queue=env["CELERY_TEST_QUEUE"],
        env=env,
        concurrency=1,
        app=f"{JOBMODS_PACKAGE}.on_celery_errors",
    )
    results = {}
    try:
        for job in ("remote-system-exit", "remote-waits-too-little"):
            results[job] = run_command(
                [
                    *("trigger", job, "--database-url", postgres_url),
                    *("--jobs", jobmods("on_celery_errors"), "--log-format", "json"),
                ],
                tmp_path,
                timeout=60,
                **env,
            )
    finally:
        worker.stop()
    for job, error_type, shown in (
        ("remote-system-exit", "SystemExit", "raise SystemExit(3)"),
        ("remote-waits-too-little", "TimeoutError", "wait_for"),
    ):
        assert results[job].returncode == 1, results[job].stdout[-3000:]
        (row,) = run_rows(postgres_url, job)
        assert (row["status"], row["attempt"], row["error_type"]) == (
            RunStatus.FAILED,
            1,
            error_type,
        )
        assert row["holder"].startswith("w1@"), row["holder"]
        assert shown in row["error_traceback"], row["error_traceback"]
        (failed,) = [
            event
            for event in worker.events()
            if event.get("event") == "run_failed" and event.get("job") == job
        ]
        assert failed["error_type"] == error_type
    assert sum(executions(tmp_path / "executions.txt").values()) == 2
    ready = [event for event in worker.events() if event.get("event") == "worker_ready"]
    assert len(ready) == 1, "the pool process died and another took its place"
    assert "WorkerLostError" not in worker.text()
