"""The dead-man's switch as pure decisions: (jobs, runs, now) -> findings."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

from scheduler import calendars
from scheduler.check import (
    Problem,
    WatchedJob,
    alive,
    assess,
    calendars_ending,
    expected_period,
    failure_paused,
    is_lingering,
    lingering,
    overdue,
    recorded_problem,
)
from scheduler.cron import parse_schedule
from scheduler.model import JobRow
from scheduler.store.queries import NodeRow, RunRow, Success

NOW = datetime(2026, 3, 10, 12, 0, 30, tzinfo=UTC)
HOURLY = WatchedJob(
    name="hourly",
    schedule=parse_schedule("0 * * * *"),
    first_seen=datetime(2026, 3, 1, tzinfo=UTC),
    paused=False,
    alert_after=timedelta(minutes=5),
    retries=0,
)


def run(period: datetime, status: str, **fields: object) -> RunRow:
    values: dict[str, object] = {
        "id": "r1",
        "job": "hourly",
        "period": period,
        "status": status,
        "reason": None,
        "origin": "schedule",
        "attempt": 1,
        "holder": "node",
        "claimed_at": period,
        "started_at": None,
        "finished_at": None,
        "duration_ms": None,
        "lease_expires_at": None,
        "retry_at": None,
        "error_type": None,
        "error_message": None,
        "error_traceback": None,
    }
    values.update(fields)
    return RunRow(**values)  # type: ignore[arg-type]


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 3, 10, hour, minute, tzinfo=UTC)


def test_the_expected_period_is_the_newest_whose_grace_has_passed() -> None:
    assert expected_period(HOURLY, NOW) == at(11)
    assert expected_period(HOURLY, at(12, 5)) == at(12)
    assert expected_period(HOURLY, at(12, 4)) == at(11)


def test_nothing_is_expected_before_the_job_was_first_seen() -> None:
    fresh = replace(HOURLY, first_seen=at(11, 30))
    assert expected_period(fresh, NOW) is None
    assert expected_period(fresh, at(12, 6)) == at(12)


def test_a_paused_job_owes_nothing() -> None:
    assert expected_period(replace(HOURLY, paused=True), NOW) is None


def test_a_local_time_job_is_expected_at_its_utc_instant() -> None:
    stockholm = replace(HOURLY, schedule=parse_schedule("30 2 * * *", "Europe/Stockholm"))
    # 29 March 2026: 02:30 does not exist in Stockholm; the run is due at 03:00 CEST.
    assert expected_period(stockholm, datetime(2026, 3, 29, 6, tzinfo=UTC)) == datetime(
        2026, 3, 29, 1, 0, tzinfo=UTC
    )


def test_a_succeeded_period_is_not_overdue() -> None:
    success = Success(period=at(11), finished_at=at(11, 1))
    assert overdue(HOURLY, at(11), run(at(11), "succeeded"), success) is None


def test_a_later_success_covers_an_earlier_expected_period() -> None:
    success = Success(period=at(12), finished_at=at(12, 0))
    assert overdue(HOURLY, at(11), run(at(11), "failed"), success) is None


def test_a_period_with_no_run_is_overdue() -> None:
    success = Success(period=at(10), finished_at=at(10, 1))
    finding = overdue(HOURLY, at(11), None, success)
    assert finding is not None
    assert (finding.problem, finding.job, finding.period, finding.status) == (
        Problem.OVERDUE,
        "hourly",
        at(11),
        None,
    )
    assert finding.detail == "no success 5m after this period: no run was recorded"


def test_a_failed_or_still_running_period_is_overdue_and_says_why() -> None:
    failed = run(at(11), "failed", error_type="billing.CardDeclined", error_message="no\nmore")
    finding = overdue(HOURLY, at(11), failed, None)
    assert finding is not None
    assert finding.detail.endswith("its run is failed (CardDeclined: no)")
    assert overdue(HOURLY, at(11), run(at(11), "running"), None) is not None


def test_a_period_skipped_for_overlap_is_overdue_but_one_skipped_while_paused_is_not() -> None:
    overlap = run(at(11), "skipped", reason="overlap")
    finding = overdue(HOURLY, at(11), overlap, None)
    assert finding is not None
    assert finding.reason == "overlap"
    assert overdue(HOURLY, at(11), run(at(11), "skipped", reason="paused"), None) is None


def test_a_period_on_a_day_its_calendar_excludes_is_not_overdue() -> None:
    holiday = run(at(11), "skipped", reason="calendar")
    assert overdue(HOURLY, at(11), holiday, None) is None


def test_a_calendar_whose_dates_end_within_30_days_is_a_finding() -> None:
    kept = '[{"name": "holidays", "last": "2026-04-01"}, {"name": "weekends", "last": null}]'
    soon = replace(HOURLY, calendars=tuple(calendars.stored(kept)))
    later = replace(soon, name="later", calendars=(calendars.Stored("x", date(2026, 6, 1)),))
    (finding,) = calendars_ending([soon, later, HOURLY], NOW)
    assert (finding.problem, finding.job) == (Problem.CALENDAR_ENDING, "hourly")
    assert finding.period == datetime(2026, 4, 1, tzinfo=UTC)
    assert finding.detail.startswith("calendar 'holidays' lists days up to 2026-04-01 only")


def test_a_job_paused_by_a_failure_streak_is_a_finding_and_one_an_operator_paused_is_not() -> None:
    streak = "paused by the scheduler: 5 periods failed in a row"
    by_failures = replace(HOURLY, paused=True, pause_reason=streak, paused_at=at(10))
    by_operator = replace(HOURLY, name="calm", paused=True, paused_at=at(10))
    (finding,) = failure_paused([by_failures, by_operator], {})
    assert (finding.problem, finding.job, finding.period) == (
        Problem.PAUSED_BY_FAILURES,
        "hourly",
        at(10),
    )
    assert finding.detail == f"{streak}; fix it, then `scheduler resume hourly`"


def test_failed_timed_out_missed_and_given_up_runs_are_problems() -> None:
    for status in ("failed", "timed_out", "missed", "abandoned"):
        finding = recorded_problem(run(at(9), status), retries=0)
        assert finding is not None
        assert finding.problem == Problem(status)
    for status in ("succeeded", "skipped", "running"):
        assert recorded_problem(run(at(9), status), retries=0) is None


def test_an_abandoned_run_waiting_for_its_next_attempt_is_not_a_problem() -> None:
    given_back = run(at(9), "abandoned", reason="shutdown", retry_at=at(9, 1))
    assert recorded_problem(given_back, retries=0) is None


def test_a_failed_run_waiting_for_its_retry_is_not_yet_a_problem() -> None:
    waiting = run(at(9), "failed", retry_at=at(9, 1), attempt=1)
    assert recorded_problem(waiting, retries=2) is None
    assert recorded_problem(replace(waiting, attempt=3), retries=2) is not None
    assert recorded_problem(replace(waiting, retry_at=None), retries=2) is not None


def test_assess_lists_overdue_first_and_never_the_same_period_twice() -> None:
    other = replace(HOURLY, name="other")
    failed_now = run(at(11), "failed", error_type="E", error_message="boom")
    older_miss = run(at(3), "missed", reason="window")
    stranger = run(at(3), "failed", job="removed-job")
    findings = assess(
        [HOURLY, other],
        {"hourly": at(11), "other": at(11)},
        {"hourly": failed_now},
        {"other": Success(period=at(11), finished_at=at(11, 2))},
        [failed_now, older_miss, stranger],
    )
    assert [(f.problem, f.job, f.period) for f in findings] == [
        (Problem.OVERDUE, "hourly", at(11)),
        (Problem.MISSED, "hourly", at(3)),
    ]


def test_a_timed_out_run_whose_lease_is_still_held_lingers() -> None:
    """Its function still runs in its thread (the holder keeps the lease until it
    returns); a lease that ran out is a dead holder's, and a lease of a run in hand is no
    timeout at all."""
    held = run(at(9), "timed_out", lease_expires_at=NOW + timedelta(seconds=20))
    assert is_lingering(held, NOW)
    assert not is_lingering(replace(held, lease_expires_at=NOW - timedelta(seconds=1)), NOW)
    assert not is_lingering(replace(held, lease_expires_at=None), NOW)
    assert not is_lingering(replace(held, status="running"), NOW)


def test_a_lingering_run_says_how_long_it_has_run_past_its_timeout() -> None:
    held = run(
        at(9),
        "timed_out",
        started_at=at(9),
        duration_ms=30_000,
        lease_expires_at=at(12, 1),
        holder="node-b",
    )
    finding = lingering(held, at(12))
    assert (finding.problem, finding.job, finding.period, finding.status) == (
        Problem.LINGERING,
        "hourly",
        at(9),
        "timed_out",
    )
    assert finding.detail == (
        "timed out after 30.0s and still running on node-b (3h00m since it started): "
        "later periods are skipped until it returns"
    )


def test_assess_lists_a_lingering_run_instead_of_its_timeout_and_only_for_watched_jobs() -> None:
    held = run(at(9), "timed_out", started_at=at(9), lease_expires_at=NOW + timedelta(minutes=1))
    stranger = replace(held, job="removed-job")
    findings = assess(
        [HOURLY],
        {},
        {},
        {},
        [held, stranger],
        lingering_now=[lingering(held, NOW), lingering(stranger, NOW)],
    )
    assert [(f.problem, f.job, f.period) for f in findings] == [
        (Problem.LINGERING, "hourly", at(9)),
    ]


def test_an_old_job_row_without_a_stored_grace_gets_one_lease_plus_timeout() -> None:
    row = JobRow(
        name="legacy",
        cron="* * * * *",
        timezone="UTC",
        first_seen=at(1),
        last_seen=at(1),
        paused=False,
        paused_at=None,
        lease_seconds=None,
        timeout_seconds=60,
        retries=None,
        alert_after_seconds=None,
    )
    job = WatchedJob.from_row(row)
    assert (job.alert_after, job.retries) == (timedelta(seconds=90), 0)


def test_a_node_is_alive_while_it_beats_and_has_not_stopped() -> None:
    node = NodeRow("n", "n", "h", 1, "0.1.0", at(11), heartbeat_at=NOW, stopped_at=None)
    assert alive(node, NOW + timedelta(seconds=29))
    assert not alive(node, NOW + timedelta(seconds=31))
    assert not alive(replace(node, stopped_at=NOW), NOW)


def test_a_period_waiting_for_its_pool_past_its_grace_is_overdue_and_says_so() -> None:
    waiting = run(at(11), "claimed", reason="pool")
    finding = overdue(HOURLY, at(11), waiting, None)
    assert finding is not None
    assert finding.detail.endswith("its run is waiting (pool)")
