"""`ctx.previous` on one node on SQLite, under a virtual clock (`scheduler.testing`): each
run reads the period right before it, with what that run checkpointed. Beside the real
nodes of tests/acceptance/test_previous_period.py (six seconds of an every-second job,
where a period whose outcome was still being written may be passed over), it asserts
every one of 60 periods exactly, in a fraction of a second."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from scheduler.testing import Harness
from tests.acceptance.jobmods.previous import sync

START = "2026-01-01T00:00:00Z"


def test_each_run_picks_up_from_the_period_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "executions.txt"
    monkeypatch.setenv("EXECUTION_LOG", str(log))
    with Harness([sync], start=START, folder=tmp_path) as harness:
        harness.clock.advance("60s")
        periods = [period.isoformat() for period in harness.periods("sync", status="succeeded")]
    lines = [json.loads(text) for text in log.read_text().splitlines()]
    first = harness.clock.now - timedelta(seconds=59)
    assert periods == [(first + timedelta(seconds=n)).isoformat() for n in range(60)]
    assert [line["period"] for line in lines] == periods
    assert lines[0]["previous"] is None
    for line, before in zip(lines[1:], periods, strict=False):
        assert (line["previous"], line["status"]) == (before, "succeeded")
        assert line["checkpoint"] == {"synced_to": before}
