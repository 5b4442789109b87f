"""The long-lived loop: sleep until something is due, claim it in one batch, dispatch.

The loop wakes at the earliest of "next period" and "stop requested"; it never polls.
A large instant wakes it half a second earlier too, to make that instant's batch ready
(PREPARE_AHEAD_S); it is claimed at its time all the same.
Side threads (heartbeat, recovery, catch-up, requests, pruner) are supervised: if one
of them dies, the node stops rather than run without it.

Shutdown stops the loop and the side threads that claim, then drains the dispatcher
while the heartbeat still renews the leases of what runs, and stops the heartbeat last.
"""

from __future__ import annotations

import gc
import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import structlog
from structlog.typing import FilteringBoundLogger

from scheduler import config, identity, metrics
from scheduler.durations import parse_duration
from scheduler.model import ClaimResult, Due, NodeIdentity
from scheduler.node import liveness
from scheduler.node.alerts import Alerts
from scheduler.node.catchup_loop import CatchUp, CatchUpLoop
from scheduler.node.claimed import log_claims
from scheduler.node.clock import Clock
from scheduler.node.heartbeat import Heartbeat
from scheduler.node.liveness import Liveness
from scheduler.node.liveness import Mode as LivenessMode
from scheduler.node.peers import HANDOFF_S, Peers, jobs_digest
from scheduler.node.pruner import Pruner
from scheduler.node.recovery import CONFIRM_S, Recovery
from scheduler.node.requests import Requests
from scheduler.node.schedule_loop import ScheduleLoop
from scheduler.node.turns import DEFAULT_GRACE as DEFAULT_HEALTHZ_GRACE
from scheduler.node.turns import LoopTurns
from scheduler.node.upcoming import Upcoming
from scheduler.node.wakeups import Mode as WakeupMode
from scheduler.node.wakeups import Wakeups
from scheduler.node.watch import Watch
from scheduler.policy import CatchupBudget, Policy
from scheduler.registry import Job
from scheduler.run.dispatcher import JOB_CONNECTIONS, Dispatcher
from scheduler.run.job_table import JobTable
from scheduler.run.observers import RunObserver
from scheduler.store import claims, nodes, periods
from scheduler.store.database import Database
from scheduler.store.faults import StoreError
from scheduler.supervision import StopSignal

# The defaults are the command's (scheduler.config), parsed once.
DEFAULT_RECOVERY_INTERVAL = parse_duration(config.DEFAULT_RECOVERY_INTERVAL)
DEFAULT_CATCHUP_INTERVAL = parse_duration(config.DEFAULT_CATCHUP_INTERVAL)
DEFAULT_SUMMARY_INTERVAL = parse_duration(config.DEFAULT_SUMMARY_INTERVAL)
# A node beats at least as often as a job with the default lease needs.
LONGEST_HEARTBEAT = Policy().heartbeat
CLAIM_RETRY_S = 1.0
# How often, at most, a node says that the database refused periods as early.
EARLY_WARNING_S = 60.0
# Periods this node could not claim for this long (database down) are left to catch-up.
LATE_LIMIT = timedelta(minutes=5)
# An instant with at least PREPARE_MIN periods due is taken off the schedule this long
# before it comes: its periods are sorted into this node's share and the peers', what a
# claim needs is made for each, and the threads its runs need are started, while the
# node waits rather than in the instant, where that work delays the claims and starts
# of the burst itself (bench b). A smaller instant is not worth the extra wake-up.
PREPARE_AHEAD_S = 0.5
PREPARE_MIN = 100
# Allocations between young-generation collections (CPython's default is 700). A short
# run allocates a few hundred objects and frees nearly all of them by reference count,
# so collecting every 700 allocations was a large share of a run's CPU (bench/run_path
# measures it; see BENCHMARKS.md).
GC_YOUNG_THRESHOLD = 20_000
# Connections a node needs beside its jobs' (`JOB_CONNECTIONS`): heartbeat, recovery,
# catch-up, the loop's claims, starter, outcome writer, pruner, HTTP probes and metrics.
SIDE_CONNECTIONS = 10
# A database call of the heartbeat or the run path may take at most half the shortest
# lease (and never less than this, nor more than the cap): it cannot block past a lease.
CALL_TIMEOUT_MIN_S = 1.0
CALL_TIMEOUT_MAX_S = 15.0
# Catch-up passes and prunes write thousands of rows a statement: they get longer.
BULK_CALL_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class DaemonSettings:
    workers: int
    grace: timedelta
    recovery_interval: timedelta = DEFAULT_RECOVERY_INTERVAL
    catchup_interval: timedelta = DEFAULT_CATCHUP_INTERVAL
    # Prune history older than this now and then; None keeps everything.
    retention: timedelta | None = None
    liveness: LivenessMode = LivenessMode.AUTO
    # How often the node says how many periods ran elsewhere (None: never).
    summary_interval: timedelta | None = DEFAULT_SUMMARY_INTERVAL
    # At most this many catch-up runs of all jobs per window (`--catchup-budget`).
    catchup_budget: CatchupBudget | None = None
    # How far past its due time the main loop may be before /healthz says it is stuck.
    healthz_grace: timedelta = DEFAULT_HEALTHZ_GRACE


