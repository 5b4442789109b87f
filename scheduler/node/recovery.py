"""The recovery loop: take over runs whose lease expired, and failed runs whose retry is due.

It sleeps until the earliest lease expiry or retry by the database clock, so a dead
node's run is retaken right after its lease ends. When polling (see
`scheduler.node.wakeups`) it also looks every `interval`; with wake-ups it sleeps until
told (a notification, or a deadline the heartbeat read) and looks only then.

On PostgreSQL it also looks, each pass, for nodes whose liveness lock is gone (their
process ended): once a node has been gone for NOTICE_S (time for a live holder whose
session merely dropped to notice and give its runs up first), their leases are ended
and its runs taken over in the same pass, and its share of the due periods is claimed
by the others from then on.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping

from structlog.typing import FilteringBoundLogger

from scheduler.model import Stale
from scheduler.node.peers import Peers
from scheduler.node.wakeups import Wakeups
from scheduler.registry import Job
from scheduler.run.dispatcher import Dispatcher
from scheduler.states import RunStatus
from scheduler.store import nodes, takeover
from scheduler.store.database import Database
from scheduler.store.faults import StoreError
from scheduler.supervision import SideThread

# A run whose node died may be taken over this many times beyond its retries, so
# that a job which kills its node every time does not loop for ever. From the second
# such loss on, the run waits before it is taken again, twice as long each time: a job
# that kills its node cannot take a fleet down in a tight loop, and a node that an
# outside cause kills again and again (a crash loop) costs a period no more than the
# backoff, as its later incarnations leave the run alone until then.
CRASH_ALLOWANCE = 5
CRASH_BACKOFF_S = 5.0
CRASH_BACKOFF_MAX_S = 600.0
BATCH = 100
# Waking a little after the deadline keeps a pass from finding a lease that is
# still valid by a few milliseconds.
SETTLE_S = 0.05
# How long a node's liveness lock must have been gone before its runs are taken: a
# holder whose session ended while it lives hears of it at once (its socket closes)
# and gives its runs up in milliseconds.
NOTICE_S = 0.5
# With wake-ups, the longest sleep between passes when nothing is known to be due: the
# heartbeat re-reads every deadline each beat, so this is only a last resort.
SWEEP_S = 300.0


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
        peers: Peers | None = None,
        wakeups: Wakeups | None = None,
    ) -> None:
        super().__init__("recovery", stop, log)
        self._database = database
        self._dispatcher = dispatcher
        self._jobs = jobs
        self._names = frozenset(jobs)
        self._node_id = node_id
        self._interval = interval
        self._peers = peers
        self._wakeups = wakeups
        if wakeups is not None:
            wakeups.recovery = self
        # Nodes seen gone, and since when (this process's monotonic clock).
        self._gone_since: dict[str, float] = {}
        self._released: set[str] = set()
        self._last_pass = -math.inf

    def step(self) -> float:
        """Retake what is due; return how long to sleep before the next pass."""
        self._last_pass = time.monotonic()
        try:
            waiting = self.find_gone()
            while self.recover_once() == BATCH and not self._stopping.is_set():
                pass
            due_in = takeover.seconds_until_recovery(self._database, None)
        except StoreError as error:
            self._log.warning("recovery_failed", error=error.message)
            return self._interval
        longest = self._interval if self._polling else SWEEP_S
        sleep = longest if due_in is None else min(longest, due_in + SETTLE_S)
        return min(sleep, waiting) if waiting is not None else sleep

    @property
    def _polling(self) -> bool:
        return self._wakeups is None or not self._wakeups.listening

    def deadline_in(self, seconds: float) -> None:
        """The heartbeat read the next lease end or retry: look then. One already passed
        is news only if no pass has looked since (a pass finds what it may take; what
        it left is another node's job, or no node's)."""
        due_at = time.monotonic() + seconds
        if seconds <= 0 and self._last_pass >= due_at:
            return
        self.wake_in(max(0.0, seconds) + SETTLE_S)

    def notice_gone(self, gone: list[str]) -> None:
        """The heartbeat saw these nodes' liveness locks gone: look, unless each was
        already dealt with."""
        if set(gone) - self._released:
            self.wake_in(0.0)

    def find_gone(self) -> float | None:
        """Release the runs of nodes gone for NOTICE_S; how long until the next may ripen."""
        gone = set(nodes.gone(self._database))
        moment = time.monotonic()
        self._gone_since = {node: self._gone_since.get(node, moment) for node in gone}
        self._released &= gone
        if gone and self._peers is not None:
            self._peers.drop(gone)
        ripe = [
            node
            for node, since in self._gone_since.items()
            if moment - since >= NOTICE_S and node not in self._released
        ]
        if ripe:
            released = nodes.release_runs_of(self._database, ripe)
            self._released |= set(ripe)
            self._log.warning("nodes_lost", lost=sorted(ripe), runs_released=released)
        unripe = [
            since + NOTICE_S - moment
            for node, since in self._gone_since.items()
            if node not in self._released
        ]
        return max(0.0, min(unripe)) if unripe else None

    def recover_once(self) -> int:
        """One batch: retake each stale run this node may take; return how many were found."""
        stale = takeover.find_stale(self._database, self._names, BATCH)
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
            if takeover.give_up(self._database, run):
                log.error("run_given_up", attempt=run.attempt, status=run.status.value)
            return
        if run.expired and run.status is RunStatus.RUNNING:
            crash = takeover.crashes_of(self._database, run.id) + 1
            if crash >= 2:
                wait = min(CRASH_BACKOFF_MAX_S, CRASH_BACKOFF_S * 2 ** (crash - 2))
                if takeover.park(self._database, run, wait):
                    log.warning(
                        "run_crashed_again", attempt=run.attempt, crashes=crash, retry_in_s=wait
                    )
                return
        claim = takeover.retake(self._database, run, self._node_id)
        if claim is None:
            return
        if run.expired:  # its holder died or lost it, or no worker took its message: news
            log.warning(
                "run_retaken",
                attempt=claim.attempt,
                previous_holder=run.holder,
                cause="queue_expired" if run.status is RunStatus.QUEUED else "lease_expired",
            )
        else:  # a retry coming due is the normal course of things
            log.info(
                "run_retaken", attempt=claim.attempt, previous_holder=run.holder, cause="retry"
            )
        self._dispatcher.submit(claim)
