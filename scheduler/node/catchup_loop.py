"""The catch-up loop: find the periods that passed with no run (every node was down) and
hand them to the catch-up policy.

Each job keeps a watermark: every period up to it has a row. A pass looks only past
the watermark, reads the rows that exist there in one query, writes the plan in bulk
(`INSERT … ON CONFLICT DO NOTHING`), and moves the watermark. Replicas doing the same
pass at once meet on the primary key, so its cost does not grow with their number.

The periods a job owes are those of the schedule in force at each instant: when its
schedule changed, the old schedule's up to the change and the new one's after it,
never the new schedule's past. Every pause since the watermark is honoured.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice

from structlog.typing import FilteringBoundLogger

from scheduler import catchup, metrics
from scheduler.catchup import Pause
from scheduler.cron import Schedule, parse_schedule
from scheduler.errors import ScheduleError
from scheduler.model import Claim, Entry, JobRow, PauseRow, Spent, Written
from scheduler.node.claimed import log_deferred
from scheduler.node.clock import Clock
from scheduler.node.wakeups import Wakeups
from scheduler.policy import Catchup, CatchupBudget
from scheduler.registry import Job
from scheduler.states import Origin, Reason, RunStatus
from scheduler.store import deferred
from scheduler.store import jobs as job_rows
from scheduler.store import periods as period_rows
from scheduler.store.database import Connection, Database
from scheduler.store.faults import StoreError
from scheduler.supervision import SideThread

# Expected periods one pass looks at per job; a longer gap takes several passes.
SCAN_LIMIT = 100_000
# Up to this many jobs to look at, a pass reads their rows by name, beyond it all rows.
FEW_JOBS = 500


@dataclass(frozen=True)
class Scan:
    """The periods of one job past its watermark (at most SCAN_LIMIT of them)."""

    job: Job
    row: JobRow
    start: datetime
    periods: list[datetime]
    more: bool


def _scan(job: Job, row: JobRow, end: datetime) -> Scan | None:
    start = row.caught_up_to or row.first_seen
    expected = list(islice(expected_periods(job, row, start, end), SCAN_LIMIT + 1))
    if not expected:
        return None
    return Scan(job, row, start, expected[:SCAN_LIMIT], len(expected) > SCAN_LIMIT)


def _replaced(row: JobRow, start: datetime) -> tuple[Schedule, datetime] | None:
    """The schedule the job had before its schedule changed, and when it changed, if that
    change is after `start` (otherwise nothing before the change is left to look at)."""
    changed = row.schedule_changed_at
    if changed is None or row.previous_cron is None or changed <= start:
        return None
    try:
        return parse_schedule(row.previous_cron, row.previous_timezone or "UTC"), changed
    except ScheduleError:
        return None  # stored by an older version with rules of its own: nothing owed


def expected_periods(job: Job, row: JobRow, start: datetime, end: datetime) -> Iterator[datetime]:
    """Every period in (start, end] the job owes, ascending, by the schedule in force."""
    replaced = _replaced(row, start)
    if replaced is None:
        yield from job.timed.periods_between(start, end)
        return
    old, changed = replaced
    yield from old.periods_between(start, min(changed, end))
    if changed < end:
        yield from job.timed.periods_between(changed, end)


def _first_expected(job: Job, row: JobRow, start: datetime) -> datetime | None:
    replaced = _replaced(row, start)
    if replaced is not None:
        old, changed = replaced
        first = old.next_after(start)
        if first is not None and first <= changed:
            return first
        return job.timed.next_after(changed)
    return job.timed.next_after(start)


def pauses_of(rows: Iterable[PauseRow]) -> dict[str, list[Pause]]:
    """The pauses read from the database, per job, as the catch-up policy takes them."""
    found: dict[str, list[Pause]] = {}
    for row in rows:
        found.setdefault(row.job, []).append(Pause(row.paused_at, row.resumed_at))
    return found


class CatchUp:
    """One pass over every job; the loop below calls it at start and on an interval."""

    def __init__(
        self,
        database: Database,
        jobs: Mapping[str, Job],
        node_id: str,
        submit: Callable[[Claim], object],
        log: FilteringBoundLogger,
        *,
        live_since: datetime | None = None,
        live_retry: timedelta = timedelta(0),
        fleet_budget: CatchupBudget | None = None,
    ) -> None:
        self._database = database
        # The fleet's catch-up budget, across every job (`--catchup-budget`).
        self._fleet_budget = fleet_budget
        # Periods after `live_since` are the node's live loop's to claim, and it keeps
        # retrying one for `live_retry`: catch-up leaves those alone, so it never races
        # the live loop for a period due this moment (recording it as a catch-up run)
        # and a burst of due periods is not read again by a pass while it is claimed.
        self._live_since = live_since
        self._live_retry = live_retry
        self._jobs = jobs
        self._node_id = node_id
        self._submit = submit
        self._log = log
        # Each job's watermark as last read, and the first period after it.
        self._first_past_watermark: dict[str, tuple[datetime, datetime | None]] = {}
        # Whether to look for deferred periods an operator chose to run, or that wait
        # their budget's pace: at the first pass, when told (a notification, or this
        # node's schedule loop), while some of this node's wait, and each pass while
        # polling. A pass with nothing to look for costs no statement.
        self.look_for_deferred = True
        # When the next catch-up run within a budget may start (its pace), if one waits.
        self.next_start: datetime | None = None

    def live_from(self, since: datetime) -> None:
        """The live loop claims the periods after `since` (the database clock when it
        began): catch-up's are those before."""
        self._live_since = since

    def run_pass(self, now: datetime) -> bool:
        """Handle every job once; True if some job has more history left to scan.

        The rows that exist past the watermarks are read for all jobs at once and the
        watermarks moved together, so a pass costs a few statements, not two per job.
        """
        # A job whose next period past its watermark (as last read) is still ahead has
        # nothing to catch up: watermarks only move forward, and pausing or resuming it
        # changes nothing that is not there yet. Its row is not even read, so a pass
        # over 10,000 idle jobs costs no statement.
        self.next_start = None
        approved_left = False
        if self.look_for_deferred:
            self.look_for_deferred = False
            approved_left = self._claim_approved()
            # Periods of this node's schedules still wait their pace: look again then.
            self.look_for_deferred |= self._claim_paced()
        return self._scan_pass(now) or approved_left

    def _scan_pass(self, now: datetime) -> bool:
        horizon = self._horizon(now)
        unsettled = [
            job
            for job in self._jobs.values()
            if not job.is_template and not self._quiet(job, horizon)
        ]
        if not unsettled:
            return False
        names = {job.name for job in unsettled} if len(unsettled) <= FEW_JOBS else None
        scans = [
            scan
            for row in job_rows.all_jobs(self._database, names)
            if row.name in self._jobs and (scan := self._scan(self._jobs[row.name], row, horizon))
        ]
        if not scans:
            return False
        existing = period_rows.existing_periods_of(
            self._database, [(scan.job.name, scan.start, scan.periods[-1]) for scan in scans]
        )
        pauses = pauses_of(
            job_rows.pauses_since(
                self._database, [scan.job.name for scan in scans], min(s.start for s in scans)
            )
        )
        moves: list[tuple[str, datetime | None, datetime]] = []
        more = False
        for scan in scans:
            through, capped = self._job_pass(
                scan, existing[scan.job.name], pauses.get(scan.job.name, []), now
            )
            moves.append((scan.job.name, scan.row.caught_up_to, through))
            more |= scan.more and not capped
        period_rows.advance_watermarks(self._database, moves)
        return more

    def _claim_approved(self) -> bool:
        """Claim the deferred periods an operator chose to run (as manual runs); True if
        more are left than a pass takes."""
        found = deferred.approved(self._database)
        # A full read may have left some out; only this node's jobs make it look again.
        full = sum(map(len, found.values())) >= deferred.APPROVED_READ
        left = False
        for name, periods in found.items():
            job = self._jobs.get(name)
            if job is None:
                continue  # not this node's code: a node that has the job claims them
            won = deferred.claim_approved(
                self._database,
                name,
                periods,
                holder=self._node_id,
                lease_seconds=job.policy.lease.total_seconds(),
            )
            metrics.record_claims(len(periods[: deferred.CLAIMS_PER_PASS]), won, [])
            if won:
                self._log.info(
                    "deferred_claimed",
                    job=name,
                    count=len(won),
                    first=won[0].period.isoformat(),
                    last=won[-1].period.isoformat(),
                )
            for claim in won:
                self._submit(claim)
            left |= full or len(periods) > deferred.CLAIMS_PER_PASS
        if left:
            self.look_for_deferred = True
        return left

    def _claim_paced(self) -> bool:
        """Claim, for each schedule with periods waiting their budget's pace, the oldest
        if its pace has come (under its lock and the fleet's, from what the transaction
        reads); note when the next may start. True if some of this node's still wait."""
        left = False
        for name in deferred.paced(self._database):
            job = self._jobs.get(name)
            if job is None:
                continue  # not this node's job (or its schedule is gone): another node's

            def next_start(
                connection: Connection,
                now: datetime,
                job: Job = job,
                budget: CatchupBudget | None = job.policy.catchup_budget,
                fleet_budget: CatchupBudget | None = self._fleet_budget,
            ) -> datetime:
                budgets: list[tuple[CatchupBudget, Spent]] = []
                if budget is not None:
                    per = budget.per.total_seconds()
                    lookback = per + job.policy.catchup_window.total_seconds()
                    spent = deferred.spent_on(self._database, connection, job.name, per, lookback)
                    budgets.append((budget, spent))
                if fleet_budget is not None:
                    per = fleet_budget.per.total_seconds()
                    spent = deferred.fleet_spent_on(self._database, connection, per)
                    budgets.append((fleet_budget, spent))
                return catchup.next_start(now, budgets)

            won, next_start_at = deferred.claim_paced(
                self._database,
                name,
                holder=self._node_id,
                lease_seconds=job.policy.lease.total_seconds(),
                window=job.policy.catchup_window,
                fleet=self._fleet_budget is not None,
                next_start=next_start,
            )
            if won is not None:
                metrics.record_claims(1, [won], [])
                self._log.info(
                    "catchup_claimed",
                    job=name,
                    count=1,
                    first=won.period.isoformat(),
                    last=won.period.isoformat(),
                )
                self._submit(won)
            if next_start_at is not None:
                self.next_start = min(self.next_start or next_start_at, next_start_at)
                left = True
        return left

    def _quiet(self, job: Job, horizon: datetime) -> bool:
        """Whether the job's first period past its watermark (as last read) is after
        the newest period this pass may call missing; unknown jobs are not quiet."""
        if job.name not in self._first_past_watermark:
            return False
        _, first = self._first_past_watermark[job.name]
        return first is None or first > horizon - job.policy.jitter

    def _scan(self, job: Job, row: JobRow, horizon: datetime) -> Scan | None:
        """`_scan`, skipped while the job is quiet: a pass then does no cron arithmetic
        for the thousands of jobs with nothing new (an idle node with 10,000 yearly jobs
        spent 0.5 % of a core on it)."""
        start = row.caught_up_to or row.first_seen
        watermark, _ = self._first_past_watermark.get(job.name, (None, None))
        if watermark != start:
            self._first_past_watermark[job.name] = (start, _first_expected(job, row, start))
        if self._quiet(job, horizon):
            return None
        return _scan(job, row, horizon - job.policy.jitter)

    def _horizon(self, now: datetime) -> datetime:
        """The newest period this pass may call missing, before the job's jitter (a
        jittered period is claimed after its jitter: until then it is not missing)."""
        if self._live_since is None:
            return now
        return min(now, max(self._live_since, now - self._live_retry))

    def _job_pass(
        self, scan: Scan, existing: set[datetime], pauses: list[Pause], now: datetime
    ) -> tuple[datetime, bool]:
        """Write one job's plan and dispatch what it won; return the new watermark and
        whether the cap on claims cut the plan short."""
        missing = [period for period in scan.periods if period not in existing]
        job = scan.job

        def plan_of(
            missing: list[datetime],
            spent: Spent | None = None,
            fleet: tuple[CatchupBudget, Spent] | None = None,
        ) -> catchup.Plan:
            excluded = job.excluded
            return catchup.plan(
                missing,
                now,
                job.policy,
                pauses,
                lambda period: excluded(period) is not None,
                spent=spent,
                fleet=fleet,
            )

        budget, fleet_budget = job.policy.catchup_budget, self._fleet_budget
        budgeted = (budget is not None or fleet_budget is not None) and (
            job.policy.catchup is Catchup.ALL
        )
        if not budgeted or not missing:
            plan = plan_of(missing)
            written = self._write(job, plan, _entries(plan))
        else:
            # Decided under the job's lock (and the fleet's) from what the transaction
            # reads: two nodes' passes at once do not each spend a budget on a view
            # that misses the other's.
            plans: list[catchup.Plan] = []

            def planned(connection: Connection) -> list[Entry]:
                found = period_rows.existing_periods_on(
                    connection, job.name, scan.start, scan.periods[-1]
                )
                spent = None
                if budget is not None:
                    per = budget.per.total_seconds()
                    lookback = per + job.policy.catchup_window.total_seconds()
                    spent = deferred.spent_on(self._database, connection, job.name, per, lookback)
                fleet = None
                if fleet_budget is not None:
                    per = fleet_budget.per.total_seconds()
                    fleet = (fleet_budget, deferred.fleet_spent_on(self._database, connection, per))
                plans.append(plan_of([p for p in scan.periods if p not in found], spent, fleet))
                return _entries(plans[-1])

            locks = [deferred.FLEET_LOCK] if fleet_budget is not None else []
            written = self._write(job, None, [], planned, locks)
            plan = plans[-1]
            self._said(job, plan, written)
        for claim in written.won:
            self._submit(claim)
        if written.early:
            # The database clock has not reached these: they stay past the watermark.
            first = min(entry.period for entry in written.early)
            self._log.warning(
                "clock_skew", job=scan.job.name, period=first.isoformat(), stage="catchup"
            )
            before = [period for period in scan.periods if period < first]
            return (before[-1] if before else scan.start), True
        if plan.waiting:
            # Owed and within the budget, to start at its pace: the watermark stays
            # before the first, so a later pass (of any node) finds them still missing.
            if plan.next_start is not None:
                self.next_start = min(self.next_start or plan.next_start, plan.next_start)
            before = [period for period in scan.periods if period < plan.waiting[0]]
            return (before[-1] if before else scan.start), True
        if plan.capped and plan.handled_through:
            return plan.handled_through, True
        return scan.periods[-1], False

    def _write(
        self,
        job: Job,
        plan: catchup.Plan | None,
        entries: list[Entry],
        planned: Callable[[Connection], list[Entry]] | None = None,
        locks: Sequence[str] = (),
    ) -> Written:
        """Write a plan's entries (or those `planned` decides in the transaction), and
        say what was written; `plan` None: the caller says it."""
        if not entries and planned is None:
            return Written()
        written = period_rows.write(
            self._database,
            job.name,
            entries,
            holder=self._node_id,
            lease_seconds=job.policy.lease.total_seconds(),
            origin=Origin.CATCHUP,
            planned=planned,
            locks=locks,
        )
        if plan is not None:
            self._said(job, plan, written)
        return written

    def _said(self, job: Job, plan: catchup.Plan, written: Written) -> None:
        won = written.won
        early = {entry.period for entry in written.early}
        metrics.record_claims(sum(period not in early for period in plan.run), won, [])
        log = self._log.bind(job=job.name)
        if plan.missed:
            log.warning(
                "periods_missed",
                count=len(plan.missed),
                first=plan.missed[0].isoformat(),
                last=plan.missed[-1].isoformat(),
            )
        if plan.skip:
            log.info("periods_skipped", count=len(plan.skip), reason=plan.skip[0][1].value)
        if plan.deferred:
            log_deferred(log, plan.deferred, job.policy.catchup_budget, self._fleet_budget)
        if won:
            log.info(
                "catchup_claimed",
                count=len(won),
                first=won[0].period.isoformat(),
                last=won[-1].period.isoformat(),
            )


