"""Failure streaks, on both backends: the `failed` event is born once a streak reaches
`alert_after_failures` (and says how long it is), not again until a success has
recovered it; `recovered` ends it once; periods neither failed nor succeeded do not
break it; a job is paused by the scheduler at exactly `pause_after_failures`, with its
reason, and not again after an operator resumed it until a new streak gets there."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler import check
from scheduler.check import Problem
from scheduler.model import Claim, Due, Failure, Finish
from scheduler.node.registration import register
from scheduler.schedules import Schedules
from scheduler.states import EventKind, RunStatus
from scheduler.store import claims, writes
from scheduler.store import deliveries as stored_events
from scheduler.store import jobs as stored_jobs
from scheduler.store.database import Database
from tests.acceptance.jobmods.tenants import tenant_report
from tests.sql import began_at, rows

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NODE = "node-a"
BOOM = Failure("ValueError", "boom", "Traceback …")


def _period(n: int) -> datetime:
    return PERIOD + timedelta(minutes=n)


def _held(database: Database, job: str, period: datetime) -> Claim:
    (claim,) = claims.claim(database, [Due(job, period, 30, None)], NODE).won
    writes.start(database, claim)
    began_at(database, claim.id, period)
    return claim


def _outcome(claim: Claim, ok: bool, alert_after: int, pause_after: int | None) -> Finish:
    status = RunStatus.SUCCEEDED if ok else RunStatus.FAILED
    return Finish(
        claim,
        status,
        3,
        None if ok else BOOM,
        alert_after=alert_after,
        pause_after=pause_after,
    )


def _run(
    database: Database,
    job: str,
    results: str,
    *,
    first: int = 0,
    alert_after: int = 1,
    pause_after: int | None = None,
) -> None:
    """Periods `first`, `first + 1`, … of `job`, one write each: `x` fails, `.` succeeds."""
    for n, mark in enumerate(results, start=first):
        claim = _held(database, job, _period(n))
        outcome = _outcome(claim, mark == ".", alert_after, pause_after)
        assert writes.record(database, [outcome], [])[0] == [True]


def _events(database: Database, job: str) -> list[tuple[int, str, int | None, str | None]]:
    """(minute, kind, streak, detail) of the job's events, oldest period first."""
    found = stored_events.recent(database, job=job, limit=100)
    return sorted(
        (
            int((row.event.period - PERIOD).total_seconds() // 60),
            row.event.kind.value,
            row.event.streak,
            row.event.detail,
        )
        for row in found
    )


def test_a_streak_alerts_once_when_it_reaches_the_threshold_and_recovers_once(
    database: Database,
) -> None:
    _run(database, "sync", "..xxxxx.xxx.", alert_after=3)
    assert _events(database, "sync") == [
        (4, "failed", 3, "3 periods failed in a row; ValueError: boom"),
        (7, "recovered", 5, "after 5 failed period(s) in a row"),
        (10, "failed", 3, "3 periods failed in a row; ValueError: boom"),
        (11, "recovered", 3, "after 3 failed period(s) in a row"),
    ]


def test_a_streak_shorter_than_the_threshold_is_silent(database: Database) -> None:
    _run(database, "sync", "xx.xx.x.", alert_after=3)
    assert _events(database, "sync") == []


def test_by_default_the_first_failure_alerts_and_its_repeats_do_not(database: Database) -> None:
    _run(database, "report", "xxxx.x")
    assert _events(database, "report") == [
        (0, "failed", 1, "ValueError: boom"),
        (4, "recovered", 4, "after 4 failed period(s) in a row"),
        (5, "failed", 1, "ValueError: boom"),
    ]


def test_periods_neither_failed_nor_succeeded_do_not_break_a_streak(database: Database) -> None:
    _run(database, "sync", "xx", alert_after=3)
    # A period given up (abandoned) and one failed with a retry to come: neither counts.
    given_up = _held(database, "sync", _period(2))
    writes.record(database, [Finish(given_up, RunStatus.ABANDONED, None)], [])
    retrying = _held(database, "sync", _period(3))
    writes.record(database, [Finish(retrying, RunStatus.FAILED, 1, BOOM, retry_in=60.0)], [])
    assert _events(database, "sync")[-1][1] == "retrying"
    _run(database, "sync", "x", first=4, alert_after=3)
    assert [event for event in _events(database, "sync") if event[1] == "failed"] == [
        (4, "failed", 3, "3 periods failed in a row; ValueError: boom")
    ]


def test_one_batch_with_several_outcomes_of_a_job_reads_them_in_order(database: Database) -> None:
    claimed = [_held(database, "burst", _period(n)) for n in range(6)]
    outcomes = [
        _outcome(claim, ok, 2, None)
        for claim, ok in zip(claimed, [False, False, False, True, False, False], strict=True)
    ]
    # Handed over newest first: they are written oldest first all the same.
    assert writes.record(database, outcomes[::-1], [])[0] == [True] * 6
    assert _events(database, "burst") == [
        (1, "failed", 2, "2 periods failed in a row; ValueError: boom"),
        (3, "recovered", 3, "after 3 failed period(s) in a row"),
        (5, "failed", 2, "2 periods failed in a row; ValueError: boom"),
    ]


def test_pause_after_failures_pauses_the_job_once_with_its_reason(database: Database) -> None:
    definition = stored_jobs.JobDefinitionRow("fragile", "* * * * *", "UTC", 30.0, None, 0, 60.0)
    stored_jobs.register(database, [definition])
    _run(database, "fragile", "xxx", alert_after=2, pause_after=4)
    assert not stored_jobs.all_jobs(database, ["fragile"])[0].paused
    _run(database, "fragile", "x", first=3, alert_after=2, pause_after=4)
    (row,) = stored_jobs.all_jobs(database, ["fragile"])
    assert row.paused
    assert row.pause_reason == "paused by the scheduler: 4 periods failed in a row"
    (pause,) = rows(database, "scheduler_pauses", job="fragile")
    assert pause["reason"] == row.pause_reason
    assert [event[1:3] for event in _events(database, "fragile")] == [
        ("failed", 2),
        ("paused", 4),
    ]
    # An operator resumes it: the failures that follow do not pause it again…
    stored_jobs.set_paused(database, "fragile", paused=True)  # already paused: no change
    assert stored_jobs.set_paused(database, "fragile", paused=False)
    assert stored_jobs.all_jobs(database, ["fragile"])[0].pause_reason is None
    _run(database, "fragile", "xxx", first=4, alert_after=2, pause_after=4)
    assert not stored_jobs.all_jobs(database, ["fragile"])[0].paused
    # …a success and four more failures do.
    _run(database, "fragile", ".xxxx", first=7, alert_after=2, pause_after=4)
    assert stored_jobs.all_jobs(database, ["fragile"])[0].paused
    kinds = [event[1] for event in _events(database, "fragile")]
    assert kinds == ["failed", "paused", "recovered", "failed", "paused"]


def test_an_operators_pause_has_no_reason(database: Database) -> None:
    definition = stored_jobs.JobDefinitionRow("calm", "* * * * *", "UTC", 30.0, None, 0, 60.0)
    stored_jobs.register(database, [definition])
    stored_jobs.set_paused(database, "calm", paused=True)
    (row,) = stored_jobs.all_jobs(database, ["calm"])
    assert row.paused
    assert row.pause_reason is None
    assert rows(database, "scheduler_pauses", job="calm")[0]["reason"] is None


def test_pause_after_failures_pauses_a_schedule(database: Database) -> None:
    register(database, {"tenant_report": tenant_report})
    store = Schedules(database)
    schedule = store.create("tenant-7:sync", "tenant_report", cron="* * * * *", args={"tenant": 7})
    _run(database, schedule.run_job, "xx", pause_after=2)
    paused = store.get("tenant-7:sync")
    assert paused is not None
    assert paused.paused
    assert paused.pause_reason == "paused by the scheduler: 2 periods failed in a row"
    assert [event[1] for event in _events(database, schedule.run_job)] == ["failed", "paused"]
    (finding,) = [
        f for f in check.gather(database).findings if f.problem is Problem.PAUSED_BY_FAILURES
    ]
    assert finding.job == "tenant_report"
    assert finding.detail.startswith("1 schedule(s) created at run time paused by the scheduler")
    resumed = store.resume("tenant-7:sync")
    assert not resumed.paused
    assert resumed.pause_reason is None
    assert EventKind.PAUSED.value == "paused"