def pool_size(workers: int) -> int:
    """How many connections a node with `workers` may open at once: its jobs' share and
    its own threads'. A worker's own writes (a run started or given back outside a
    batch) are short and take whichever is free."""
    return min(workers, JOB_CONNECTIONS) + SIDE_CONNECTIONS


def call_timeout(jobs: Iterable[Job]) -> float:
    """The deadline of each database call of a node that runs these jobs."""
    shortest = min((job.policy.lease.total_seconds() for job in jobs), default=30.0)
    return min(CALL_TIMEOUT_MAX_S, max(CALL_TIMEOUT_MIN_S, shortest / 2))


class Daemon:
    def __init__(
        self,
        database: Database,
        jobs: Mapping[str, Job],
        node: NodeIdentity,
        settings: DaemonSettings,
        observers: Sequence[RunObserver] = (),
    ) -> None:
        database = database.bounded(call_timeout(jobs.values()))
        bulk = database.bounded(BULK_CALL_TIMEOUT_S)
        self._database = database
        self._jobs = jobs
        self._node = node
        self._settings = settings
        self._liveness: Liveness | None = None
        self._stop = StopSignal()
        self._clock = Clock(database.time_source)
        self._retrying = False
        self._early_said = -EARLY_WARNING_S
        # The live loop claims every period after this instant; earlier ones are
        # catch-up's. Set again once the database clock is read (`run`): this host's
        # clock, which is all the node has until then, may be off by any amount.
        self._live_since = self._clock.now()
        self._log: FilteringBoundLogger = structlog.get_logger("scheduler").bind(node=node.id)
        self._summary = Summary(settings.summary_interval, self._log)
        # When the loop's next turn is due, for /healthz (which reads it, no database).
        self.turns = LoopTurns(settings.healthz_grace)
        # The jobs by the name their runs carry: these, and the schedules over them.
        table = JobTable(jobs, database)
        self.dispatcher = Dispatcher(
            database, table, node.id, settings.workers, self._log, observers=observers
        )
        self.dispatcher.liveness_grace = CONFIRM_S - liveness.RESTORE_WITHIN_S
        self._wakeups = Wakeups(self._log)
        self._watch: Watch | None = None
        self.peers = Peers(node.id)
        heartbeat = min([job.policy.heartbeat for job in jobs.values()] + [LONGEST_HEARTBEAT])
        self.heartbeat = Heartbeat(
            database=database,
            dispatcher=self.dispatcher,
            node_id=node.id,
            interval=heartbeat.total_seconds(),
            log=self._log,
            clock=self._clock,
            peers=self.peers,
            halt=self._stop,
            schedule_jobs=tuple(sorted(table.code)),
        )
        self._recovery = Recovery(
            database=database,
            dispatcher=self.dispatcher,
            jobs=table,
            node_id=node.id,
            interval=settings.recovery_interval.total_seconds(),
            stop=self._stop,
            log=self._log,
            peers=self.peers,
            wakeups=self._wakeups,
            own_key=self._liveness_key,
        )
        self._requests = Requests(
            database=database,
            dispatcher=self.dispatcher,
            jobs=jobs,
            node_id=node.id,
            stop=self._stop,
            log=self._log,
            wakeups=self._wakeups,
        )
        self._alerts = Alerts(
            database=database,
            jobs=table,
            node_id=node.id,
            stop=self._stop,
            log=self._log,
            wakeups=self._wakeups,
        )
        self._catch_up = CatchUpLoop(
            catch_up=CatchUp(
                bulk,
                table,
                node.id,
                self.dispatcher.submit,
                self._log,
                live_since=self._live_since,
                live_retry=LATE_LIMIT,
                fleet_budget=settings.catchup_budget,
            ),
            clock=self._clock,
            interval=settings.catchup_interval,
            stop=self._stop,
            log=self._log,
            wakeups=self._wakeups,
        )
        self._schedules = ScheduleLoop(
            database=database,
            table=table,
            dispatcher=self.dispatcher,
            node_id=node.id,
            stop=self._stop,
            log=self._log,
            wakeups=self._wakeups,
            fleet_budget=settings.catchup_budget,
            paced=self._catch_up.deferred_heard,
        )
        self._pruner = (
            Pruner(database=bulk, retention=settings.retention, stop=self._stop, log=self._log)
            if settings.retention
            else None
        )

    def _liveness_key(self) -> int | None:
        """The liveness lock this node holds now, if any."""
        return self._liveness.key if self._liveness is not None else None

    def request_stop(self) -> None:
        self._stop.set()
        self._wake_side_threads()

    def _wake_side_threads(self) -> None:
        """They sleep until told; the stop is news too."""
        if self._watch is not None:
            self._watch.close()
        for side in (
            self._recovery,
            self._requests,
            self._catch_up,
            self._schedules,
            self._pruner,
        ):
            if side is not None:
                side.wake_in(0.0)

    def run(self) -> int:
        """Serve until asked to stop; return how many runs were abandoned at shutdown."""
        tune_garbage_collection()
        key = self._take_liveness()
        self._supersede_earlier()
        nodes.register(self._database, self._node, jobs_digest(self._jobs.values()), key)
        if self._liveness is not None:
            self._liveness.start()
        if self._watch is not None:
            self._watch.start()
        self.heartbeat.calibrate()
        self._live_since = self._clock.now()
        self._catch_up.live_from(self._live_since)
        self.heartbeat.find_peers()
        self._log.info(
            "node_started",
            given_name=self._node.given_name,
            host=self._node.host,
            pid=self._node.pid,
            version=self._node.version,
            jobs=len(self._jobs),
        )
        self.heartbeat.start()
        self._recovery.start()
        self._requests.start()
        self._alerts.start()
        self._catch_up.start()
        self._schedules.start()
        if self._pruner is not None:
            self._pruner.start()
        try:
            self._loop()
        finally:
            self.turns.stopping()
            abandoned = self._shutdown()
        return abandoned

    def _take_liveness(self) -> int | None:
        """Bind this node's liveness to a session lock where the database allows it;
        the key to write in its row, or None when the lease alone decides."""
        mode, why = liveness.choose(self._database, self._settings.liveness)
        # The same fact decides both: sessions of the node's own keep a lock, and keep
        # what was prepared on them.
        own_sessions = mode is LivenessMode.SESSION
        if own_sessions:
            self._database.prepare_statements()
        self._log.info("liveness_mode", mode=mode.value, why=why, prepared_statements=own_sessions)
        if not own_sessions:
            self._wakeups.choose(WakeupMode.POLL, f"no session of its own ({why})")
            return None
        # Imported here: psycopg's sessions are for PostgreSQL, and a node on SQLite
        # (which never gets this far) starts without loading psycopg at all.
        from scheduler.store.liveness import PeerWatch, SessionLock  # noqa: PLC0415

        lock = SessionLock(self._database, f"scheduler {self._node.name}")
        key = lock.connect()
        self._liveness = Liveness(
            database=self._database,
            node_id=self._node.id,
            lock=lock,
            give_up=self.dispatcher.lose_all,
            log=self._log,
            halt=self._stop,
            wakeups=self._wakeups,
        )
        self._watch = Watch(
            database=self._database,
            node_id=self._node.id,
            peer_watch=PeerWatch(self._database, f"scheduler {self._node.name}"),
            stop=self._stop,
            log=self._log,
        )
        self._wakeups.watch = self._watch
        self.heartbeat.wakeups = self._wakeups
        self.heartbeat.liveness = self._liveness
        self._wakeups.choose(WakeupMode.EVENTS, "LISTEN on the liveness session")
        return key

    def _supersede_earlier(self) -> None:
        """An earlier incarnation of this node (same name and host) whose process has
        surely ended without saying so: mark it stopped and let its runs be taken at
        once. Only on evidence that names the process itself (`identity.ended`): never a
        pid alone, never one whose liveness lock is held; a row from another container
        or boot is left to the lease and to the peers."""
        dead = [
            previous.id
            for previous in nodes.earlier_incarnations(self._database, self._node)
            if not (previous.liveness_key is not None and previous.lock_held)
            and identity.ended(previous.process)
        ]
        if dead:
            released = nodes.supersede(self._database, dead)
            self._log.warning("node_superseded", earlier=dead, runs_released=released)

    def _loop(self) -> None:
        upcoming = Upcoming(self._jobs.values(), self._live_since)
        # Periods of this node's share, and any a database fault kept for another try.
        pending: list[Due] = []
        # Periods of the peers' shares: (when to look at them, the periods).
        handed: deque[tuple[float, list[Due]]] = deque()
        # Instants taken off the schedule, their periods sorted, by claim time.
        prepared: dict[datetime, Instant] = {}
        while not self._stop.is_set():
            now = self._clock.now()
            self._prepare(upcoming, now, prepared)
            for at in sorted(at for at in prepared if at <= now):
                instant = prepared.pop(at)
                pending += instant.mine
                if instant.theirs:
                    handed.append((time.monotonic() + HANDOFF_S, instant.theirs))
            looked: list[Due] = []
            # After a failed claim the peers are likely stuck too: their shares are
            # looked at now, so that the backlog is claimed in one batch once the
            # database answers (periods claimed together do not skip each other).
            while handed and (self._retrying or handed[0][0] <= time.monotonic()):
                looked += handed.popleft()[1]
            batch = pending + self._left_over(looked)
            pending = self._claim(batch, now, retried=self._retrying)
            self._retrying = bool(pending)
            waits = [CLAIM_RETRY_S] if pending else []
            summary_in = self._summary.tell()
            if summary_in is not None:
                waits.append(summary_in)
            if prepared:
                waits.append((min(prepared) - self._clock.now()).total_seconds())
            following = upcoming.next_instant()
            if following is not None:
                at, periods = following
                ahead = PREPARE_AHEAD_S if periods >= PREPARE_MIN else 0.0
                waits.append((at - self._clock.now()).total_seconds() - ahead)
            if handed:
                waits.append(handed[0][0] - time.monotonic())
            pause = max(0.0, min(waits)) if waits else None
            self.turns.waiting(pause)
            self._stop.wait(pause)

    def _prepare(
        self, upcoming: Upcoming, now: datetime, prepared: dict[datetime, Instant]
    ) -> None:
        """Take off the schedule what is due by now, and the next instant ahead of time
        if it is large (PREPARE_AHEAD_S); sort each instant's periods into this node's
        share and the peers', with what a claim needs made for each."""
        horizon = now
        following = upcoming.next_instant()
        if following is not None:
            at, periods = following
            if periods >= PREPARE_MIN and (at - now).total_seconds() <= PREPARE_AHEAD_S:
                horizon = max(now, at)
        mine = self.peers.mine
        for at, job, period in upcoming.pop_until(horizon):
            instant = prepared.get(at)
            if instant is None:
                instant = prepared[at] = Instant([], [])
            (instant.mine if mine(job.name) else instant.theirs).append(job.due(period))
        for at, instant in prepared.items():
            if at > now and not instant.warmed:
                instant.warmed = True
                self.dispatcher.prepare(len(instant.mine))
                self._log.debug(
                    "instant_prepared",
                    at=at.isoformat(),
                    ahead_s=round((at - now).total_seconds(), 3),
                    periods=len(instant.mine) + len(instant.theirs),
                    here=len(instant.mine),
                )

    def _left_over(self, theirs: list[Due]) -> list[Due]:
        """What the peers' shares still lack; all of it if the database cannot say."""
        if not theirs:
            return []
        if self._wakeups.listening:  # what a peer's claim said it claimed needs no read
            unheard = self._wakeups.claims.unheard(theirs)
            self._summary.elsewhere += len(theirs) - len(unheard)
            theirs = unheard
            if not theirs:
                return []
        try:
            left = periods.unclaimed(self._database, theirs)
        except StoreError as error:
            self._log.warning("claim_failed", error=error.message, periods=len(theirs))
            return theirs
        if left:
            self._log.info("peer_share_claimed", periods=len(left), of=len(theirs))
        self._summary.elsewhere += len(theirs) - len(left)
        return left

    def _claim(self, due: list[Due], now: datetime, *, retried: bool) -> list[Due]:
        """Claim and dispatch; on a database fault keep the periods for the next try.
        Periods the database clock has not reached yet are kept too, and said.

        `retried`: the claim is tried again after a fault, whose commit may have landed
        with its reply lost: rows already in this node's name are taken as won.
        """
        if not due:
            return []
        # Runs are dispatched once the whole batch is claimed: their threads would
        # compete with, and so delay, the claiming of the rest when thousands are due at
        # once. Chunks committed before a fault are dispatched all the same.
        committed: list[ClaimResult] = []

        def chunk_committed(result: ClaimResult) -> None:
            committed.append(result)
            self.turns.moved()  # a large claim is a long turn, not a stuck one

        due, slots = self._set_workers_aside(due)
        try:
            result = claims.claim(
                self._database,
                due,
                self._node.id,
                committed=chunk_committed,
                adopt=retried,
                returned=self.dispatcher.returned(),
            )
        except StoreError as error:
            self._log.warning("claim_failed", error=error.message, periods=len(due))
            # The rest is retried; a period claimed meanwhile by another node (or by
            # this one, in a chunk that committed) is simply not returned again.
            return [item for item in due if now - item.period < LATE_LIMIT]
        finally:
            for part in committed:
                slots -= self._dispatch(part, slots)
            self.dispatcher.unreserve(slots)
        if result.early:
            self._early(result.early)
        metrics.record_claims(len(due) - len(result.early), result.won, result.skipped)
        self._summary.here += len(result.won)
        self._summary.elsewhere += (
            len(due) - len(result.won) - len(result.skipped) - len(result.early)
        )
        if self._log.is_enabled_for(logging.DEBUG):
            taken = {(claim.job, claim.period) for claim in result.won + result.skipped}
            early = {(item.job, item.period) for item in result.early}
            for item in due:
                if (item.job, item.period) not in taken | early:
                    self._log.debug("run_claim_lost", job=item.job, period=item.period.isoformat())
        return result.early

    def _early(self, early: list[Due]) -> None:
        """The database says these periods have not come yet: this node's clock is ahead
        of it. Read the clock again, say so once a while, and keep the periods."""
        try:
            self.heartbeat.calibrate()
        except StoreError as error:
            self._log.warning("heartbeat_failed", error=error.message)
        moment = time.monotonic()
        if moment - self._early_said >= EARLY_WARNING_S:
            self._early_said = moment
            first = min(item.period for item in early)
            self._log.warning(
                "clock_skew",
                stage="claim",
                periods=len(early),
                first=first.isoformat(),
                offset_s=round(self._clock.offset.total_seconds(), 3),
            )

    def _set_workers_aside(self, due: list[Due]) -> tuple[list[Due], int]:
        """Where the claim can start what it claims (PostgreSQL), set an idle worker
        aside for each due job and ask the claim to start its period (the claim starts
        only the earliest of a job): the function is then called one transaction sooner.
        How many were set aside."""
        # Periods kept from an earlier try were asked to start then, not now.
        due = [replace(item, start=False) if item.start else item for item in due]
        if not self._database.arrays:
            return due, 0
        chosen = set(self.dispatcher.reserve(list(dict.fromkeys(item.job for item in due))))
        asked = [replace(item, start=True) if item.job in chosen else item for item in due]
        return asked, len(chosen)

    def _dispatch(self, result: ClaimResult, slots: int = 0) -> int:
        """One committed chunk of a claim: log it and start its runs. Runs that the
        claim started go to the `slots` workers set aside for them; how many were used."""
        log_claims(self._log, result)
        used = 0
        for claim in result.won:
            if claim.id in result.started and used < slots:
                if self.dispatcher.submit_started(claim):
                    used += 1
            else:
                # Without a worker set aside (an adopted start), it starts the slow way:
                # its start write finds it running under its own fence and keeps it so.
                self.dispatcher.submit(claim)
        return used

    def _shutdown(self) -> int:
        self._stop.set()
        self._wake_side_threads()
        running = len(self.dispatcher.held())
        self._log.info(
            "node_stopping", running=running, grace_s=self._settings.grace.total_seconds()
        )
        abandoned = self.dispatcher.drain(
            self._settings.grace.total_seconds(), before_giving_back=self._leave
        )
        self._log.info("node_stopped", abandoned=abandoned)
        sides = (
            self.heartbeat,
            self._recovery,
            self._requests,
            self._alerts,
            self._catch_up,
            self._schedules,
        )
        for side in (*sides, self._pruner):
            if side is not None and side.failure is not None:
                raise RuntimeError(f"the {side.name} thread died") from side.failure
        return abandoned

    def _leave(self) -> None:
        """The drain is over: stop renewing and say this node is gone (its liveness lock
        goes last, once its row says it stopped)."""
        self.heartbeat.stop()
        try:
            nodes.mark_stopped(self._database, self._node.id)
        except StoreError as error:
            self._log.warning("node_stop_unrecorded", error=error.message)
        if self._liveness is not None:
            self._liveness.close()


