"""The recovery loop: take over runs whose lease expired, and failed runs whose retry is due.

It sleeps until the earliest lease expiry or retry by the database clock (at most
`interval`), so a dead node's run is retaken right after its lease ends.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from sqlalchemy.exc import SQLAlchemyError
from structlog.typing import FilteringBoundLogger

from scheduler.dispatch import Dispatcher
from scheduler.registry import Job
from scheduler.states import RunStatus
from scheduler.store import runs
from scheduler.store.database import Database, describe_fault
from scheduler.store.runs import Stale
from scheduler.supervision import SideThread

# A run whose node died may be taken over this many times beyond its retries, so
# that a job which kills its node every time does not loop for ever.
CRASH_ALLOWANCE = 2
BATCH = 100
# Waking a little after the deadline keeps a pass from finding a lease that is
# still valid by a few milliseconds.
SETTLE_S = 0.05


class Recovery(SideThread):
    def __init__(
        self,
        *,
        database: Database,
        dispatcher: Dispatcher,
        jobs: Mapping[str, Job],
        node_id: str,
        interval: float,
        stop: threading.Event,
        log: FilteringBoundLogger,
    ) -> None:
        super().__init__("recovery", stop, log)
        self._database = database
        self._dispatcher = dispatcher
        self._jobs = jobs
        self._names = frozenset(jobs)
        self._node_id = node_id
        self._interval = interval

    def step(self) -> float:
        """Retake what is due; return how long to sleep before the next pass."""
        try:
            while self.recover_once() == BATCH and not self._stop.is_set():
                pass
            due_in = runs.seconds_until_recovery(self._database, None)
        except SQLAlchemyError as error:
            self._log.warning("recovery_failed", error=describe_fault(error))
            return self._interval
        return self._interval if due_in is None else min(self._interval, due_in + SETTLE_S)

    def recover_once(self) -> int:
        """One batch: retake each stale run this node may take; return how many were found."""
        stale = runs.find_stale(self._database, self._names, BATCH)
        for run in stale:
            self._recover(run)
        return len(stale)

    def _recover(self, run: Stale) -> None:
        policy = self._jobs[run.job].policy
        crashed = run.expired or run.status is RunStatus.ABANDONED
        limit = policy.max_attempts + (CRASH_ALLOWANCE if crashed else 0)
        log = self._log.bind(job=run.job, period=run.period.isoformat(), run_id=run.id)
        # Only attempts that called the function count: a claim given back, or lost with
        # its node, before it started costs nothing, so no period is given up unrun.
        if run.started_attempts >= limit:
            if runs.give_up(self._database, run):
                log.error("run_given_up", attempt=run.attempt, status=run.status.value)
            return
        claim = runs.retake(self._database, run, self._node_id)
        if claim is None:
            return
        log.warning(
            "run_retaken",
            attempt=claim.attempt,
            previous_holder=run.holder,
            cause="lease_expired" if run.expired else run.status.value,
        )
        self._dispatcher.submit(claim)
