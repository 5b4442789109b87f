"""Run claimed periods: a thread pool for functions, one event loop for coroutines.

The dispatcher owns the runs this node holds, each in a phase: waiting (not started),
running (its function is called), recording (the function returned; its outcome is
with the RunWriter), lingering (it timed out in its thread and still runs there). The
Starter marks runs running in batches as workers free up; a worker calls the job and
hands the outcome to the RunWriter, which writes it with others, retrying through
database faults until it lands or is refused by the fence. A run the Starter could not
settle (not its turn, lost, a fault) starts itself on the worker, waiting and retrying.

The holder knows, by its own monotonic clock, until when each lease is surely still its
own (`valid_until`, pushed forward by every renewal, start and claim it hears back
from). A lease watch thread, which never touches the database, gives a run up the
moment that time passes: its context is cancelled, its child process killed, and its
items and checkpoints refused, before any other node may take it over.
"""

from __future__ import annotations

import asyncio
import heapq
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from functools import partial
from multiprocessing.process import BaseProcess
from typing import TypeVar

from sqlalchemy.exc import SQLAlchemyError
from structlog.typing import FilteringBoundLogger

from scheduler import metrics
from scheduler.context import RunContext
from scheduler.invoke import Outcome, invoke
from scheduler.ledger import Ledger
from scheduler.policy import Overlap, Policy
from scheduler.registry import Job
from scheduler.runwriter import Backoff, RunWriter
from scheduler.starter import Starter
from scheduler.states import Reason, RunStatus
from scheduler.store import runs
from scheduler.store.database import Database, describe_fault
from scheduler.store.runs import Claim, Finish, Held, RunKey, Start, StartRequest

QUEUE_POLL_S = 0.25
MAX_RETRY_DELAY = timedelta(hours=6)
# Another node may retry a run given back at shutdown this long after the write, by
# which time this process, whose thread may still be inside the job, has exited.
ABANDON_RETRY_S = 1.0
# How long a draining node waits, after its grace, for outcomes already with the writer.
OUTCOME_FLUSH_S = 15.0
# A run is given up this long before its lease can end, by the holder's clock: room for
# the lease watch to wake, cancel and kill, and for clocks that tick a little apart.
LEASE_MARGIN_MIN_S = 0.25
LEASE_MARGIN_SHARE = 0.1
# Runs ended here in the last while: a renewal that read them just before they ended
# must not take them for strays.
RECENT_S = 60.0
T = TypeVar("T")


