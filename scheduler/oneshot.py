"""`scheduler run-once JOB`: claim one period and run it in the foreground, for system
cron or a Kubernetes CronJob.

Two copies started together on two servers race through the same claim as the
daemon's replicas: one runs the job, the other logs who holds the period and exits 0,
so a cron wrapper never pages anyone for a correct skip.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from scheduler import catalog
from scheduler.clock import Clock
from scheduler.daemon import due_for
from scheduler.dispatch import Dispatcher
from scheduler.errors import UserError
from scheduler.keeper import Keeper
from scheduler.registry import Job
from scheduler.states import RunStatus
from scheduler.store import nodes, runs
from scheduler.store.database import Database
from scheduler.store.nodes import NodeIdentity
from scheduler.store.runs import Claim

# A period this far ahead of the database clock is still accepted (clock skew).
FUTURE_TOLERANCE = timedelta(seconds=2)
WAIT_SLICE_S = 0.2
SUCCESS, FAILURE = 0, 1


@dataclass(frozen=True)
class OneShot:
    database: Database
    job: Job
    node: NodeIdentity
    grace: timedelta
    stop: threading.Event

    def run(self, period: datetime | None) -> int:
        """Claim the period (default: the latest at or before now) and run it; the exit status."""
        clock = Clock()
        log: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger("scheduler").bind(
            node=self.node.id, job=self.job.name
        )
        dispatcher = Dispatcher(self.database, {self.job.name: self.job}, self.node.id, 1, log)
        keeper = Keeper(
            database=self.database,
            dispatcher=dispatcher,
            node_id=self.node.id,
            interval=self.job.policy.heartbeat.total_seconds(),
            stop=self.stop,
            log=log,
            clock=clock,
        )
        keeper.calibrate()
        chosen = choose_period(self.job, period, clock.now())
        log = log.bind(period=chosen.isoformat())
        catalog.register(self.database, {self.job.name: self.job})
        nodes.register(self.database, self.node)
        try:
            result = runs.claim(self.database, [due_for(self.job, chosen)], self.node.id)
            if result.skipped:
                log.info("run_skipped", reason=result.reasons[result.skipped[0].id].value)
                return SUCCESS
            if not result.won:
                self._report_holder(log, chosen)
                return SUCCESS
            keeper.start()
            return self._run_to_the_end(dispatcher, result.won[0], log)
        finally:
            self.stop.set()
            nodes.mark_stopped(self.database, self.node.id)

    def _report_holder(self, log: structlog.stdlib.BoundLogger, period: datetime) -> None:
        held = runs.holder_of(self.database, self.job.name, period)
        holder, status = held if held else (None, None)
        log.info("run_already_claimed", holder=holder, status=status and status.value)

    def _run_to_the_end(
        self, dispatcher: Dispatcher, claim: Claim, log: structlog.stdlib.BoundLogger
    ) -> int:
        """Run the claim, then its retries in this process, until it ends for good."""
        current: Claim | None = claim
        while current is not None:
            log.info("run_claimed", run_id=current.id, attempt=current.attempt)
            future = dispatcher.submit(current)
            while not future.done():
                if self.stop.wait(WAIT_SLICE_S):
                    dispatcher.drain(self.grace.total_seconds())
                    return FAILURE
            current = self._next_attempt(current)
        row = runs.get(self.database, claim.job, claim.period)
        return SUCCESS if row and row["status"] == RunStatus.SUCCEEDED else FAILURE

    def _next_attempt(self, claim: Claim) -> Claim | None:
        """Wait for the retry time of a failed attempt and take it; None when none is due."""
        while True:
            delay = runs.seconds_until_recovery(self.database, [claim.job])
            row = runs.get(self.database, claim.job, claim.period)
            if row is None or row["retry_at"] is None or delay is None:
                return None
            if self.stop.wait(delay):
                return None
            for stale in runs.find_stale(self.database, [claim.job], 100):
                if stale.id == claim.id:
                    return runs.retake(self.database, stale, self.node.id)


def choose_period(job: Job, given: datetime | None, now: datetime) -> datetime:
    """The period to run: the one given (checked against the schedule) or the latest due."""
    if given is None:
        latest = job.schedule.latest_at_or_before(now)
        if latest is None:
            raise UserError(f"job {job.name!r}: cron: no period has fallen due yet")
        return latest
    if given > now + FUTURE_TOLERANCE:
        raise UserError(
            f"job {job.name!r}: --period: {given.isoformat()} is in the future "
            f"(database time is {now.replace(microsecond=0).isoformat()})"
        )
    if job.schedule.next_after(given - timedelta(seconds=1)) != given:
        before = job.schedule.latest_at_or_before(given)
        after = job.schedule.next_after(given)
        nearest = ", ".join(moment.isoformat() for moment in (before, after) if moment)
        raise UserError(
            f"job {job.name!r}: --period: {given.isoformat()} is not a period of "
            f"{job.schedule.expression!r} (nearest: {nearest})"
        )
    return given
