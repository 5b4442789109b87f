"""A catch-up budget on one node on SQLite, under a virtual clock (`scheduler.testing`):
after an outage the every-second job of tests/acceptance/jobmods/budgeted.py (3 per 9 s)
starts three catch-up runs, exactly 3 s apart, oldest first; the other periods it owed
are deferred (budget), run by nobody, and each runs once, as a manual run, when an
operator says so; no period is lost. It runs beside
tests/acceptance/test_catchup_budget.py's first test (real nodes on both databases, one
killed on PostgreSQL, and the CLI's views) and asserts each start's instant."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from scheduler.states import EventKind, Origin, Reason, RunStatus
from scheduler.testing import Harness
from tests.acceptance.jobmods.budgeted import budgeted

START = datetime.fromisoformat("2026-01-01T00:00:00Z")
PACE = timedelta(seconds=3)


def test_an_outage_starts_the_budget_paced_and_defers_the_rest_until_an_operator_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "executions.txt"
    monkeypatch.setenv("EXECUTION_LOG", str(log))
    with Harness([budgeted], start=START, folder=tmp_path) as harness:
        harness.clock.advance("2s")
        down = harness.clock.now
        back = harness.outage("12s")  # a dozen periods owed
        harness.clock.advance("10s")  # the three starts (0, 3, 6 s) and a pace more
        catch_up = [
            run
            for run in harness.runs("budgeted")
            if run.origin == Origin.CATCHUP and run.period > down
        ]
        started = [run for run in catch_up if run.status != RunStatus.DEFERRED]
        deferred = [run for run in catch_up if run.status == RunStatus.DEFERRED]
        assert [run.claimed_at for run in started] == [back, back + PACE, back + 2 * PACE]
        assert [run.period for run in started] == [down + timedelta(seconds=n) for n in (1, 2, 3)]
        assert {run.status for run in started} == {RunStatus.SUCCEEDED}
        assert [run.period for run in deferred] == [
            down + timedelta(seconds=n) for n in range(4, 13)
        ]
        assert {run.reason for run in deferred} == {Reason.BUDGET}
        ran = Counter(line.split()[0] for line in log.read_text().splitlines())
        assert not {run.period.isoformat() for run in deferred} & set(ran), "a deferred one ran"
        assert [event.kind for event in harness.events("budgeted")].count(EventKind.DEFERRED) >= 1

        assert harness.run_deferred("budgeted") == len(deferred)
        waiting = {run.period for run in deferred}
        final = harness.runs("budgeted")
        assert {run.period for run in final if run.status == RunStatus.SUCCEEDED} >= waiting
        assert {run.origin for run in final if run.period in waiting} == {Origin.MANUAL}
        periods = sorted(run.period for run in final)
        assert periods == [START + timedelta(seconds=n) for n in range(1, len(periods) + 1)], (
            "a period was lost"
        )
        assert periods[-1] == harness.clock.now
    ran = Counter(line.split()[0] for line in log.read_text().splitlines())
    assert [period for period, count in ran.items() if count > 1] == [], "a period ran twice"
    assert all(period.isoformat() in ran for period in waiting)
