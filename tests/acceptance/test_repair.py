"""Repairing history from the command line: backfill, rerun, trigger, pause and resume."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest

from scheduler.states import Origin, Reason, RunStatus
from tests.acceptance.processes import jobmods, run_command, start_node
from tests.acceptance.records import run_rows, table_counts

pytestmark = pytest.mark.slow
HOUR0 = (datetime.now(UTC) - timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
HOURS = [HOUR0 + timedelta(hours=n) for n in range(5)]


def _scheduler(tmp_path: Path, url: str, *args: str, fail: bool = False) -> tuple[int, str]:
    result = run_command(
        [*args, "--database-url", url, "--jobs", jobmods("ledger"), "--log-format", "json"],
        tmp_path,
        EXECUTION_LOG=str(tmp_path / "executions.txt"),
        LEDGER_FAIL="1" if fail else "0",
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout + result.stderr


def _runs_of(tmp_path: Path) -> Counter[str]:
    lines = (tmp_path / "executions.txt").read_text().splitlines()
    return Counter(line.split()[0] for line in lines)


def _statuses(url: str) -> dict[datetime, tuple[str, int]]:
    return {
        row["period"]: (row["status"], row["attempt"]) for row in run_rows(url, "hourly-ledger")
    }


def test_backfill_runs_what_never_succeeded(tmp_path: Path, database_url: str) -> None:
    assert (
        _scheduler(
            tmp_path, database_url, "run-once", "hourly-ledger", "--period", HOURS[1].isoformat()
        )[0]
        == 0
    )
    code, _ = _scheduler(
        tmp_path,
        database_url,
        "run-once",
        "hourly-ledger",
        "--period",
        HOURS[3].isoformat(),
        fail=True,
    )
    assert code == 1
    before = _statuses(database_url)
    span = ["--from", HOURS[0].isoformat(), "--to", HOURS[4].isoformat()]

    code, out = _scheduler(tmp_path, database_url, "backfill", "hourly-ledger", *span, "--dry-run")
    assert code == 0
    assert out.splitlines()[0].split() == ["PERIOD", "STATUS", "ACTION"]
    listed = [line.split() for line in out.splitlines() if line[:4].isdigit()]
    assert all(words[0].endswith("Z") for words in listed)
    assert [(words[1], words[2]) for words in listed] == [
        ("-", "run"),
        ("succeeded", "keep"),
        ("-", "run"),
        ("failed", "keep"),
        ("-", "run"),
    ]
    assert _statuses(database_url) == before

    code, _ = _scheduler(tmp_path, database_url, "backfill", "hourly-ledger", *span)
    assert code == 0
    after = _statuses(database_url)
    assert [after[hour] for hour in HOURS] == [
        ("succeeded", 1),
        ("succeeded", 1),
        ("succeeded", 1),
        ("failed", 1),
        ("succeeded", 1),
    ]
    assert {
        row["origin"]
        for row in run_rows(database_url, "hourly-ledger")
        if row["period"] in (HOURS[0], HOURS[2], HOURS[4])
    } == {Origin.BACKFILL}

    code, out = _scheduler(
        tmp_path, database_url, "backfill", "hourly-ledger", *span, "--include-failed", "--dry-run"
    )
    assert [line.split()[2] for line in out.splitlines() if line[:4].isdigit()] == [
        "keep",
        "keep",
        "keep",
        "rerun",
        "keep",
    ]
    code, _ = _scheduler(
        tmp_path, database_url, "backfill", "hourly-ledger", *span, "--include-failed"
    )
    assert code == 0
    assert _statuses(database_url)[HOURS[3]] == ("succeeded", 2)
    ran = _runs_of(tmp_path)
    assert [ran[hour.isoformat()] for hour in HOURS] == [1, 1, 1, 2, 1]


def test_rerun_refuses_a_success_unless_forced(tmp_path: Path, sqlite_url: str) -> None:
    period = HOURS[2].isoformat()
    assert _scheduler(tmp_path, sqlite_url, "run-once", "hourly-ledger", "--period", period)[0] == 0
    code, out = _scheduler(tmp_path, sqlite_url, "rerun", "hourly-ledger", period)
    assert code == 2
    assert "job 'hourly-ledger': PERIOD:" in out
    assert "--force" in out
    assert _statuses(sqlite_url)[HOURS[2]] == ("succeeded", 1)
    code, _ = _scheduler(tmp_path, sqlite_url, "rerun", "hourly-ledger", period, "--force")
    assert code == 0
    assert _statuses(sqlite_url)[HOURS[2]] == ("succeeded", 2)
    code, out = _scheduler(tmp_path, sqlite_url, "rerun", "hourly-ledger", HOURS[4].isoformat())
    assert code == 2
    assert "has no run" in out


def test_trigger_records_a_manual_run_off_the_schedule(tmp_path: Path, sqlite_url: str) -> None:
    code, _ = _scheduler(tmp_path, sqlite_url, "trigger", "hourly-ledger")
    assert code == 0
    (row,) = run_rows(sqlite_url, "hourly-ledger")
    assert (row["origin"], row["status"]) == (Origin.MANUAL, RunStatus.SUCCEEDED)
    assert row["period"].microsecond != 0, "a manual period must not be a schedule period"


def test_pause_is_honoured_by_a_running_node_and_not_caught_up(
    tmp_path: Path, postgres_url: str
) -> None:
    log = tmp_path / "executions.txt"
    node = start_node(tmp_path, "worker", postgres_url, "ticker", EXECUTION_LOG=str(log))
    node.wait_for(lambda event: event.get("event") == "run_succeeded")
    pause = run_command(["pause", "tick", "--database-url", postgres_url], tmp_path)
    assert (pause.returncode, pause.stdout.strip()) == (0, "tick: paused")
    paused_at = datetime.now(UTC)
    # Long enough that the window below holds at least four periods however quickly
    # the node stops and the resume command returns.
    time.sleep(4)
    assert node.stop() == 0
    time.sleep(2)
    assert run_command(["resume", "tick", "--database-url", postgres_url], tmp_path).returncode == 0
    resumed_at = datetime.now(UTC)
    time.sleep(2)
    second = start_node(tmp_path, "second", postgres_url, "ticker", EXECUTION_LOG=str(log))
    second.wait_for(lambda event: event.get("event") == "catchup_claimed")
    time.sleep(2)
    assert second.stop() == 0

    rows = run_rows(postgres_url, "tick")
    during = [
        row
        for row in rows
        if paused_at + timedelta(seconds=1) <= row["period"] < resumed_at - timedelta(seconds=1)
    ]
    assert len(during) >= 4
    assert {(row["status"], row["reason"]) for row in during} == {
        (RunStatus.SKIPPED, Reason.PAUSED)
    }
    ran = {line.split()[0] for line in log.read_text().splitlines()}
    assert not ran & {row["period"].isoformat() for row in during}
    after = [row for row in rows if resumed_at + timedelta(seconds=1) <= row["period"]]
    # After resume: caught up or run live; a live period that meets the catch-up
    # backlog still running is skipped for overlap, as for any skip-overlap job.
    assert RunStatus.SUCCEEDED in {row["status"] for row in after}
    assert {(row["status"], row["reason"]) for row in after} <= {
        (RunStatus.SUCCEEDED, None),
        (RunStatus.SKIPPED, Reason.OVERLAP),
    }
    periods = sorted(row["period"] for row in rows)
    gaps = [b - a for a, b in pairwise(periods) if b - a != timedelta(seconds=1)]
    assert gaps == []


def test_pause_of_an_unknown_job_is_refused(tmp_path: Path, sqlite_url: str) -> None:
    result = run_command(["pause", "nobody", "--database-url", sqlite_url], tmp_path)
    assert result.returncode == 2
    assert "job 'nobody': name: unknown" in result.stderr
    assert table_counts(sqlite_url)["scheduler_jobs"] == 0


def test_plan_shows_a_dst_night_in_both_zones(tmp_path: Path) -> None:
    result = run_command(
        [
            "plan",
            "stockholm-0230",
            "--jobs",
            jobmods("zoned"),
            "--after",
            "2026-03-27T00:00:00Z",
            "--count",
            "4",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "PERIOD (UTC)          LOCAL (Europe/Stockholm)   DAY",
        "2026-03-27T01:30:00Z  2026-03-27T02:30:00+01:00  Fri CET",
        "2026-03-28T01:30:00Z  2026-03-28T02:30:00+01:00  Sat CET",
        "2026-03-29T01:00:00Z  2026-03-29T03:00:00+02:00  Sun CEST",
        "2026-03-30T00:30:00Z  2026-03-30T02:30:00+02:00  Mon CEST",
    ]
    autumn = run_command(
        [
            "plan",
            "stockholm-hourly",
            "--jobs",
            jobmods("zoned"),
            "--after",
            "2026-10-24T22:30:00Z",
            "--count",
            "4",
            "--json",
        ],
        tmp_path,
    )
    lines = autumn.stdout.splitlines()
    assert [line.split('"local": "')[1][:25] for line in lines] == [
        "2026-10-25T01:00:00+02:00",
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]


def test_plan_tries_a_cron_expression_without_a_job_module(tmp_path: Path) -> None:
    args = ["plan", "--cron", "30 2 * * *", "--timezone", "Europe/Stockholm"]
    result = run_command([*args, "--after", "2026-03-28T00:00:00Z", "--count", "2"], tmp_path)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert result.stdout.splitlines()[1:] == [
        "2026-03-28T01:30:00Z  2026-03-28T02:30:00+01:00  Sat CET",
        "2026-03-29T01:00:00Z  2026-03-29T03:00:00+02:00  Sun CEST",
    ]
    assert list(tmp_path.iterdir()) == [], "nothing written, no database opened"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--cron", "61 * * * *"], "error: --cron: minute field '61' is out of range 0-59"),
        (["--cron", "* * * * *", "--timezone", "Mars/Base"], "error: --timezone: unknown time"),
        (["--timezone", "UTC", "hourly-ledger"], "error: --timezone: only with --cron"),
        ([], "error: plan: name a JOB, or try an expression with --cron"),
    ],
)
def test_plan_refuses_a_bad_expression_naming_the_field(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    result = run_command(["plan", *args, "--jobs", jobmods("ledger")], tmp_path)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(expected), line
