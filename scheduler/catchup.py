"""Catch-up policy as a pure function: which missing periods run, which are skipped,
which are recorded missed.

Time is an argument: `now` comes from the caller, so every rule is tested without a
clock or a database.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from scheduler.policy import Catchup, Policy
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
) -> Plan:
    """Sort missing periods (ascending) into run, skipped and missed under the job's policy.

    - on a day the job's calendar excludes: skipped (reason calendar), whatever its age;
    - older than `catchup_window`: missed (reason window), never run;
    - while paused: skipped (reason paused), never caught up after resume;
    - `all`: the oldest run first, at most `catchup_limit` a pass;
      `latest`: only the newest runs, the rest are skipped (reason catchup);
      `none`: all are skipped (reason catchup).
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
        result.run = eligible[: policy.catchup_limit]
        if len(eligible) > policy.catchup_limit:
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
    return result