@dataclass
class Instant:
    """The periods due at one claim time, taken off the schedule: this node's share and
    the peers' (looked at after HANDOFF_S)."""

    mine: list[Due]
    theirs: list[Due]
    # Its runs' threads were started ahead of it (`Dispatcher.prepare`).
    warmed: bool = False


class Summary:
    """Counts the periods this node claimed and those other nodes had, and now and then
    says so (`periods_elsewhere`): with several replicas most periods run elsewhere,
    and a quiet node should not look like one that does nothing."""

    def __init__(self, interval: timedelta | None, log: FilteringBoundLogger) -> None:
        self._interval = interval.total_seconds() if interval else None
        self._log = log
        self._since = time.monotonic()
        self.here = 0
        self.elsewhere = 0

    def tell(self) -> float | None:
        """Say it if the interval is over; how long until the next time (None: never)."""
        if self._interval is None:
            return None
        moment = time.monotonic()
        if moment - self._since >= self._interval:
            if self.elsewhere:
                self._log.info(
                    "periods_elsewhere",
                    periods=self.elsewhere,
                    here=self.here,
                    window_s=round(moment - self._since),
                )
            self._since, self.here, self.elsewhere = moment, 0, 0
        return self._since + self._interval - moment


def tune_garbage_collection() -> None:
    """The jobs, their schedules and the libraries are loaded and live as long as the
    node: moved out of the collector's sight, a full collection no longer walks them
    all (a pause that grows with the number of jobs), and young collections are rarer."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)