def _entries(plan: catchup.Plan) -> list[Entry]:
    """The rows a plan writes (the periods waiting for their pace have none yet)."""
    return (
        [Entry(period, RunStatus.CLAIMED) for period in plan.run]
        + [Entry(period, RunStatus.SKIPPED, reason) for period, reason in plan.skip]
        + [Entry(period, RunStatus.MISSED, Reason.WINDOW) for period in plan.missed]
        + [Entry(period, RunStatus.DEFERRED, Reason.BUDGET) for period in plan.deferred]
    )


class CatchUpLoop(SideThread):
    """Runs a pass at start and every `interval`; supervised like the other side threads."""

    def __init__(
        self,
        *,
        catch_up: CatchUp,
        clock: Clock,
        interval: timedelta,
        stop: threading.Event,
        log: FilteringBoundLogger,
        wakeups: Wakeups | None = None,
    ) -> None:
        super().__init__("catchup", stop, log)
        self._catch_up = catch_up
        self._clock = clock
        self._interval = interval.total_seconds()
        self._wakeups = wakeups
        if wakeups is not None:
            wakeups.catch_up = self

    def deferred_heard(self) -> None:
        """An operator chose to run deferred periods, or a schedule's pass wrote some to
        wait their pace: look for them now."""
        self._catch_up.look_for_deferred = True
        self.wake_in(0.0)

    def live_from(self, since: datetime) -> None:
        """See `CatchUp.live_from`; before the loop starts."""
        self._catch_up.live_from(since)

    def step(self) -> float:
        if self._wakeups is None or not self._wakeups.listening:
            self._catch_up.look_for_deferred = True  # no notification would say so
        try:
            now = self._clock.now()
            more = self._catch_up.run_pass(now)
        except StoreError as error:
            self._log.warning("catchup_failed", error=error.message)
            self._catch_up.look_for_deferred = True
            return self._interval
        if more:
            return 0.0
        paced = self._catch_up.next_start
        if paced is None:
            return self._interval
        return min(self._interval, max(0.0, (paced - now).total_seconds()))
