"""How a schedule created at run time moves through its periods, as pure functions.

A schedule's row holds where it stands: its trigger, `next_due` (the earliest period not
yet fired) and `owed`, the stretches of earlier triggers still to fire. The rule of the
code-declared jobs holds: a changed trigger keeps the old trigger's owed periods (those
at or before the change) and never runs the new one's past; a pause keeps what was owed
before it and fires nothing of its own stretch. `fire` says what one pass does with the
periods due by `now`: which to claim (on time, or caught up under the catch-up policy),
which to record skipped or missed, and where the schedule stands after.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler import catchup
from scheduler.model import Spent
from scheduler.policy import Catchup, CatchupBudget, Policy
from scheduler.states import Origin, Reason
from scheduler.triggers import Trigger, TriggerKind

# A period fired later than this after its instant passed while no node fired it: it
# goes through the catch-up policy (window, `all`/`latest`/`none`, limit), as the
# catch-up loop treats a code-declared job's missing periods.
LATE_AFTER = timedelta(seconds=60)
# Periods one pass handles for one schedule; the rest are handled by the next pass.
PERIODS_PER_PASS = 1000
_NO_DELAY = timedelta(0)


@dataclass(frozen=True)
class Owed:
    """A stretch still to fire: the periods of an earlier trigger after the stretch
    before it (or from the schedule's `next_due`) through `until`. A stretch with no
    trigger is a pause: nothing of it fires."""

    trigger: Trigger | None
    until: datetime


@dataclass(frozen=True)
class State:
    trigger: Trigger
    next_due: datetime | None
    owed: tuple[Owed, ...] = ()


@dataclass(frozen=True)
class Spending:
    """What the catch-up budgets over a schedule have spent, read when a pass has late
    periods to run: its own (None: its job has none), the fleet's (with the budget), and
    whether some of its periods already wait their pace (the oldest start first)."""

    own: Spent | None = None
    fleet: tuple[CatchupBudget, Spent] | None = None
    waiting: bool = False


@dataclass
class Firing:
    """What one pass does: periods to claim (with their origin), periods recorded
    skipped (with the reason) or missed, those within a catch-up budget that wait its
    pace (`paced`) and those past it (`deferred`), and the state after."""

    run: list[tuple[datetime, Origin]] = field(default_factory=list)
    skip: list[tuple[datetime, Reason]] = field(default_factory=list)
    missed: list[datetime] = field(default_factory=list)
    paced: list[datetime] = field(default_factory=list)
    deferred: list[datetime] = field(default_factory=list)
    state: State | None = None


def start(trigger: Trigger, now: datetime) -> State:
    """A new schedule fires its first period after the instant it is created; a one-off
    fires its instant, late if it is already past (the catch-up window decides)."""
    if trigger.kind is TriggerKind.AT:
        return State(trigger, trigger.at)
    return State(trigger, trigger.next_after(now))


def cut(
    state: State, at: datetime, trigger: Trigger | None = None, resume: datetime | None = None
) -> State:
    """The schedule changes at `at`: what its current trigger owes through `at` is kept,
    and from then on `trigger` (or the same one) fires its periods after `resume` (a
    pause resumed: the periods in between are the pause's, never fired)."""
    owed = list(state.owed)
    current_next = _after(state.trigger, owed[-1].until) if owed else state.next_due
    if current_next is not None and current_next <= at:
        owed.append(Owed(state.trigger, at))
    new = trigger if trigger is not None else state.trigger
    resume = resume if resume is not None and resume > at else at
    if not owed:
        return State(new, new.next_after(resume))
    if resume > at:
        owed.append(Owed(None, resume))
    first = state.next_due if state.owed else current_next
    return State(new, first, tuple(owed))


def fire(
    state: State,
    now: datetime,
    policy: Policy,
    limit: int = PERIODS_PER_PASS,
    *,
    delay: Callable[[datetime], timedelta] = lambda _: _NO_DELAY,
    spending: Callable[[], Spending] | None = None,
) -> Firing:
    """The periods due by `now`, oldest first, up to `limit`, sorted by what happens to
    each; and the state after them. `delay`: each period's jitter, the same on every
    node; a period is due once its delay after it has passed, and periods fire in
    order (one not yet due holds back the later ones). `spending`: given when a
    catch-up budget holds (the job's or the fleet's), read only if late periods are to
    run."""
    periods: list[datetime] = []
    owed = list(state.owed)
    cursor = state.next_due

    def due(period: datetime | None) -> bool:
        return period is not None and period + delay(period) <= now and len(periods) < limit

    while owed:
        stretch = owed[0]
        while cursor is not None and cursor <= stretch.until and due(cursor):
            periods.append(cursor)
            cursor = _after(stretch.trigger, cursor)
        if cursor is not None and cursor <= stretch.until:
            break  # stopped by `now` or the limit inside this stretch
        owed.pop(0)
        cursor = _after(owed[0].trigger if owed else state.trigger, stretch.until)
    if not owed:
        while due(cursor):
            assert cursor is not None
            periods.append(cursor)
            cursor = state.trigger.next_after(cursor)
    result = _sorted(periods, now, policy, delay, spending)
    result.state = State(state.trigger, cursor, tuple(owed))
    return result


def _after(trigger: Trigger | None, instant: datetime) -> datetime | None:
    return trigger.next_after(instant) if trigger is not None else None


def _sorted(
    periods: list[datetime],
    now: datetime,
    policy: Policy,
    delay: Callable[[datetime], timedelta],
    spending: Callable[[], Spending] | None = None,
) -> Firing:
    result = Firing()
    late = [period for period in periods if now - period - delay(period) > LATE_AFTER]
    on_time = [period for period in periods if now - period - delay(period) <= LATE_AFTER]
    if late:
        plan = _late_plan(late, now, policy, spending)
        result.paced, result.deferred = plan.waiting, plan.deferred
        result.run += [(period, Origin.CATCHUP) for period in plan.run]
        result.skip += plan.skip
        result.missed += plan.missed
        handled = set(plan.run) | {period for period, _ in plan.skip} | set(plan.missed)
        handled |= set(plan.waiting) | set(plan.deferred)
        # The cap on catch-up runs a pass (`catchup_limit`): the rest are recorded
        # skipped rather than left, so a pass always moves the schedule on.
        result.skip += [(period, Reason.CATCHUP) for period in late if period not in handled]
    result.run += [(period, Origin.SCHEDULE) for period in on_time]
    return result


def _late_plan(
    late: list[datetime],
    now: datetime,
    policy: Policy,
    spending: Callable[[], Spending] | None,
) -> catchup.Plan:
    """The catch-up policy over a schedule's late periods. Under a budget, those it
    starts now run, those within it wait their pace (written `deferred (paced)`: a
    schedule has no watermark to keep them behind, and its cursor moves on so that its
    live periods stay live), and those past it are deferred for an operator."""
    if spending is None or policy.catchup is not Catchup.ALL:
        return catchup.plan(late, now, replace(policy, catchup_budget=None))
    spent = spending()
    plan = catchup.plan(late, now, policy, spent=spent.own, fleet=spent.fleet)
    if spent.waiting:
        # Its periods already waiting start first: these join the queue behind them.
        plan.waiting, plan.run = plan.run + plan.waiting, []
    return plan


def policy_with(
    policy: Policy,
    catchup: str | None,
    window_seconds: float | None,
    limit: int | None,
    jitter_seconds: float | None = None,
) -> Policy:
    """A job's policy under a schedule's own catch-up and jitter choices (None: the
    job's)."""
    changes: dict[str, Any] = {}
    if jitter_seconds is not None:
        changes["jitter"] = timedelta(seconds=jitter_seconds)
    if catchup is not None:
        changes["catchup"] = Catchup(catchup)
    if window_seconds is not None:
        changes["catchup_window"] = timedelta(seconds=window_seconds)
    if limit is not None:
        changes["catchup_limit"] = limit
    return replace(policy, **changes) if changes else policy


# -- the state as the row stores it ------------------------------------------------


def trigger_columns(trigger: Trigger) -> dict[str, Any]:
    """A trigger as the schedule row's columns."""
    return {
        "trigger": trigger.kind.value,
        "cron": trigger.cron,
        "timezone": trigger.timezone,
        "every_seconds": int(trigger.every.total_seconds()) if trigger.every else None,
        "start_at": trigger.start,
        "once_at": trigger.at,
    }


def trigger_from(columns: dict[str, Any]) -> Trigger:
    """A trigger read back from its columns (they were checked when written)."""
    every = columns.get("every_seconds")
    return Trigger(
        TriggerKind(columns["trigger"]),
        cron=columns.get("cron"),
        timezone=columns.get("timezone") or "UTC",
        every=timedelta(seconds=every) if every else None,
        start=_instant(columns.get("start_at")),
        at=_instant(columns.get("once_at")),
    )


def owed_text(owed: tuple[Owed, ...]) -> str | None:
    """The owed stretches as JSON for the row; None when nothing is owed."""
    if not owed:
        return None
    return json.dumps(
        [
            {
                **{
                    name: value.isoformat() if isinstance(value, datetime) else value
                    for name, value in (
                        trigger_columns(item.trigger) if item.trigger is not None else {}
                    ).items()
                },
                "until": item.until.isoformat(),
            }
            for item in owed
        ]
    )


def owed_from(text: str | None) -> tuple[Owed, ...]:
    if not text:
        return ()
    return tuple(
        Owed(trigger_from(item) if "trigger" in item else None, _parse(item["until"]))
        for item in json.loads(text)
    )


def _parse(value: str) -> datetime:
    return datetime.fromisoformat(value).astimezone(UTC)


def _instant(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value.astimezone(UTC)
