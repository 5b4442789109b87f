"""The catch-up policy, one rule at a time, with time as an argument."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler.catchup import Pause, plan
from scheduler.model import Spent
from scheduler.policy import Catchup, CatchupBudget, Policy
from scheduler.states import Reason

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
HOURS = [NOW - timedelta(hours=n) for n in range(30, 0, -1)]  # 30 h of hourly periods


def test_all_runs_every_period_in_the_window_oldest_first_and_misses_the_rest() -> None:
    result = plan(HOURS, NOW, Policy(catchup=Catchup.ALL))
    assert result.run == [p for p in HOURS if p >= NOW - timedelta(days=1)]
    assert result.run == sorted(result.run)
    assert result.missed == [p for p in HOURS if p < NOW - timedelta(days=1)]
    assert result.skip == []
    assert not result.capped
    assert result.handled_through == HOURS[-1]


def test_all_stops_at_the_cap_and_says_where() -> None:
    result = plan(HOURS, NOW, Policy(catchup=Catchup.ALL, catchup_limit=5))
    assert len(result.run) == 5
    assert result.capped
    assert result.handled_through == result.run[-1]
    assert all(p <= result.run[-1] for p in result.missed)


def test_latest_runs_only_the_newest() -> None:
    result = plan(HOURS, NOW, Policy(catchup=Catchup.LATEST))
    assert result.run == [HOURS[-1]]
    assert [p for p, _ in result.skip] == [p for p in HOURS[:-1] if p >= NOW - timedelta(days=1)]
    assert {reason for _, reason in result.skip} == {Reason.CATCHUP}


def test_none_runs_nothing() -> None:
    result = plan(HOURS, NOW, Policy(catchup=Catchup.NONE, catchup_window=timedelta(days=2)))
    assert result.run == []
    assert len(result.skip) == len(HOURS)
    assert result.missed == []


def test_paused_periods_are_skipped_and_never_caught_up() -> None:
    pause = Pause(NOW - timedelta(hours=5), NOW - timedelta(hours=2))
    result = plan(HOURS, NOW, Policy(catchup=Catchup.ALL), [pause])
    paused = [p for p, reason in result.skip if reason is Reason.PAUSED]
    assert paused == [p for p in HOURS if pause.covers(p)]
    assert len(paused) == 3
    assert not set(paused) & set(result.run)


def test_nothing_missing_plans_nothing() -> None:
    result = plan([], NOW, Policy())
    assert (result.run, result.skip, result.missed, result.handled_through) == ([], [], [], None)


BUDGET = CatchupBudget(runs=3, per=timedelta(hours=1))  # one start each 20 minutes


def test_a_budget_starts_the_oldest_now_keeps_its_share_waiting_and_defers_the_rest() -> None:
    recent = HOURS[-10:]
    result = plan(recent, NOW, Policy(catchup_budget=BUDGET))
    assert result.run == recent[:1]
    assert result.waiting == recent[1:3], "within the budget, started at its pace"
    assert result.next_start == NOW + timedelta(minutes=20)
    assert result.deferred == recent[3:], "past the budget: for an operator"
    assert result.skip == []
    assert result.missed == []


def test_a_budget_keeps_its_pace_after_the_last_start() -> None:
    recent = HOURS[-2:]
    spent = Spent(runs=1, last=NOW - timedelta(minutes=5))
    result = plan(recent, NOW, Policy(catchup_budget=BUDGET), spent=spent)
    assert result.run == [], "the last catch-up run started 5 minutes ago: 15 more to wait"
    assert result.waiting == recent
    assert result.next_start == NOW + timedelta(minutes=15)
    assert result.deferred == []


def test_a_spent_budget_defers_everything_and_starts_nothing() -> None:
    recent = HOURS[-4:]
    spent = Spent(runs=3, last=NOW - timedelta(minutes=50))
    result = plan(recent, NOW, Policy(catchup_budget=BUDGET), spent=spent)
    assert result.run == []
    assert result.waiting == []
    assert result.next_start is None
    assert result.deferred == recent


def test_a_budget_takes_only_what_catch_up_would_run() -> None:
    """Periods outside the window are missed, paused ones skipped, as without a budget;
    `latest` runs one period at most, and a budget of one defers nothing then."""
    result = plan(HOURS, NOW, Policy(catchup_budget=BUDGET))
    assert result.missed == [p for p in HOURS if p < NOW - timedelta(days=1)]
    assert len(result.run) + len(result.waiting) + len(result.deferred) == 24
    latest = plan(HOURS, NOW, Policy(catchup=Catchup.LATEST, catchup_budget=BUDGET))
    assert latest.run == [HOURS[-1]]
    assert latest.deferred == []
    assert latest.waiting == []
    none = plan(HOURS, NOW, Policy(catchup=Catchup.NONE, catchup_budget=BUDGET))
    assert none.run == []
    assert none.deferred == []


def test_no_budget_plans_as_before() -> None:
    result = plan(HOURS[-10:], NOW, Policy())
    assert result.run == HOURS[-10:]
    assert result.waiting == []
    assert result.deferred == []
    assert result.next_start is None


def test_a_fleet_budget_holds_beside_the_jobs_own() -> None:
    """Both allow a start, the smaller allowance decides, the longer pace waits."""
    recent = HOURS[-6:]
    fleet = CatchupBudget(runs=4, per=timedelta(hours=2))  # one each 30 minutes
    spent_by_fleet = Spent(runs=2, last=NOW - timedelta(minutes=25))
    result = plan(
        recent, NOW, Policy(catchup_budget=BUDGET), spent=Spent(), fleet=(fleet, spent_by_fleet)
    )
    assert result.run == [], "the fleet's last start was 25 minutes ago: 5 more to wait"
    assert result.waiting == recent[:2], "the fleet has 2 starts left, the job 3"
    assert result.deferred == recent[2:]
    assert result.next_start == NOW + timedelta(minutes=5)
    alone = plan(recent, NOW, Policy(), fleet=(fleet, Spent()))
    assert alone.run == recent[:1]
    assert alone.waiting == recent[1:4]
    assert alone.next_start == NOW + timedelta(minutes=30)


def test_a_fleet_budget_alone_is_kept_past_the_cap_on_a_pass() -> None:
    """With no budget of its own, a job whose missing periods outnumber its cap on a pass
    (`catchup_limit`) still starts them under the fleet's budget, one at its pace: the
    cap must not hand the whole pass to the runner before the budget is applied."""
    fleet = CatchupBudget(runs=4, per=timedelta(hours=2))
    result = plan(HOURS[-10:], NOW, Policy(catchup_limit=5), fleet=(fleet, Spent()))
    assert result.run == HOURS[-10:-9], "one start now, at the fleet's pace"
    assert result.waiting == HOURS[-9:-6]
    assert result.deferred == HOURS[-6:]
    assert not result.capped
