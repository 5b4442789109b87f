"""A failure streak on one node on SQLite, under a virtual clock (`scheduler.testing`): the
every-second job of tests/acceptance/jobmods/streaky.py fails; its third failure in a
row pages once, its sixth pauses it (the job's pause reason says why) and the periods
after are skipped; once the fault is gone and an operator resumes it, one `recovered`
ends the streak. Its hook (the jobmod's, writing to a file) hears each once, as the
node's alerts thread calls it. It runs beside
tests/acceptance/test_failure_streaks.py (real nodes on both databases, the CLI's
views) and asserts every period."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from scheduler.states import RunStatus
from scheduler.store import jobs as stored_jobs
from scheduler.testing import Harness
from tests.acceptance.jobmods.streaky import streaky

START = datetime.fromisoformat("2026-01-01T00:00:00Z")


def _seconds(first: int, last: int) -> list[datetime]:
    return [START + timedelta(seconds=n) for n in range(first, last + 1)]


def test_a_streak_pages_once_pauses_the_job_and_recovers_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    heard, broken = tmp_path / "heard.jsonl", tmp_path / "broken"
    broken.touch()
    monkeypatch.setenv("HEARD_LOG", str(heard))
    monkeypatch.setenv("STREAKY_BROKEN", str(broken))
    with Harness([streaky], start=START, folder=tmp_path) as harness:
        harness.clock.advance("10s")
        (paused,) = stored_jobs.all_jobs(harness.database, ["streaky"])
        assert paused.pause_reason == "paused by the scheduler: 6 periods failed in a row"
        harness.assert_periods("streaky", _seconds(1, 6), status=RunStatus.FAILED)
        harness.assert_periods("streaky", _seconds(7, 10), status=RunStatus.SKIPPED)
        assert {run.reason for run in harness.runs("streaky", status="skipped")} == {"paused"}
        # The fault is gone; an operator resumes the job; its next run ends the streak.
        broken.unlink()
        harness.resume("streaky")
        harness.clock.advance("2s")
        harness.assert_periods("streaky", _seconds(11, 12), status=RunStatus.SUCCEEDED)
        (resumed,) = stored_jobs.all_jobs(harness.database, ["streaky"])
        events = [(event.kind, event.streak) for event in harness.events("streaky")]
    lines = [json.loads(line) for line in heard.read_text().splitlines()]
    kinds = [(line["kind"], line["streak"]) for line in lines]
    assert kinds == [("failed", 3), ("paused", 6), ("recovered", 6)]
    assert events == kinds
    assert lines[0]["detail"] == "3 periods failed in a row; RuntimeError: the upstream is down"
    assert not resumed.paused
