"""The recovery loop: take over runs whose lease expired, and failed runs whose retry is due.

It sleeps until the earliest lease expiry or retry by the database clock, so a dead
node's run is retaken right after its lease ends. When polling (see
`scheduler.node.wakeups`) it also looks every `interval`; with wake-ups it sleeps until
told (a notification, or a deadline the heartbeat read) and looks only then.

On PostgreSQL it also looks, each pass, for nodes whose liveness lock is gone. A lock
goes when its process dies, but also when its session merely ends (a restart, a
terminated backend, a proxy), so it is taken for a death only when the evidence is
unambiguous: it vanished while this node's own lock was held all along (the other
took its lock after this node's own, or a heartbeat saw it held under this node's
current lock), and it stayed gone, its row naming it still, for CONFIRM_S while this
node's own lock stayed the same. A live holder whose session ended takes a new lock
within that (or gives its runs up first, see `scheduler.node.liveness`). Then the dead
node's leases are ended and its runs taken over in the same pass, and its share of the
due periods is claimed by the others from then on. A lock that went during this node's
own outage (a database restart) proves nothing: the lease decides.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Collection, Mapping
from typing import Protocol

from structlog.typing import FilteringBoundLogger

from scheduler.model import Claim, Stale
from scheduler.node.peers import Peers
from scheduler.node.wakeups import Wakeups
from scheduler.registry import Job
from scheduler.states import RunStatus
from scheduler.store import nodes, takeover
from scheduler.store.database import Database
from scheduler.store.faults import StoreError
from scheduler.store.nodes import Watched
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
# How long a node's liveness lock must have been gone, while this node's own was held,
# before its runs are taken: a live holder whose session ended takes a new lock well
# within it, or, cut off, gives its runs up `liveness.RESTORE_WITHIN_S` after its loss,
# leaving a body that watches `ctx.cancelled` a second to stop.
CONFIRM_S = 1.5
# How long a lock seen held under this node's own is remembered as seen.
SEEN_KEEP_S = 600.0
# With wake-ups, the longest sleep between passes when nothing is known to be due: the
# heartbeat re-reads every deadline each beat, so this is only a last resort.
SWEEP_S = 300.0


class RunsInHand(Protocol):
    """What recovery asks of the runs this node holds: the node's dispatcher, or the
    harness of `scheduler.testing`, which runs the retaken claims in the caller's thread."""

    def returned(self) -> Collection[str]:
        """Ids of runs whose function returned here, their outcome not yet written."""
        ...

    def submit(self, claim: Claim) -> object:
        """Run a claim this node just retook."""
        ...


class Recovery(SideThread):
    def __init__(
        self,
        *,
        database: Database,
        dispatcher: RunsInHand,
        jobs: Mapping[str, Job],
        node_id: str,
        interval: float,
        stop: threading.Event,
        log: FilteringBoundLogger,
        peers: Peers | None = None,
        wakeups: Wakeups | None = None,
        own_key: Callable[[], int | None] = lambda: None,
    ) -> None:
        super().__init__("recovery", stop, log)
        self._database = database
        self._dispatcher = dispatcher
        self._jobs = jobs
        self._node_id = node_id
        self._interval = interval
        self._peers = peers
        self._wakeups = wakeups
        if wakeups is not None:
            wakeups.recovery = self
        # This node's liveness lock held now (None: none, or being taken again).
        self._own_key = own_key
        # Locks seen gone: since when (this process's monotonic clock), and under which
        # of this node's own locks.
        self._gone_since: dict[tuple[str, int], tuple[float, int | None]] = {}
        self._released: set[tuple[str, int]] = set()
        # Locks a heartbeat saw held while this node's own (the value) was: when.
        self._seen: dict[tuple[str, int], tuple[int, float]] = {}
        self._seen_lock = threading.Lock()
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
        if set(gone) - {node for node, _ in self._released} - {self._node_id}:
            self.wake_in(0.0)

    def seen_held(self, ring: list[Watched], own_key: int) -> None:
        """A heartbeat read these locks held while this node's own, `own_key`, was."""
        moment = time.monotonic()
        with self._seen_lock:
            kept = {k: v for k, v in self._seen.items() if moment - v[1] < SEEN_KEEP_S}
            self._seen = kept | {(node.id, node.key): (own_key, moment) for node in ring}

    def find_gone(self) -> float | None:
        """End the leases of nodes surely dead (see the module docstring); how long until
        the next candidate may be judged."""
        own_key = self._own_key()
        vanished = nodes.vanished(self._database, self._node_id, own_key)
        moment = time.monotonic()
        current = {(node.id, node.key): node for node in vanished}
        since: dict[tuple[str, int], tuple[float, int | None]] = {}
        for lock in current:
            first, under = self._gone_since.get(lock, (moment, own_key))
            # Seen gone under another lock of this node's own: its timing says nothing.
            since[lock] = (first, under) if under == own_key else (moment, own_key)
        self._gone_since = since
        self._released &= set(current)
        if current and self._peers is not None:
            self._peers.drop({node.id for node in vanished})
        if own_key is None:
            return None
        with self._seen_lock:
            seen = dict(self._seen)
        ripe: list[Watched] = []
        waiting: list[float] = []
        for lock, node in current.items():
            if lock in self._released:
                continue
            witnessed = node.after_mine or seen.get(lock, (None, 0.0))[0] == own_key
            if not witnessed:
                continue
            ripens = since[lock][0] + CONFIRM_S - moment
            if ripens <= 0:
                ripe.append(Watched(node.id, node.key))
            else:
                waiting.append(ripens)
        if ripe:
            released = nodes.release_runs_of(self._database, ripe, own_key)
            self._released |= {(node.id, node.key) for node in ripe}
            self._log.warning(
                "nodes_lost", lost=sorted(node.id for node in ripe), runs_released=released
            )
        return min(waiting) if waiting else None

    def recover_once(self) -> int:
        """One batch: retake each stale run this node may take; return how many were found."""
        # The jobs themselves: a schedule's run (`@<key>`) is found by its row.
        stale = takeover.find_stale(self._database, self._jobs, BATCH)
        for run in stale:
            self._recover(run)
        return len(stale)

    def _recover(self, run: Stale) -> None:
        if run.holder == self._node_id and run.id in self._dispatcher.returned():
            # Its function returned here and its outcome is being written: taking it
            # over would run it again for nothing (another node still may).
            return
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
