"""Upcoming periods: whole instants popped at once, and jitter that is the same on every node."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler.node.upcoming import Upcoming, jitter_delay
from scheduler.registry import Job, job

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def _next_due(upcoming: Upcoming) -> datetime | None:
    following = upcoming.next_instant()
    return following[0] if following else None


def _pop_due(upcoming: Upcoming, now: datetime) -> list[tuple[Job, datetime]]:
    """The (job, period) pairs due by `now`, as the daemon takes them off the heap."""
    return [(job, period) for _, job, period in upcoming.pop_until(now)]


def _job(name: str, cron: str = "0 * * * *", jitter: str | int = 0) -> Job:
    return job(cron, name=name, jitter=jitter)(lambda: None)


def test_jobs_due_at_the_same_instant_pop_together_and_reschedule() -> None:
    jobs = [_job(f"hourly-{n}") for n in range(50)] + [_job("daily", "0 0 * * *")]
    upcoming = Upcoming(jobs, NOW)
    assert _next_due(upcoming) == NOW + timedelta(hours=1)
    assert _pop_due(upcoming, NOW + timedelta(minutes=59)) == []
    due = _pop_due(upcoming, NOW + timedelta(hours=1))
    assert len(due) == 50
    assert {period for _, period in due} == {NOW + timedelta(hours=1)}
    assert _next_due(upcoming) == NOW + timedelta(hours=2)


def test_jitter_is_deterministic_and_within_range() -> None:
    billing = _job("billing", jitter="5m")
    period = NOW + timedelta(hours=1)
    delay = jitter_delay(billing, period)
    assert delay == jitter_delay(_job("billing", jitter="5m"), period)
    assert timedelta(0) <= delay < timedelta(minutes=5)
    assert jitter_delay(_job("no-jitter"), period) == timedelta(0)


def test_jitter_spreads_jobs_sharing_a_schedule() -> None:
    period = NOW + timedelta(hours=1)
    delays = sorted(jitter_delay(_job(f"report-{n}", jitter="5m"), period) for n in range(200))
    assert delays[0] < timedelta(seconds=30)
    assert delays[-1] > timedelta(minutes=4, seconds=30)
    assert len(set(delays)) > 190


def test_a_jittered_period_is_claimed_late_but_keeps_its_instant() -> None:
    spread = _job("spread", jitter="10m")
    upcoming = Upcoming([spread], NOW - timedelta(minutes=1))
    claim_at = NOW + jitter_delay(spread, NOW)
    assert _next_due(upcoming) == claim_at
    assert _pop_due(upcoming, claim_at - timedelta(milliseconds=1)) == []
    assert _pop_due(upcoming, claim_at) == [(spread, NOW)]


def test_a_period_whose_jitter_has_not_passed_at_start_is_still_claimed() -> None:
    spread = _job("spread", jitter="10m")
    period = NOW  # due now, to be claimed up to ten minutes later
    upcoming = Upcoming([spread], NOW + jitter_delay(spread, period) - timedelta(seconds=1))
    assert _pop_due(upcoming, NOW + timedelta(minutes=10)) == [(spread, period)]


def test_periods_due_together_are_popped_before_their_jobs_are_rescheduled() -> None:
    """The daemon claims what pop_until returned before the next fire times are computed;
    a job with several periods due gives them one call at a time, in order."""
    ticker = _job("ticker", "* * * * * *")
    upcoming = Upcoming([ticker], NOW)
    later = NOW + timedelta(seconds=3)
    popped = [_pop_due(upcoming, later) for _ in range(4)]
    assert popped == [[(ticker, NOW + timedelta(seconds=s))] for s in (1, 2, 3)] + [[]]
    assert _next_due(upcoming) == NOW + timedelta(seconds=4)


def test_the_next_instant_says_how_many_periods_are_due_at_it() -> None:
    """What the daemon reads to decide whether an instant is worth preparing ahead."""
    jobs = [_job(f"hourly-{n}") for n in range(120)] + [_job("daily", "0 0 * * *")]
    upcoming = Upcoming(jobs, NOW)
    assert upcoming.next_instant() == (NOW + timedelta(hours=1), 120)
    popped = upcoming.pop_until(NOW + timedelta(hours=1))
    assert {(at, period) for at, _, period in popped} == {
        (NOW + timedelta(hours=1), NOW + timedelta(hours=1))
    }
    assert len(popped) == 120
    assert upcoming.next_instant() == (NOW + timedelta(hours=2), 120)
    for _ in range(10):  # 14:00 to 23:00
        upcoming.pop_until(_next_due(upcoming) or NOW)
    assert upcoming.next_instant() == (datetime(2026, 12, 1, 0, 0, tzinfo=UTC), 121)


def test_a_jittered_period_pops_with_its_claim_time_and_counts_there() -> None:
    spread = _job("spread", jitter="10m")
    upcoming = Upcoming([spread], NOW - timedelta(minutes=1))
    claim_at = NOW + jitter_delay(spread, NOW)
    assert upcoming.next_instant() == (claim_at, 1)
    assert upcoming.pop_until(claim_at) == [(claim_at, spread, NOW)]