class Phase(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    RECORDING = "recording"
    LINGERING = "lingering"
    ABANDONED = "abandoned"


@dataclass
class ActiveRun:
    claim: Claim
    context: RunContext
    # Resolves when the run is over, whether it ran here or was abandoned.
    future: Future[None]
    ordered: bool
    # By this process's monotonic clock, the lease is surely this node's until then.
    valid_until: float
    launched: bool = False
    phase: Phase = Phase.WAITING
    lost: bool = False
    child: BaseProcess | None = None


def lease_margin(lease_seconds: float) -> float:
    return max(LEASE_MARGIN_MIN_S, lease_seconds * LEASE_MARGIN_SHARE)


def valid_until(lease_from: float, lease_seconds: float) -> float:
    """The holder's own deadline for a lease given (or renewed) at `lease_from`."""
    return lease_from + lease_seconds - lease_margin(lease_seconds)


def retry_delay(policy: Policy, attempt: int) -> float:
    """Exponential backoff from `retry_backoff`, with up to 25 % jitter so retries spread."""
    base = policy.retry_backoff.total_seconds() * 2 ** (attempt - 1)
    delay: float = min(base * (1 + random.uniform(0, 0.25)), MAX_RETRY_DELAY.total_seconds())
    return delay


class Dispatcher:
    def __init__(
        self,
        database: Database,
        jobs: Mapping[str, Job],
        node_id: str,
        workers: int,
        log: FilteringBoundLogger,
    ) -> None:
        self._database = database
        self._jobs = jobs
        self._node_id = node_id
        self._log = log
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="run")
        self._active: dict[RunKey, ActiveRun] = {}
        self._recent: dict[RunKey, float] = {}
        # Runs whose outcome is written with no retry to come (a lingering one may still
        # be in its function): nothing more will happen to their period here.
        self._settled: set[RunKey] = set()
        # Jobs whose overlap policy is not `allow` run one period at a time on a node,
        # oldest first; their later claims (a catch-up backlog, retries) wait here.
        self._busy: set[str] = set()
        self._waiting: dict[str, list[tuple[datetime, RunKey]]] = {}
        self._lock = threading.Lock()
        self._deadlines = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._closing = threading.Event()
        self._writer = RunWriter(database, self._closing, log)
        self._starter: Starter[ActiveRun] = Starter(workers, self._start_batch, self._hand, log)
        self._loop: asyncio.AbstractEventLoop | None = None
        if any(job.is_async for job in jobs.values()):
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="coroutines", daemon=True).start()
        threading.Thread(target=self._watch_leases, name="leases", daemon=True).start()

    # -- taking runs in --------------------------------------------------------------

    def submit(self, claim: Claim) -> Future[None]:
        """Run a claim this node holds; submitting one it already runs changes nothing."""
        ordered = self._jobs[claim.job].policy.overlap is not Overlap.ALLOW
        with self._lock:
            known = self._active.get(claim.key)
            if known is not None:
                return known.future
        context = RunContext(
            job=claim.job,
            period=claim.period,
            run_id=claim.id,
            attempt=claim.attempt,
            node=self._node_id,
            origin=claim.origin,
            log=self._log.bind(
                job=claim.job,
                period=claim.period.isoformat(),
                run_id=claim.id,
                attempt=claim.attempt,
            ),
            ledger=Ledger(self._database, claim),
        )
        active = ActiveRun(
            claim, context, Future(), ordered, valid_until(claim.lease_from, claim.lease_seconds)
        )
        if self._stopping.is_set():
            # Claimed by a side thread while the node drains: give it straight back.
            self._give_back_unstarted(active)
            active.future.set_result(None)
            return active.future
        with self._lock:
            if claim.key in self._active:
                return self._active[claim.key].future
            self._active[claim.key] = active
            self._deadlines.notify()
            if ordered and claim.job in self._busy:
                heapq.heappush(self._waiting.setdefault(claim.job, []), (claim.period, claim.key))
            else:
                if ordered:
                    self._busy.add(claim.job)
                self._launch(active)
        return active.future

    def _launch(self, active: ActiveRun) -> None:
        active.launched = True
        self._starter.add(active)

    def _start_batch(self, batch: Sequence[ActiveRun]) -> list[bool]:
        """Mark runs running together, as workers free up; those not started here (not
        their turn, lost, a database fault, a node that drains) take the slow way."""
        if self._stopping.is_set():
            return [False] * len(batch)
        requests = [StartRequest(active.claim, active.ordered) for active in batch]
        sent = time.monotonic()
        try:
            started = self._writer.start_many(requests)
        except Exception:  # noqa: BLE001 - any fault here leaves the run to the slow path
            return [False] * len(batch)
        for active, result in zip(batch, started, strict=True):
            if result is Start.STARTED:
                self._extend(active, sent)
        return [result is Start.STARTED for result in started]

    def _hand(self, active: ActiveRun, started: bool) -> None:
        try:
            self._pool.submit(self._run, active, started)
        except RuntimeError:  # the pool is shut down: drain gives the run back
            self._starter.release()

    # -- running them ----------------------------------------------------------------

    def _run(self, active: ActiveRun, started: bool) -> None:
        handed_over = False
        try:
            handed_over = self._execute(active, started)
        except Exception:  # a pool thread would swallow it silently; make it seen
            active.context.log.exception("dispatch_crashed")
        finally:
            if not handed_over:
                self._done(active)
            self._starter.release()

    def _execute(self, active: ActiveRun, started_already: bool) -> bool:
        """Run one claim; True when it goes on elsewhere: it went back to wait behind an
        earlier period, or its outcome is with the writer, which ends it."""
        claim, context = active.claim, active.context
        log, job = context.log, self._jobs[claim.job]
        if not started_already:
            started = self._wait_and_start(active, job)
            if started is Start.WAIT:  # gave its thread to an earlier period of its job
                return True
            if started is not Start.STARTED:
                return False
        with self._lock:
            if active.phase is not Phase.WAITING:  # given back meanwhile
                return False
            active.phase = Phase.RUNNING
        log.info("run_started", origin=claim.origin.value)
        metrics.record_start(claim.job, claim.period)
        began = time.monotonic()
        outcome = invoke(job, context, self._loop, partial(self._attach, active))
        duration_ms = round((time.monotonic() - began) * 1000)
        with self._lock:
            if active.phase is not Phase.RUNNING:  # abandoned at the end of a drain
                return False
            active.phase = Phase.LINGERING if outcome.lingering else Phase.RECORDING
        self._record(active, job, outcome, duration_ms)
        return True

    def _wait_and_start(self, active: ActiveRun, job: Job) -> Start:
        """Start once no earlier period of the job is active, unless its overlap is `allow`.

        WAIT: an earlier period of the job arrived here meanwhile (say, retaken from a
        dead node) and took this thread; this claim waits behind it instead of blocking it.
        LOST: not ours any more, or given back because the node drains.
        """
        claim, context = active.claim, active.context
        queued = job.policy.overlap is not Overlap.ALLOW
        while True:
            if self._stopping.is_set():
                # A run that has not started does not start once the node is draining.
                self._give_back_unstarted(active)
                return Start.LOST
            sent = time.monotonic()
            started = self._persist(
                context.log,
                partial(self._writer.start, claim, after_earlier=queued),
                default=Start.LOST,
            )
            if started is Start.STARTED:
                self._extend(active, sent)
                return started
            if started is Start.LOST:
                if not self._stopping.is_set():
                    context.log.warning("run_outcome_refused", stage="start")
                return started
            if self._give_way(claim):
                return Start.WAIT
            if context.cancelled.wait(QUEUE_POLL_S):
                return Start.LOST

    def _give_way(self, claim: Claim) -> bool:
        """Swap a waiting claim for an earlier period of the same job waiting on this node."""
        with self._lock:
            waiting = self._waiting.get(claim.job)
            if not waiting or waiting[0][0] >= claim.period or self._stopping.is_set():
                return False
            _, earlier = heapq.heapreplace(waiting, (claim.period, claim.key))
            self._active[claim.key].launched = False
            self._launch(self._active[earlier])
            return True

    def _attach(self, active: ActiveRun, child: BaseProcess) -> None:
        """The run's child process exists: kill it at once if the run was lost meanwhile."""
        with self._lock:
            active.child = child
            doomed = active.lost or active.phase is Phase.ABANDONED
        if doomed:
            _kill(child)

    def _record(self, active: ActiveRun, job: Job, outcome: Outcome, duration_ms: int) -> None:
        """Hand the outcome to the writer; the run ends when it is written or refused."""
        claim = active.claim
        retry_in = None
        started = claim.starts_before + 1  # this attempt counts: it called the function
        if outcome.status is not RunStatus.SUCCEEDED and started < job.policy.max_attempts:
            retry_in = retry_delay(job.policy, started)
        finish = Finish(
            claim,
            outcome.status,
            duration_ms,
            outcome.failure,
            retry_in=retry_in,
            lingering=outcome.lingering is not None,
        )
        self._writer.finish_later(
            finish, partial(self._recorded, active, outcome, duration_ms, retry_in)
        )

    def _recorded(
        self,
        active: ActiveRun,
        outcome: Outcome,
        duration_ms: int,
        retry_in: float | None,
        written: bool | None,
    ) -> None:
        """The writer settled the outcome (None: gave up, and logged run_outcome_lost):
        say how the run ended, then end it here (a lingering one once its thread ends)."""
        log, job = active.context.log, active.claim.job
        lingering = outcome.lingering is not None and written
        if written and retry_in is None:
            with self._lock:
                self._settled.add(active.claim.key)
        try:
            if written is None:
                pass
            elif not written:
                log.warning("run_outcome_refused", stage="finish", status=outcome.status.value)
            elif outcome.status is RunStatus.SUCCEEDED:
                log.info("run_succeeded", duration_ms=duration_ms)
                metrics.record_finish(job, outcome.status, duration_ms)
            else:
                metrics.record_finish(job, outcome.status, duration_ms)
                assert outcome.failure is not None
                self._say_failed(log, outcome, duration_ms, retry_in)
        finally:
            if lingering:
                threading.Thread(
                    target=self._outlast, args=(active, outcome), name="lingering", daemon=True
                ).start()
            else:
                self._done(active)

    @staticmethod
    def _say_failed(
        log: FilteringBoundLogger, outcome: Outcome, duration_ms: int, retry_in: float | None
    ) -> None:
        """A failure with a retry to come is a warning (the retry says how it went); the
        last one is the error. Either way with the traceback (`exception`)."""
        assert outcome.failure is not None
        event = "run_timed_out" if outcome.status is RunStatus.TIMED_OUT else "run_failed"
        fields: dict[str, object] = {
            "duration_ms": duration_ms,
            "error_type": outcome.failure.type,
            "error": outcome.failure.message,
            "failure": outcome.failure,
        }
        if retry_in is None:
            log.error(event, **fields)
        else:
            log.warning(event, retry_in_s=round(retry_in, 3), **fields)

    def _outlast(self, active: ActiveRun, outcome: Outcome) -> None:
        """Wait for a timed-out function to return in its thread, then let its retry go."""
        assert outcome.lingering is not None
        outcome.lingering.join()
        try:
            self._persist(
                active.context.log,
                partial(runs.release, self._database, active.claim),
                default=False,
            )
        finally:
            self._done(active)

    def _done(self, active: ActiveRun) -> None:
        """Forget a finished run and start the next waiting period of its job, if any."""
        job = active.claim.job
        with self._lock:
            self._active.pop(active.claim.key, None)
            self._recent[active.claim.key] = time.monotonic()
            waiting = self._waiting.get(job)
            if active.ordered and waiting and not self._stopping.is_set():
                _, key = heapq.heappop(waiting)
                self._launch(self._active[key])
            elif active.ordered:
                self._busy.discard(job)
        if not active.future.done():
            active.future.set_result(None)

    # -- leases ----------------------------------------------------------------------

    def held(self) -> list[Claim]:
        with self._lock:
            return [active.claim for active in self._active.values()]

    def settled(self, key: RunKey) -> bool:
        """Whether the run's outcome is written and no retry is to come, even if its
        function still lingers in its thread past a timeout."""
        with self._lock:
            return key in self._settled

    def _extend(self, active: ActiveRun, lease_from: float) -> None:
        """The database pushed this run's lease forward after `lease_from`."""
        deadline = valid_until(lease_from, active.claim.lease_seconds)
        with self._lock:
            active.valid_until = max(active.valid_until, deadline)

    def renewed(self, held: Sequence[Held], sent: float) -> None:
        """A renewal sent at `sent` found these rows in this node's name: push their
        deadlines forward, give up the runs it did not find, and settle the rows this
        node did not know it held (a claim or start whose reply was lost)."""
        found = {row.key: row for row in held}
        lost: list[RunKey] = []
        strays: list[Held] = []
        with self._lock:
            for key, active in self._active.items():
                if key in found:
                    deadline = valid_until(sent, active.claim.lease_seconds)
                    active.valid_until = max(active.valid_until, deadline)
                elif active.claim.lease_from < sent and active.phase in (
                    Phase.WAITING,
                    Phase.RUNNING,
                ):
                    lost.append(key)
            now = time.monotonic()
            self._recent = {k: t for k, t in self._recent.items() if now - t < RECENT_S}
            strays = [
                row
                for key, row in found.items()
                if key not in self._active and key not in self._recent
            ]
        for key in lost:
            self.lose(key)
        for row in strays:
            self._settle_stray(row, sent)

    def _settle_stray(self, row: Held, sent: float) -> None:
        """A row in this node's name that nothing here runs: a claim is run; a start is
        given back to be retried; a lingering timeout's lease is dropped."""
        claim = row.as_claim(self._node_id, sent)
        log = self._log.bind(job=row.job, period=row.period.isoformat(), run_id=row.id)
        log.info("run_adopted", attempt=row.attempt, status=row.status.value)
        if row.status is RunStatus.CLAIMED:
            self.submit(claim)
        elif row.status is RunStatus.RUNNING:
            self._persist(log, partial(self._writer.finish_now, _abandon(claim, 0.0)), False)
        else:
            self._persist(log, partial(runs.release, self._database, claim), False)

    def lose_all(self) -> None:
        """Every lease may be gone (the node's liveness lock is): give every run up."""
        with self._lock:
            keys = [key for key, a in self._active.items() if a.phase is not Phase.RECORDING]
        for key in keys:
            self.lose(key)

    def lose(self, key: RunKey) -> None:
        """The lease is gone, or may be gone by now: the job must stop; its child process is
        killed, its items and checkpoints refused, and its outcome write will be refused."""
        with self._lock:
            active = self._active.get(key)
            if active is None or active.lost:
                return
            active.lost = True
            child = active.child
        if active.context.ledger is not None:
            active.context.ledger.lose()
        active.context.cancelled.set()
        if child is not None:
            _kill(child)
        active.context.log.warning("lease_lost")
        metrics.record_lease_lost(active.claim.job)

    def _watch_leases(self) -> None:
        """Give runs up the moment their holder's own deadline passes (no database call
        here: this thread must keep time while the database does not answer)."""
        while True:
            with self._deadlines:
                now = time.monotonic()
                ahead = [a.valid_until for a in self._active.values() if not a.lost]
                due = [
                    key
                    for key, active in self._active.items()
                    if not active.lost
                    and active.valid_until <= now
                    and active.phase is not Phase.RECORDING
                ]
                if not due:
                    later = [moment for moment in ahead if moment > now]
                    self._deadlines.wait(min(later) - now if later else None)
                    continue
            for key in due:
                self.lose(key)

    # -- shutdown --------------------------------------------------------------------

    def drain(self, grace: float, before_giving_back: Callable[[], None] | None = None) -> int:
        """Let running jobs finish within `grace` seconds while their leases are still
        renewed; then give back what still runs. Returns how many runs were given back.

        Runs that have not started never start now and are given back at once. A
        function that returned inside the grace keeps its outcome, however long the
        writer takes to land it. After the grace, child processes are killed before
        anything is given back; `before_giving_back` runs then (the daemon stops its
        heartbeat and marks itself stopped), and the give-back writes are the last.
        """
        self._stopping.set()
        with self._lock:
            unlaunched = [a for a in self._active.values() if not a.launched]
        for active in unlaunched:
            self._give_back_unstarted(active)
            self._done(active)
        with self._lock:
            pending = [active.future for active in self._active.values()]
        wait(pending, timeout=grace)
        with self._lock:
            still = [a for a in self._active.values() if a.phase is Phase.RUNNING]
            for active in still:
                active.phase = Phase.ABANDONED
            lingering = [a for a in self._active.values() if a.phase is Phase.LINGERING]
            recording = [a.future for a in self._active.values() if a.phase is Phase.RECORDING]
        for active in still:
            active.context.cancelled.set()
            if active.child is not None:
                _kill(active.child)
        self._closing.set()
        wait(recording, timeout=OUTCOME_FLUSH_S)
        if before_giving_back is not None:
            before_giving_back()
        given_back = [active for active in still if self._give_back(active)]
        for active in lingering:
            self._persist(
                active.context.log,
                partial(runs.release, self._database, active.claim, after=ABANDON_RETRY_S),
                default=False,
            )
        self._close()
        return len(given_back) + sum(1 for active in unlaunched if active.phase is Phase.ABANDONED)

    def _give_back_unstarted(self, active: ActiveRun) -> None:
        """Give back a run that never started here: it may be retried at once, and no
        attempt is counted against it. Fenced on `claimed`, so that a start that landed
        meanwhile keeps the run (its worker runs it). The caller ends the run here."""
        abandon = _abandon(active.claim, 0.0, waiting_only=True)
        if self._persist(active.context.log, partial(self._writer.finish_now, abandon), False):
            with self._lock:
                active.phase = Phase.ABANDONED
            active.context.cancelled.set()
            active.context.log.info("run_given_back", reason=Reason.SHUTDOWN.value)

    def _give_back(self, active: ActiveRun) -> bool:
        """Give back a run whose function still ran when the grace ended."""
        abandon = _abandon(active.claim, ABANDON_RETRY_S)
        written = self._persist(
            active.context.log, partial(self._writer.finish_now, abandon), default=False
        )
        if written:
            active.context.log.warning("run_abandoned", reason=Reason.SHUTDOWN.value)
            metrics.record_finish(active.claim.job, RunStatus.ABANDONED, None)
        if not active.future.done():
            active.future.set_result(None)
        return written

    def _close(self) -> None:
        self._starter.close()
        self._writer.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def _persist(self, log: FilteringBoundLogger, write: Callable[[], T], default: T) -> T:
        """Retry a write through database faults until the database answers.

        Once the backoff is exhausted (the node is closing), give up and return
        `default`: the lease will expire and another node takes the period.
        """
        backoff = Backoff(self._closing)
        while True:
            try:
                return write()
            except SQLAlchemyError as error:
                if backoff.exhausted:
                    log.error("run_outcome_lost", error=describe_fault(error))
                    return default
                log.warning(
                    "database_unavailable", error=describe_fault(error), retry_in=backoff.delay
                )
                backoff.sleep()


def _abandon(claim: Claim, retry_in: float, *, waiting_only: bool = False) -> Finish:
    return Finish(
        claim,
        RunStatus.ABANDONED,
        None,
        reason=Reason.SHUTDOWN,
        retry_in=retry_in,
        waiting_only=waiting_only,
    )


def _kill(child: BaseProcess) -> None:
    """Kill a run's child process and wait for it to be gone."""
    if child.is_alive():
        child.kill()
    child.join(timeout=5)
