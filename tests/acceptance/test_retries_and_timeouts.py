"""Retries with back-off, and timeouts of a function, a coroutine and a child process.
Retries on one SQLite node are tested under a virtual clock instead of a real `run-once`
sleeping through the back-off: tests/integration/test_retries_virtual.py."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from scheduler.states import RunStatus
from tests.acceptance.processes import jobmods, run_command, start_node
from tests.acceptance.records import attempt_rows, run_rows

pytestmark = pytest.mark.slow


def _run_once(tmp_path: Path, database_url: str, job: str, module: str) -> tuple[int, float]:
    began = time.monotonic()
    result = run_command(
        [
            "run-once",
            job,
            "--database-url",
            database_url,
            "--jobs",
            jobmods(module),
            "--log-format",
            "json",
        ],
        tmp_path,
        EXECUTION_LOG=str(tmp_path / "executions.txt"),
    )
    assert "Traceback (most recent call last)" not in result.stderr, result.stderr
    return result.returncode, time.monotonic() - began


@pytest.mark.postgres
def test_retries_back_off_and_end_failed(tmp_path: Path, postgres_url: str) -> None:
    database_url = postgres_url
    code, took = _run_once(tmp_path, database_url, "always-fails", "failing")
    assert code == 1
    # Back-off 0.5 s then 1 s (each with up to 25 % jitter) before attempts 2 and 3.
    assert took >= 1.5
    (row,) = run_rows(database_url, "always-fails")
    assert (row["status"], row["attempt"], row["retry_at"]) == (RunStatus.FAILED, 3, None)
    assert row["error_message"] == "attempt 3 failed"
    earlier = attempt_rows(database_url, job="always-fails")
    assert [(a["attempt"], a["status"], a["error_message"]) for a in earlier] == [
        (1, RunStatus.FAILED, "attempt 1 failed"),
        (2, RunStatus.FAILED, "attempt 2 failed"),
    ]
    assert "RuntimeError" in str(earlier[0]["error_traceback"])
    assert (tmp_path / "executions.txt").read_text().count("attempt") == 3


def test_a_daemon_retries_a_failed_period(tmp_path: Path, postgres_url: str) -> None:
    node = start_node(
        tmp_path, "retrier", postgres_url, "failing", EXECUTION_LOG=str(tmp_path / "x.txt")
    )
    try:
        event = node.wait_for(
            lambda event: (
                event.get("event") == "run_succeeded" and event.get("job") == "fails-once"
            ),
            timeout=20,
        )
    finally:
        assert node.stop() == 0
    assert event["attempt"] == 2
    row = next(row for row in run_rows(postgres_url, "fails-once") if row["id"] == event["run_id"])
    assert (row["status"], row["attempt"]) == (RunStatus.SUCCEEDED, 2)


@pytest.mark.parametrize(
    ("job", "evidence"), [("slow-thread", "cancelled"), ("slow-coroutine", "cancelled")]
)
def test_a_timeout_cancels_the_run(
    tmp_path: Path, sqlite_url: str, job: str, evidence: str
) -> None:
    code, took = _run_once(tmp_path, sqlite_url, job, "slow")
    assert code == 1
    assert took < 10
    (row,) = run_rows(sqlite_url, job)
    assert row["status"] == RunStatus.TIMED_OUT
    assert 900 <= row["duration_ms"] < 5000
    assert "did not finish within 1s" in row["error_message"]
    # The job saw its cancellation signal.
    deadline = time.monotonic() + 5
    while evidence not in (tmp_path / "executions.txt").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert evidence in (tmp_path / "executions.txt").read_text()


def test_a_timeout_kills_a_process_isolated_job(tmp_path: Path, postgres_url: str) -> None:
    code, took = _run_once(tmp_path, postgres_url, "slow-process", "slow")
    assert code == 1
    assert took < 10
    (row,) = run_rows(postgres_url, "slow-process")
    assert row["status"] == RunStatus.TIMED_OUT
    text = (tmp_path / "executions.txt").read_text()
    pid = int(text.split("pid=")[1].split()[0])
    assert pid != os.getpid()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert "survived" not in text
