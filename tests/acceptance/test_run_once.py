"""`scheduler run-once`: the foreground claim for system cron and Kubernetes CronJobs."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from scheduler.states import RunStatus
from tests.acceptance.processes import SCHEDULER, environment, jobmods, run_command
from tests.acceptance.records import run_rows, table_counts

pytestmark = pytest.mark.slow


def _race(command: list[str], cwd: Path, log: Path) -> list[tuple[int, float, str]]:
    """Start two copies at once; (exit status, seconds until it ended, stdout) of each."""
    began = time.monotonic()
    copies = [
        subprocess.Popen(
            command,
            cwd=cwd,
            env=environment(EXECUTION_LOG=str(log)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    results: list[tuple[int, float, str]] = [(0, 0.0, "")] * 2

    def collect(index: int) -> None:
        out, _ = copies[index].communicate(timeout=60)
        results[index] = (copies[index].returncode, time.monotonic() - began, out)

    waiters = [threading.Thread(target=collect, args=(index,)) for index in range(2)]
    for waiter in waiters:
        waiter.start()
    for waiter in waiters:
        waiter.join()
    return results


def test_two_copies_started_together_run_the_period_once(tmp_path: Path, database_url: str) -> None:
    log = tmp_path / "executions.txt"
    command = [
        SCHEDULER,
        "run-once",
        "daily-report",
        "--database-url",
        database_url,
        "--jobs",
        jobmods("daily"),
        "--log-format",
        "json",
    ]
    results = _race(command, tmp_path, log)
    assert [code for code, _, _ in results] == [0, 0], results
    losers = [(took, out) for _, took, out in results if '"run_already_claimed"' in out]
    assert len(losers) == 1, results
    took, out = losers[0]
    assert took < 5
    event = next(json.loads(line) for line in out.splitlines() if "run_already_claimed" in line)
    assert event["holder"]
    assert "run_started" not in out
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    (row,) = run_rows(database_url, "daily-report")
    assert (row["period"], row["status"]) == (today, RunStatus.SUCCEEDED)
    assert log.read_text().count("done") == 1


def test_run_once_accepts_an_explicit_period(tmp_path: Path, sqlite_url: str) -> None:
    result = run_command(
        [
            "run-once",
            "daily-report",
            "--period",
            "2026-01-02T00:00:00Z",
            "--database-url",
            sqlite_url,
            "--jobs",
            jobmods("daily"),
        ],
        tmp_path,
        EXECUTION_LOG=str(tmp_path / "x.txt"),
    )
    assert result.returncode == 0, result.stderr
    (row,) = run_rows(sqlite_url, "daily-report")
    assert row["period"] == datetime(2026, 1, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["nope"], "job 'nope': name: no such job"),
        (["daily-report", "--period", "2026-01-02T00:30:00Z"], "is not a period of '0 0 * * *'"),
        (["daily-report", "--period", "2999-01-01T00:00:00Z"], "is in the future"),
        (["daily-report", "--period", "yesterday"], "--period: cannot read 'yesterday'"),
    ],
)
def test_run_once_refuses_bad_input(
    tmp_path: Path, sqlite_url: str, arguments: list[str], expected: str
) -> None:
    result = run_command(
        ["run-once", *arguments, "--database-url", sqlite_url, "--jobs", jobmods("daily")],
        tmp_path,
        EXECUTION_LOG=str(tmp_path / "x.txt"),
    )
    assert result.returncode == 2
    assert expected in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert table_counts(sqlite_url) == {
        "scheduler_runs": 0,
        "scheduler_jobs": 0,
        "scheduler_nodes": 0,
    }
