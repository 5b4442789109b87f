"""How a schedule created at run time moves through its periods (`scheduler.firing`):
a changed trigger keeps what the old one owes and never runs the new one's past; a
pause's own periods never fire; late periods go through the catch-up policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler import firing
from scheduler.model import Spent
from scheduler.policy import Catchup, CatchupBudget, Policy
from scheduler.states import Origin, Reason
from scheduler.triggers import Trigger, parse_trigger

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def _every(minutes: int, start: datetime = T0) -> Trigger:
    return parse_trigger("k", every=f"{minutes}m", start=start, now=start)


def _periods(result: firing.Firing) -> list[datetime]:
    return [period for period, _ in result.run]


def test_a_new_schedule_fires_its_first_period_after_its_creation() -> None:
    state = firing.start(_every(1), T0 + 30 * timedelta(seconds=1))
    assert state.next_due == T0 + MINUTE
    fired = firing.fire(state, T0 + 3 * MINUTE, Policy())
    assert _periods(fired) == [T0 + MINUTE, T0 + 2 * MINUTE, T0 + 3 * MINUTE]
    # 09:01 fired two minutes late went through the catch-up policy; the others are on time.
    assert [origin for _, origin in fired.run] == [Origin.CATCHUP, Origin.SCHEDULE, Origin.SCHEDULE]
    assert fired.state is not None
    assert fired.state.next_due == T0 + 4 * MINUTE


def test_a_pass_fires_each_period_once_and_moves_on() -> None:
    state = firing.start(_every(1), T0)
    first = firing.fire(state, T0 + 2 * MINUTE, Policy())
    assert first.state is not None
    second = firing.fire(first.state, T0 + 2 * MINUTE, Policy())
    assert second.run == []
    third = firing.fire(first.state, T0 + 3 * MINUTE, Policy())
    assert _periods(third) == [T0 + 3 * MINUTE]


def test_a_changed_trigger_keeps_what_the_old_owes_and_never_runs_the_new_ones_past() -> None:
    # Every 10 min from 09:00; its 09:10 and 09:20 are owed (no node fired them) when,
    # at 09:25, it becomes every 7 min from 09:00 (whose 09:07, 09:14, 09:21 are past).
    state = firing.start(_every(10), T0)
    assert state.next_due == T0 + 10 * MINUTE
    changed = firing.cut(state, T0 + 25 * MINUTE, trigger=_every(7))
    fired = firing.fire(changed, T0 + 30 * MINUTE, Policy())
    assert _periods(fired) == [T0 + 10 * MINUTE, T0 + 20 * MINUTE, T0 + 28 * MINUTE]
    assert fired.state is not None
    assert fired.state.owed == ()
    assert fired.state.next_due == T0 + 35 * MINUTE


def test_a_change_with_nothing_owed_starts_the_new_trigger_after_the_change() -> None:
    state = firing.start(_every(10), T0 + 5 * MINUTE)
    changed = firing.cut(state, T0 + 6 * MINUTE, trigger=_every(3))
    assert changed.owed == ()
    assert changed.next_due == T0 + 9 * MINUTE


def test_two_changes_while_nothing_fired_keep_each_triggers_owed_stretch() -> None:
    state = firing.start(_every(10), T0)
    first = firing.cut(state, T0 + 15 * MINUTE, trigger=_every(4))  # owes 09:10
    second = firing.cut(first, T0 + 19 * MINUTE, trigger=_every(6))  # 4-min owes 09:16
    fired = firing.fire(second, T0 + 25 * MINUTE, Policy())
    assert _periods(fired) == [T0 + 10 * MINUTE, T0 + 16 * MINUTE, T0 + 24 * MINUTE]


def test_a_pauses_own_periods_never_fire_but_what_was_owed_before_it_does() -> None:
    state = firing.start(_every(5), T0)  # 09:05 due
    # Paused at 09:12 with 09:05 and 09:10 owed; resumed at 09:31.
    resumed = firing.cut(state, T0 + 12 * MINUTE, resume=T0 + 31 * MINUTE)
    fired = firing.fire(resumed, T0 + 36 * MINUTE, Policy())
    assert _periods(fired) == [T0 + 5 * MINUTE, T0 + 10 * MINUTE, T0 + 35 * MINUTE]


def test_a_resume_with_nothing_owed_fires_from_the_resume() -> None:
    state = firing.start(_every(5), T0 + 11 * MINUTE)  # next 09:15
    resumed = firing.cut(state, T0 + 12 * MINUTE, resume=T0 + 40 * MINUTE)
    assert resumed.next_due == T0 + 45 * MINUTE


def test_late_periods_follow_the_catch_up_policy() -> None:
    state = firing.start(_every(1), T0)
    now = T0 + 10 * MINUTE
    latest = firing.fire(state, now, Policy(catchup=Catchup.LATEST))
    late = [T0 + n * MINUTE for n in range(1, 9)]
    # The periods within LATE_AFTER of now are on time; of the late ones only the newest
    # runs, and the rest are recorded skipped.
    assert latest.run == [
        (late[-1], Origin.CATCHUP),
        (T0 + 9 * MINUTE, Origin.SCHEDULE),
        (T0 + 10 * MINUTE, Origin.SCHEDULE),
    ]
    assert latest.skip == [(period, Reason.CATCHUP) for period in late[:-1]]
    window = firing.fire(state, now, Policy(catchup_window=timedelta(minutes=5)))
    assert window.missed == [T0 + n * MINUTE for n in range(1, 5)]
    assert _periods(window)[0] == T0 + 5 * MINUTE


def test_a_pass_is_bounded_and_the_next_goes_on_where_it_stopped() -> None:
    state = firing.start(parse_trigger("k", every=1, start=T0, now=T0), T0)
    now = T0 + 30 * timedelta(seconds=1)
    first = firing.fire(state, now, Policy(), limit=10)
    assert len(first.run) == 10
    assert first.state is not None
    rest = firing.fire(first.state, now, Policy(), limit=100)
    assert len(rest.run) == 20
    assert _periods(first)[-1] + timedelta(seconds=1) == _periods(rest)[0]


def test_a_one_off_fires_once_then_has_nothing_due() -> None:
    at = T0 + 3 * MINUTE
    state = firing.start(parse_trigger("k", at=at, now=T0), T0)
    fired = firing.fire(state, at, Policy())
    assert _periods(fired) == [at]
    assert fired.state is not None
    assert fired.state.next_due is None


def test_the_owed_stretches_survive_the_row() -> None:
    state = firing.cut(firing.start(_every(10), T0), T0 + 25 * MINUTE, trigger=_every(7))
    text = firing.owed_text(state.owed)
    assert firing.owed_from(text) == state.owed
    assert firing.trigger_from(firing.trigger_columns(_every(7))) == _every(7)
    paused = firing.cut(state, T0 + 26 * MINUTE, resume=T0 + 40 * MINUTE)
    assert firing.owed_from(firing.owed_text(paused.owed)) == paused.owed


def test_jitter_delays_each_period_and_lateness_counts_from_the_delayed_instant() -> None:
    delays = {T0 + MINUTE: timedelta(seconds=40), T0 + 2 * MINUTE: timedelta(seconds=5)}

    def delay(period: datetime) -> timedelta:
        return delays.get(period, timedelta(0))

    state = firing.start(_every(1), T0)
    # 09:01 fires at 09:01:40: at 09:01:30 nothing is due, and it holds 09:02 back.
    early = firing.fire(state, T0 + MINUTE + timedelta(seconds=30), Policy(), delay=delay)
    assert early.run == []
    assert early.state == state
    # At 09:02:30, 09:01 is 90 s past its period but 50 s past its delayed instant: on time.
    fired = firing.fire(state, T0 + 2 * MINUTE + timedelta(seconds=30), Policy(), delay=delay)
    assert fired.run == [(T0 + MINUTE, Origin.SCHEDULE), (T0 + 2 * MINUTE, Origin.SCHEDULE)]
    latest = firing.fire(state, T0 + 3 * MINUTE, Policy(), delay=delay)
    assert latest.run[0] == (T0 + MINUTE, Origin.CATCHUP)


BUDGET = CatchupBudget(3, timedelta(hours=1))  # one start each 20 minutes


def test_a_budget_starts_the_oldest_late_period_paces_its_share_and_defers_the_rest() -> None:
    """Ten minutes of an every-minute schedule owed: under a budget of 3 an hour the
    oldest starts now, two wait their pace, the rest wait for an operator; the periods
    within LATE_AFTER are live and run as ever, and the cursor moves past them all."""
    state = firing.start(_every(1), T0)
    now = T0 + 10 * MINUTE
    fired = firing.fire(
        state, now, Policy(catchup_budget=BUDGET), spending=lambda: firing.Spending(own=Spent())
    )
    late = [T0 + n * MINUTE for n in range(1, 10) if now - T0 - n * MINUTE > firing.LATE_AFTER]
    assert fired.run[0] == (late[0], Origin.CATCHUP)
    assert fired.paced == late[1:3]
    assert fired.deferred == late[3:]
    assert [p for p, origin in fired.run if origin is Origin.SCHEDULE] == [
        T0 + 9 * MINUTE,
        T0 + 10 * MINUTE,
    ], "live periods are not held behind the catch-up"
    assert fired.skip == []
    assert fired.missed == []
    assert fired.state is not None
    assert fired.state.next_due == T0 + 11 * MINUTE


def test_periods_already_waiting_their_pace_start_first() -> None:
    """Two of the schedule's periods wait (counted as spent): one start is left, and it
    queues behind them instead of starting now."""
    state = firing.start(_every(1), T0)
    now = T0 + 10 * MINUTE
    waiting = firing.Spending(own=Spent(runs=2), waiting=True)
    fired = firing.fire(state, now, Policy(catchup_budget=BUDGET), spending=lambda: waiting)
    assert [origin for _, origin in fired.run] == [Origin.SCHEDULE, Origin.SCHEDULE]
    assert fired.paced == [T0 + MINUTE]
    assert fired.deferred == [T0 + n * MINUTE for n in range(2, 9)]


def test_a_fleet_budget_paces_a_schedule_without_a_budget_of_its_own() -> None:
    state = firing.start(_every(1), T0)
    now = T0 + 10 * MINUTE
    fleet = (CatchupBudget(2, timedelta(hours=1)), Spent(runs=1, last=now - MINUTE))
    fired = firing.fire(state, now, Policy(), spending=lambda: firing.Spending(fleet=fleet))
    assert [origin for _, origin in fired.run] == [Origin.SCHEDULE, Origin.SCHEDULE]
    assert fired.paced == [T0 + MINUTE], "one start left in the fleet's, not yet at its pace"
    assert fired.deferred == [T0 + n * MINUTE for n in range(2, 9)]


def test_a_budget_is_not_read_for_periods_on_time_nor_for_latest_or_none() -> None:
    """The budget is read only when late periods are to run under `all`: a schedule
    firing on time costs no read, and `latest` and `none` plan as without a budget."""

    def unread() -> firing.Spending:
        raise AssertionError("the budget was read")

    state = firing.start(_every(1), T0)
    on_time = firing.fire(state, T0 + MINUTE, Policy(catchup_budget=BUDGET), spending=unread)
    assert on_time.run == [(T0 + MINUTE, Origin.SCHEDULE)]
    assert on_time.paced == []
    assert on_time.deferred == []
    now = T0 + 10 * MINUTE
    latest = firing.fire(
        state, now, Policy(catchup=Catchup.LATEST, catchup_budget=BUDGET), spending=unread
    )
    assert (T0 + 8 * MINUTE, Origin.CATCHUP) in latest.run
    assert latest.paced == []
    assert latest.deferred == []
