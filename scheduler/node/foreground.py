"""`scheduler run-once JOB`: claim one period and run it in the foreground, for system
cron or a Kubernetes CronJob.

Two copies started together on two servers race through the same claim as the
daemon's replicas: one runs the job, the other logs who holds the period and exits 0,
so a cron wrapper never pages anyone for a correct skip.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta

import structlog
from structlog.typing import FilteringBoundLogger

from scheduler.errors import UserError
from scheduler.instants import utc_text
from scheduler.model import ONE_SHOT, Claim, NodeIdentity
from scheduler.node import registration
from scheduler.node.alerts import Alerts
from scheduler.node.clock import Clock
from scheduler.node.heartbeat import Heartbeat
from scheduler.node.peers import Peers
from scheduler.registry import Job
from scheduler.run.dispatcher import Dispatcher
from scheduler.run.observers import RunObserver
from scheduler.states import RunStatus
from scheduler.store import claims, nodes, queries, takeover
from scheduler.store.database import Database

# A period this far ahead of the database clock is still accepted (clock skew).
FUTURE_TOLERANCE = timedelta(seconds=2)
WAIT_SLICE_S = 0.2
# A remote run is under way while queued or running on a worker.
_UNDER_WAY = (RunStatus.QUEUED.value, RunStatus.RUNNING.value)
SUCCESS, FAILURE = 0, 1


class Foreground:
    """This process as a short-lived node: runs claims in the foreground under a lease
    kept by its own heartbeat, with the job's retries, and marks itself stopped after.

    Nothing is written before `open()`, so commands can validate their input first.
    """

    def __init__(
        self,
        database: Database,
        job: Job,
        node: NodeIdentity,
        grace: timedelta,
        stop: threading.Event,
        *,
        observers: Sequence[RunObserver] = (),
        register: bool = True,
    ) -> None:
        """`register`: write the job's definition as a node that runs it does (`run-once`,
        a CronJob that is the job's only runner); False for a run by hand (`trigger`,
        `rerun`, `backfill`), which must not make a job the fleet does not run look
        like one of its jobs (watched by `check`, never retired)."""
        self.database, self.job, self.node = database, job, node
        self._register = register
        self._grace, self._stop = grace, stop
        self._clock = Clock(database.time_source)
        self.log: FilteringBoundLogger = structlog.get_logger("scheduler").bind(
            node=node.id, job=job.name
        )
        self._dispatcher = Dispatcher(
            database, {job.name: job}, node.id, 1, self.log, observers=observers
        )
        # No daemon may run this job (a CronJob alone): its events go out from here too.
        self._alerts = Alerts(
            database=database, jobs={job.name: job}, node_id=node.id, stop=stop, log=self.log
        )
        self._heartbeat = Heartbeat(
            database=database,
            dispatcher=self._dispatcher,
            node_id=node.id,
            interval=job.policy.heartbeat.total_seconds(),
            log=self.log,
            clock=self._clock,
            peers=Peers(node.id),
            halt=stop,
        )
        self._opened = False

    def now(self) -> datetime:
        """The database clock (read, not written)."""
        self._heartbeat.calibrate()
        return self._clock.now()

    def open(self) -> None:
        # A schedule's job: its template is its nodes' to register.
        if self._register and self.job.template is None:
            registration.register(self.database, {self.job.name: self.job})
        nodes.register(self.database, self.node, ONE_SHOT)
        self._heartbeat.start()
        self._opened = True

    def close(self) -> None:
        stopping = self._stop.is_set()
        self._stop.set()
        self._heartbeat.stop()
        if self._opened and not stopping:
            self._alerts.deliver_due()
        if self._opened:
            nodes.mark_stopped(self.database, self.node.id)

    def run(self, claim: Claim) -> bool:
        """Run the claim, then its retries here, until it ends for good; True if it succeeded."""
        current: Claim | None = claim
        while current is not None:
            self.log.info(
                "run_claimed",
                period=current.period.isoformat(),
                run_id=current.id,
                attempt=current.attempt,
            )
            future = self._dispatcher.submit(current)
            # A function lingering past its timeout with no retry to come is left to
            # end with this process.
            while not future.done() and not self._dispatcher.settled(current.key):
                if self._stop.wait(WAIT_SLICE_S):
                    # The heartbeat goes on renewing the lease while the run finishes.
                    self._dispatcher.drain(
                        self._grace.total_seconds(), before_giving_back=self._heartbeat.stop
                    )
                    return False
            if self.job.remote is not None:
                resent = self._await_remote(current)
                if resent is not None:
                    current = resent
                    continue
            current = self._next_attempt(current)
        row = queries.run_mapping(self.database, claim.job, claim.period)
        return bool(row and row["status"] == RunStatus.SUCCEEDED)

    def _await_remote(self, claim: Claim) -> Claim | None:
        """A run sent to a task queue ends on a worker: wait for its outcome. A message no
        worker started by its deadline (or that was not sent) is retaken here and sent
        again; the next attempt is returned then, None once the run ended."""
        while not self._stop.wait(WAIT_SLICE_S):
            row = queries.run_mapping(self.database, claim.job, claim.period)
            if row is None or row["status"] not in _UNDER_WAY:
                return None
            for stale in takeover.find_stale(self.database, [claim.job], 1000):
                if stale.id == claim.id and stale.expired:
                    retaken = takeover.retake(self.database, stale, self.node.id)
                    if retaken is not None:
                        return retaken
        return None

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _next_attempt(self, claim: Claim) -> Claim | None:
        """Wait for the retry time of a failed attempt and take it; None when none is due."""
        while True:
            row = queries.run_mapping(self.database, claim.job, claim.period)
            if row is None or row["retry_at"] is None:
                return None
            delay = takeover.seconds_until_recovery(self.database, [claim.job]) or 0.0
            if self._stop.wait(delay):
                return None
            for stale in takeover.find_stale(self.database, [claim.job], 1000):
                if stale.id == claim.id:
                    retry = takeover.retake(self.database, stale, self.node.id)
                    if retry is not None:
                        self.log.info(
                            "run_retaken",
                            period=retry.period.isoformat(),
                            run_id=retry.id,
                            attempt=retry.attempt,
                            previous_holder=stale.holder,
                            cause="retry",
                        )
                    return retry


def run_once(foreground: Foreground, period: datetime | None) -> int:
    """Claim the period (default: the latest at or before now) and run it; the exit status."""
    chosen = choose_period(foreground.job, period, foreground.now())
    log = foreground.log.bind(period=chosen.isoformat())
    foreground.open()
    try:
        result = claims.claim(foreground.database, [foreground.job.due(chosen)], foreground.node.id)
        if result.skipped:
            log.info("run_skipped", reason=result.reasons[result.skipped[0].id].value)
            return SUCCESS
        if not result.won:
            held = queries.holder_of(foreground.database, foreground.job.name, chosen)
            holder, status = held if held else (None, None)
            log.info("run_already_claimed", holder=holder, status=status and status.value)
            return SUCCESS
        return SUCCESS if foreground.run(result.won[0]) else FAILURE
    finally:
        foreground.close()


def choose_period(job: Job, given: datetime | None, now: datetime) -> datetime:
    """The period to run: the one given (checked against the schedule) or the latest due."""
    schedule = job.timed
    if given is None:
        latest = schedule.latest_at_or_before(now)
        if latest is None:
            raise UserError(f"job {job.name!r}: cron: no period has fallen due yet")
        return latest
    if given > now + FUTURE_TOLERANCE:
        raise UserError(
            f"job {job.name!r}: --period: {utc_text(given)} is in the future "
            f"(database time is {utc_text(now.replace(microsecond=0))})"
        )
    if schedule.next_after(given - timedelta(seconds=1)) != given:
        before = schedule.latest_at_or_before(given)
        after = schedule.next_after(given)
        nearest = ", ".join(utc_text(moment) for moment in (before, after) if moment)
        raise UserError(
            f"job {job.name!r}: --period: {utc_text(given)} is not a period of "
            f"{schedule.expression!r} (nearest: {nearest})"
        )
    return given
