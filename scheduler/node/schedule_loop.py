"""The schedules loop: fires the schedules created at run time whose job this node runs.

It sleeps until the earliest such schedule is due, or until a change is heard (a
`schedule` notification, or the heartbeat's reading of the next due instant, which
stands in for a sweep in case a notification was missed; in poll mode it looks every
second), then passes over the due
rows in batches (`store.schedules.fire`: one transaction each, rows other nodes are
firing skipped), hands the periods it claimed to the dispatcher and logs them as the
daemon logs its own claims. Nothing of the schedules is kept between passes: a node
holds the rows of one pass, whatever the number of schedules.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from functools import partial

from structlog.typing import FilteringBoundLogger

from scheduler import firing, metrics
from scheduler.model import Due, Entry, Spent
from scheduler.node.claimed import log_claims, log_deferred
from scheduler.node.upcoming import jitter_delay
from scheduler.node.wakeups import Wakeups
from scheduler.policy import CatchupBudget
from scheduler.registry import Job
from scheduler.run.dispatcher import Dispatcher
from scheduler.run.job_table import JobTable
from scheduler.states import Origin, Reason, RunStatus
from scheduler.store import deferred
from scheduler.store import schedules as stored
from scheduler.store.database import Connection, Database
from scheduler.store.faults import StoreError
from scheduler.store.schedules import Fired, ScheduleRow
from scheduler.supervision import SideThread

# Without notifications (SQLite, a pooler): how often to look for changes.
POLL_S = 1.0
# With them: the heartbeat reads when the next schedule is due and wakes the loop, so
# an idle node costs no transaction of the loop's own; a long sleep all the same.
SWEEP_S = 3600.0
# Runs a node holds at most before it fires more: due rows it leaves stay due for the
# other nodes (whose passes skip nothing it locks) or for its next pass, so a peak of
# 100,000 schedules spreads over the fleet instead of piling up in one node's memory.
IN_HAND_MAX = 2000
# How soon to look again when this node had its hands full.
FULL_S = 0.05


class ScheduleLoop(SideThread):
    def __init__(
        self,
        *,
        database: Database,
        table: JobTable,
        dispatcher: Dispatcher,
        node_id: str,
        stop: threading.Event,
        log: FilteringBoundLogger,
        wakeups: Wakeups | None = None,
        fleet_budget: CatchupBudget | None = None,
        paced: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__("schedules", stop, log)
        self._database = database
        # The fleet's catch-up budget (`--catchup-budget`), which schedules spend too.
        self._fleet_budget = fleet_budget
        # Told when a pass wrote periods to wait for a budget's pace (the catch-up loop
        # claims them): so that the first starts at its pace, not at the next sweep.
        self._paced = paced
        # The last pass's view of the budgets, and what it decided for each schedule it
        # took (logged once it committed).
        self._budgets = PassBudgets(database, fleet_budget)
        self._table = table
        self._dispatcher = dispatcher
        self._node_id = node_id
        self._wakeups = wakeups
        if wakeups is not None:
            wakeups.schedules = self
        self._jobs = sorted(table.code)

    def step(self) -> float:
        idle = POLL_S if self._wakeups is None or not self._wakeups.listening else SWEEP_S
        try:
            # Asked first: a sweep that finds nothing due costs one read, not a pass.
            wait = stored.seconds_until_due(self._database, self._jobs)
            if wait is not None and wait <= 0:
                if self._fire():
                    return FULL_S
                wait = stored.seconds_until_due(self._database, self._jobs)
        except StoreError as error:
            self._log.warning("schedules_failed", error=error.message)
            return POLL_S
        if wait is None:
            return idle
        return min(max(wait, 0.0), idle)

    def _fire(self) -> bool:
        """Passes over the due schedules until none is left or this node's hands are
        full (True: look again in a moment)."""
        while not self._stopping.is_set():
            room = IN_HAND_MAX - self._dispatcher.in_hand()
            if room <= 0:
                return True
            limit = min(room, stored.ROWS_PER_PASS)
            self._budgets = PassBudgets(self._database, self._fleet_budget)
            done = stored.fire(
                self._database,
                self._node_id,
                self._jobs,
                self._plan,
                limit=limit,
                returned=self._dispatcher.returned(),
            )
            self._dispatch(done)
            if len(done.rows) < limit:
                return False
        return False

    def _plan(self, row: ScheduleRow, now: datetime, connection: Connection) -> Fired | None:
        return self._budgets.plan(self._table, row, now, connection)

    def _dispatch(self, done: stored.Pass) -> None:
        result = done.result
        if not done.rows:
            return
        self._said(done.rows)
        log_claims(self._log, result)
        metrics.record_claims(len(result.won) + len(result.skipped), result.won, result.skipped)
        for claim in result.won:
            self._dispatcher.submit(claim)

    def _said(self, rows: list[ScheduleRow]) -> None:
        """Log what the catch-up budgets did with each schedule's late periods."""
        paced = False
        for row in rows:
            decided = self._budgets.decided.get(row.key)
            if decided is None:
                continue
            log = self._log.bind(job=stored.run_job(row.key))
            if decided.paced:
                paced = True
                log.info(
                    "periods_paced",
                    count=len(decided.paced),
                    first=decided.paced[0].isoformat(),
                    last=decided.paced[-1].isoformat(),
                )
            if decided.deferred:
                budget = self._table.code[row.job].policy.catchup_budget
                log_deferred(log, decided.deferred, budget, self._fleet_budget)
        if paced:
            self._paced()


