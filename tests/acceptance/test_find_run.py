"""Finding a run as people copy it: the run id from a log line, the period from the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.processes import jobmods, run_command

pytestmark = pytest.mark.slow


def test_a_manual_run_is_found_by_its_logged_id_and_its_printed_period(
    tmp_path: Path, database_url: str
) -> None:
    triggered = run_command(
        [
            "trigger",
            "hourly-ledger",
            "--jobs",
            jobmods("ledger"),
            "--log-format",
            "json",
            "--database-url",
            database_url,
        ],
        tmp_path,
        EXECUTION_LOG=str(tmp_path / "executions.txt"),
    )
    assert triggered.returncode == 0, triggered.stderr
    events = [json.loads(line) for line in triggered.stdout.splitlines()]
    run_id = next(event["run_id"] for event in events if event["event"] == "run_succeeded")

    listed = run_command(["runs", "--database-url", database_url], tmp_path)
    header, row = listed.stdout.splitlines()
    assert header.split()[:4] == ["JOB", "PERIOD", "STATUS", "ORIGIN"]
    job, period, status, origin = row.split()[:4]
    assert (job, status, origin) == ("hourly-ledger", "succeeded", "manual")

    # The id in full (a JSON line), its first 8 characters (a terminal line), or job and period.
    for args in ([run_id], [run_id[:8]], [job, period]):
        shown = run_command(["runs", "show", *args, "--database-url", database_url], tmp_path)
        assert shown.returncode == 0, shown.stderr
        assert f"run id:        {run_id}" in shown.stdout
        assert f"period:        {period}" in shown.stdout
