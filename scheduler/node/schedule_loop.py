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
from datetime import datetime
from functools import partial

from structlog.typing import FilteringBoundLogger

from scheduler import firing, metrics
from scheduler.model import Due, Entry
from scheduler.node.claimed import log_claims
from scheduler.node.upcoming import jitter_delay
from scheduler.node.wakeups import Wakeups
from scheduler.run.dispatcher import Dispatcher
from scheduler.run.job_table import JobTable
from scheduler.states import Reason, RunStatus
from scheduler.store import schedules as stored
from scheduler.store.database import Database
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
    ) -> None:
        super().__init__("schedules", stop, log)
        self._database = database
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

    def _plan(self, row: ScheduleRow, now: datetime) -> Fired | None:
        return plan(self._table, row, now)

    def _dispatch(self, done: stored.Pass) -> None:
        result = done.result
        if not done.rows:
            return
        log_claims(self._log, result)
        metrics.record_claims(len(result.won) + len(result.skipped), result.won, result.skipped)
        for claim in result.won:
            self._dispatcher.submit(claim)


def plan(table: JobTable, row: ScheduleRow, now: datetime) -> Fired | None:
    """What a pass does with one due schedule, by the pure rules of `scheduler.firing`;
    None if this node does not run its job."""
    job = table.learn(row)
    if job is None:
        return None
    state = firing.State(
        firing.trigger_from(row.trigger_columns),
        row.next_period or row.next_due_at,
        firing.owed_from(row.owed),
    )
    delay = partial(jitter_delay, job)
    decided = firing.fire(state, now, job.policy, delay=delay)
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
        ],
        lease_seconds=lease,
        next_due_at=fires_at,
        owed=firing.owed_text(decided.state.owed),
        next_period=period if fires_at != period else None,
    )