class PassBudgets:
    """The catch-up budgets as one pass sees them: what the database says they have
    spent, read in the pass's transaction, plus what the pass itself decided for the
    schedules before (their claims and paced periods are written after every row is
    planned, and a fleet's budget is shared by them all)."""

    def __init__(self, database: Database, fleet_budget: CatchupBudget | None) -> None:
        self._database = database
        self._fleet_budget = fleet_budget
        self.decided: dict[str, firing.Firing] = {}

    def plan(
        self, table: JobTable, row: ScheduleRow, now: datetime, connection: Connection
    ) -> Fired | None:
        """`plan` for one row of the pass, under these budgets. Periods it leaves to wait
        their pace are for every node's catch-up loop: they are told as the pass commits
        (PostgreSQL; the others poll)."""
        fired = plan(table, row, now, partial(self._of, connection, now), self.decided.__setitem__)
        decided = self.decided.get(row.key)
        if fired is not None and decided is not None and decided.paced:
            deferred.paced_written(self._database, connection)
        return fired

    def _of(
        self, connection: Connection, now: datetime, job: Job
    ) -> Callable[[], firing.Spending] | None:
        if job.policy.catchup_budget is None and self._fleet_budget is None:
            return None
        return partial(self._spent, connection, now, job)

    def _spent(self, connection: Connection, now: datetime, job: Job) -> firing.Spending:
        """What the budgets over `job` have spent (under the fleet budget's lock if there
        is one: taken before any job's)."""
        database, budget, fleet_budget = (
            self._database,
            job.policy.catchup_budget,
            self._fleet_budget,
        )
        fleet = None
        if fleet_budget is not None:
            deferred.lock_fleet(database, connection)
            fleet_per = fleet_budget.per.total_seconds()
            written = deferred.fleet_spent_on(database, connection, fleet_per)
            started = sum(
                origin is Origin.CATCHUP
                for decided in self.decided.values()
                for _, origin in decided.run
            )
            waiting = sum(len(decided.paced) for decided in self.decided.values())
            last = now if started else written.last
            fleet = (fleet_budget, Spent(written.runs + started + waiting, last))
        per = (budget or fleet_budget or CatchupBudget(1, job.policy.catchup_window)).per
        lookback = per + job.policy.catchup_window
        own, paced = deferred.schedule_spent_on(
            database, connection, job.name, per.total_seconds(), lookback.total_seconds()
        )
        return firing.Spending(own if budget is not None else None, fleet, paced > 0)


def plan(
    table: JobTable,
    row: ScheduleRow,
    now: datetime,
    spending: Callable[[Job], Callable[[], firing.Spending] | None] = lambda _: None,
    decided_by: Callable[[str, firing.Firing], object] = lambda *_: None,
) -> Fired | None:
    """What a pass does with one due schedule, by the pure rules of `scheduler.firing`;
    None if this node does not run its job. `spending`: what the catch-up budgets over
    a job have spent (None: no budget holds), read only if late periods are to run;
    `decided_by` hears what was decided, by the schedule's key."""
    job = table.learn(row)
    if job is None:
        return None
    state = firing.State(
        firing.trigger_from(row.trigger_columns),
        row.next_period or row.next_due_at,
        firing.owed_from(row.owed),
    )
    delay = partial(jitter_delay, job)
    decided = firing.fire(state, now, job.policy, delay=delay, spending=spending(job))
    decided_by(row.key, decided)
    assert decided.state is not None
    lease = job.policy.lease.total_seconds()
    limit = job.policy.overlap.limit
    # The row is taken again when its next period's jitter has run out.
    period = decided.state.next_due
    fires_at = period + delay(period) if period is not None else None

    def excluded(period: datetime) -> bool:
        return job.excluded(period, row.timezone) is not None

    return Fired(
        due=[
            Due(job.name, period, lease, limit, origin, excluded=excluded(period))
            for period, origin in decided.run
        ],
        recorded=[Entry(period, RunStatus.SKIPPED, reason) for period, reason in decided.skip]
        + [
            Entry(period, RunStatus.SKIPPED, Reason.CALENDAR)
            if excluded(period)
            else Entry(period, RunStatus.MISSED, Reason.WINDOW)
            for period in decided.missed
        ]
        + [
            Entry(period, RunStatus.SKIPPED, Reason.CALENDAR)
            if excluded(period)
            else Entry(period, RunStatus.DEFERRED, reason)
            for periods, reason in (
                (decided.paced, Reason.PACED),
                (decided.deferred, Reason.BUDGET),
            )
            for period in periods
        ],
        lease_seconds=lease,
        next_due_at=fires_at,
        owed=firing.owed_text(decided.state.owed),
        next_period=period if fires_at != period else None,
    )
