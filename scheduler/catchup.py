"""Catch-up policy as a pure function: which missing periods run, which are skipped,
which are recorded missed.

Time is an argument: `now` comes from the caller, so every rule is tested without a
clock or a database.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from scheduler.model import Spent
from scheduler.policy import Catchup, CatchupBudget, Policy
from scheduler.states import Reason


@dataclass(frozen=True)
class Pause:
    """A stretch of time the job was paused: [start, end), end None while still paused."""

    start: datetime
    end: datetime | None

    def covers(self, period: datetime) -> bool:
        return self.start <= period and (self.end is None or period < self.end)


@dataclass
class Plan:
    """What one catch-up pass does with the periods it found missing."""

    run: list[datetime] = field(default_factory=list)
    # Within the budget but not started yet, to keep its pace: left for a later pass
    # (the watermark stays before the first), which may start one at `next_start`.
    waiting: list[datetime] = field(default_factory=list)
    next_start: datetime | None = None
    # Past the budget: recorded `deferred (budget)`.
    deferred: list[datetime] = field(default_factory=list)
    skip: list[tuple[datetime, Reason]] = field(default_factory=list)
    missed: list[datetime] = field(default_factory=list)
    # True when the cap on claims per pass cut the plan short: every missing period up
    # to `handled_through` is handled, later ones wait for the next pass.
    capped: bool = False
    handled_through: datetime | None = None


def plan(
    missing: Sequence[datetime],
    now: datetime,
    policy: Policy,
    pauses: Sequence[Pause] = (),
    excluded: Callable[[datetime], bool] = lambda period: False,
    *,
    spent: Spent | None = None,
    fleet: tuple[CatchupBudget, Spent] | None = None,
) -> Plan:
    """Sort missing periods (ascending) into run, skipped and missed under the job's policy.

    - on a day the job's calendar excludes: skipped (reason calendar), whatever its age;
    - older than `catchup_window`: missed (reason window), never run;
    - while paused: skipped (reason paused), never caught up after resume;
    - `all`: the oldest run first, at most `catchup_limit` a pass;
      `latest`: only the newest runs, the rest are skipped (reason catchup);
      `none`: all are skipped (reason catchup);
    - with a `catchup_budget` of K per W, those to run are started oldest first, one
      per W/K, while fewer than K catch-up runs were claimed in the last W (`spent`);
      those within it wait their turn, those past it are deferred (reason budget).
      A `fleet` budget (the fleet's own, and what every job's catch-up spent of it)
      holds as well: both allow a start, and the smaller allowance decides.
    """
    result = Plan()
    window_start = now - policy.catchup_window
    eligible: list[datetime] = []
    for period in missing:
        if excluded(period):
            result.skip.append((period, Reason.CALENDAR))
        elif period < window_start:
            result.missed.append(period)
        elif any(pause.covers(period) for pause in pauses):
            result.skip.append((period, Reason.PAUSED))
        else:
            eligible.append(period)
    if policy.catchup is Catchup.ALL:
        # A budget (the job's or the fleet's) starts one at a time and defers the rest:
        # no cap on a pass needed, and a cap would start its share before the budget.
        budgeted = policy.catchup_budget is not None or fleet is not None
        limit = len(eligible) if budgeted else policy.catchup_limit
        result.run = eligible[:limit]
        if len(eligible) > limit:
            last = result.run[-1]
            result.missed = [period for period in result.missed if period <= last]
            result.skip = [(period, reason) for period, reason in result.skip if period <= last]
            result.capped, result.handled_through = True, last
            return result
    elif policy.catchup is Catchup.LATEST:
        result.run = eligible[-1:]
        result.skip += [(period, Reason.CATCHUP) for period in eligible[:-1]]
    else:
        result.skip += [(period, Reason.CATCHUP) for period in eligible]
    result.skip.sort()
    result.handled_through = missing[-1] if missing else None
    budgets = [] if policy.catchup_budget is None else [(policy.catchup_budget, spent or Spent())]
    budgets += [fleet] if fleet is not None else []
    if budgets and policy.catchup is Catchup.ALL:
        _keep_budgets(result, now, budgets)
    return result


def _keep_budgets(
    result: Plan, now: datetime, budgets: Sequence[tuple[CatchupBudget, Spent]]
) -> None:
    """Split the periods to run into those started now, waiting and deferred."""
    within = min(max(0, budget.runs - spent.runs) for budget, spent in budgets)
    candidates, result.deferred = result.run[:within], result.run[within:]
    next_start = max(
        now if spent.last is None else spent.last + budget.pace for budget, spent in budgets
    )
    if candidates and next_start <= now:
        result.run, result.waiting = candidates[:1], candidates[1:]
    else:
        result.run, result.waiting = [], candidates
    if result.waiting:
        pace = max(budget.pace for budget, _ in budgets)
        result.next_start = max(now, next_start) if not result.run else now + pace


def next_start(now: datetime, budgets: Sequence[tuple[CatchupBudget, Spent]]) -> datetime:
    """When the next catch-up run may start under these budgets: each one's pace after
    its last start (now if none started), the latest of them."""
    return max(
        (now if spent.last is None else spent.last + budget.pace for budget, spent in budgets),
        default=now,
    )
