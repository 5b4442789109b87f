"""Retries with back-off on one node on SQLite, under a virtual clock (`scheduler.testing`):
the job of tests/acceptance/jobmods/failing.py fails each attempt, is retried after 0.5 s
then 1 s, and ends failed at its third attempt with each earlier attempt on record. It
replaced the SQLite case of tests/acceptance/test_retries_and_timeouts.py's
test_retries_back_off_and_end_failed (a real `run-once` process sleeping through the
back-off; its PostgreSQL case stays) and asserts more: each retry's instant, exactly."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from scheduler.states import RunStatus
from scheduler.testing import Harness
from tests.acceptance.jobmods.failing import always_fails

PERIOD = datetime.fromisoformat("2026-01-02T00:00:00Z")
SETTLE = timedelta(seconds=0.05)  # recovery's wait after a retry falls due


def test_retries_back_off_and_end_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "executions.txt"
    monkeypatch.setenv("EXECUTION_LOG", str(log))
    with Harness([always_fails], start="2026-01-01T23:59:00Z", folder=tmp_path) as harness:
        harness.clock.advance("2m")
        row = harness.run("always-fails", PERIOD)
        attempts = harness.attempts("always-fails", PERIOD)
    assert (row.status, row.attempt, row.retry_at) == (RunStatus.FAILED, 3, None)
    assert row.error_message == "attempt 3 failed"
    assert [(a.attempt, a.status, a.error_message) for a in attempts] == [
        (1, RunStatus.FAILED, "attempt 1 failed"),
        (2, RunStatus.FAILED, "attempt 2 failed"),
        (3, RunStatus.FAILED, "attempt 3 failed"),
    ]
    assert "RuntimeError" in str(attempts[0].error_traceback)
    # Back-off 0.5 s then 1 s, exactly (the harness adds no retry jitter).
    second = PERIOD + timedelta(seconds=0.5) + SETTLE
    third = second + timedelta(seconds=1) + SETTLE
    assert [a.started_at for a in attempts] == [PERIOD, second, third]
    assert log.read_text().count("attempt") == 3
