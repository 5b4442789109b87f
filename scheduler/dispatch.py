"""Run claimed periods: a thread pool for functions, one event loop for coroutines.

The dispatcher owns the runs this node holds. The Starter marks runs running in
batches as workers free up; a worker calls the job and hands the outcome to the
node's RunWriter, which writes it with others, retrying through database faults
until it lands or is refused by the fence. A run the Starter could not settle (not
its turn, lost, a fault) starts itself on the worker, waiting and retrying there.
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
from functools import partial
from typing import TypeVar

from sqlalchemy.exc import DBAPIError
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
from scheduler.store.database import Database, first_line
from scheduler.store.runs import Claim, Finish, RunKey, Start, StartRequest

QUEUE_POLL_S = 0.25
MAX_RETRY_DELAY = timedelta(hours=6)
T = TypeVar("T")


@dataclass
class ActiveRun:
    claim: Claim
    context: RunContext
    # Resolves when the run is over, whether it ran here or was abandoned.
    future: Future[None]
    ordered: bool
    launched: bool = False


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
        # Jobs whose overlap policy is not `allow` run one period at a time on a node,
        # oldest first; their later claims (a catch-up backlog, retries) wait here.
        self._busy: set[str] = set()
        self._waiting: dict[str, list[tuple[datetime, RunKey]]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._closing = threading.Event()
        self._writer = RunWriter(database, self._closing, log)
        self._starter: Starter[ActiveRun] = Starter(workers, self._start_batch, self._hand, log)
        self._loop: asyncio.AbstractEventLoop | None = None
        if any(job.is_async for job in jobs.values()):
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="coroutines", daemon=True).start()

    def submit(self, claim: Claim) -> Future[None]:
        log = self._log.bind(
            job=claim.job,
            period=claim.period.isoformat(),
            run_id=claim.id,
            attempt=claim.attempt,
        )
        context = RunContext(
            job=claim.job,
            period=claim.period,
            run_id=claim.id,
            attempt=claim.attempt,
            node=self._node_id,
            origin=claim.origin,
            log=log,
            ledger=Ledger(self._database, claim),
        )
        ordered = self._jobs[claim.job].policy.overlap is not Overlap.ALLOW
        active = ActiveRun(claim, context, Future(), ordered)
        if self._stopping.is_set():
            # Claimed by a side thread while the node drains: give it straight back.
            self._abandon(claim, context)
            active.future.set_result(None)
            return active.future
        with self._lock:
            self._active[claim.key] = active
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
        their turn, lost, a database fault) start the slow way."""
        requests = [StartRequest(active.claim, active.ordered) for active in batch]
        try:
            started = self._writer.start_many(requests)
        except DBAPIError:
            return [False] * len(batch)
        return [result is Start.STARTED for result in started]

    def _hand(self, active: ActiveRun, started: bool) -> None:
        try:
            self._pool.submit(self._run, active, started)
        except RuntimeError:  # the pool is shut down: drain abandons the run
            self._starter.release()

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

    def _done(self, active: ActiveRun) -> None:
        """Forget a finished run and start the next waiting period of its job, if any."""
        job = active.claim.job
        with self._lock:
            self._active.pop(active.claim.key, None)
            waiting = self._waiting.get(job)
            if active.ordered and waiting and not self._stopping.is_set():
                _, key = heapq.heappop(waiting)
                self._launch(self._active[key])
            elif active.ordered:
                self._busy.discard(job)
        active.future.set_result(None)

    def held(self) -> list[Claim]:
        with self._lock:
            return [active.claim for active in self._active.values()]

    def lose(self, key: RunKey) -> None:
        """The lease is gone: tell the job to stop; its outcome write will be refused."""
        with self._lock:
            active = self._active.get(key)
        if active and not active.context.cancelled.is_set():
            active.context.log.warning("lease_lost")
            metrics.record_lease_lost(active.claim.job)
            active.context.cancelled.set()

    def drain(self, grace: float) -> int:
        """Wait up to `grace` seconds for running jobs; abandon the rest. Returns how many."""
        self._stopping.set()
        with self._lock:
            pending = [active.future for active in self._active.values() if active.launched]
        wait(pending, timeout=grace)
        self._closing.set()
        self._starter.close()
        with self._lock:
            left = list(self._active.values())
        for active in left:
            self._abandon(active.claim, active.context)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        return len(left)

    def _abandon(self, claim: Claim, context: RunContext) -> None:
        """Give the period back at shutdown; retry_in=0 lets any other node's recovery
        pass take it at once."""
        context.cancelled.set()
        abandon = partial(
            self._writer.finish_now,
            Finish(claim, RunStatus.ABANDONED, None, reason=Reason.SHUTDOWN, retry_in=0),
        )
        if self._persist(context.log, abandon, default=False):
            context.log.warning("run_abandoned", reason=Reason.SHUTDOWN.value)
            metrics.record_finish(claim.job, RunStatus.ABANDONED, None)

    def _execute(self, active: ActiveRun, started_already: bool) -> bool:
        """Run one claim; True when it goes on elsewhere: it went back to wait behind an
        earlier period, or its outcome is with the writer, which ends it."""
        claim, context = active.claim, active.context
        log, job = context.log, self._jobs[claim.job]
        started = True if started_already else self._wait_and_start(claim, job, context)
        if started is None:
            return True
        if not started:
            if not self._stopping.is_set():
                log.warning("run_outcome_refused", stage="start")
            return False
        log.info("run_started", origin=claim.origin.value)
        metrics.record_start(claim.job, claim.period)
        began = time.monotonic()
        outcome = invoke(job, context, self._loop)
        duration_ms = round((time.monotonic() - began) * 1000)
        self._record(active, job, outcome, duration_ms)
        return True

    def _wait_and_start(self, claim: Claim, job: Job, context: RunContext) -> bool | None:
        """Start once no earlier period of the job is active, unless its overlap is `allow`.

        None: an earlier period of the job arrived here meanwhile (say, retaken from a dead
        node) and took this thread; this claim waits behind it instead of blocking it.
        """
        queued = job.policy.overlap is not Overlap.ALLOW
        while True:
            started = self._persist(
                context.log,
                partial(self._writer.start, claim, after_earlier=queued),
                default=Start.LOST,
            )
            if started is not Start.WAIT:
                return started is Start.STARTED
            if self._give_way(claim):
                return None
            if self._stopping.is_set():
                # A waiting period does not start once the node is draining.
                self._abandon(claim, context)
                return False
            if context.cancelled.wait(QUEUE_POLL_S):
                return False

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

    def _record(self, active: ActiveRun, job: Job, outcome: Outcome, duration_ms: int) -> None:
        """Hand the outcome to the writer; the run ends when it is written or refused."""
        claim = active.claim
        retry_in = None
        if outcome.status is not RunStatus.SUCCEEDED and claim.attempt < job.policy.max_attempts:
            retry_in = retry_delay(job.policy, claim.attempt)
        finish = Finish(claim, outcome.status, duration_ms, outcome.failure, retry_in=retry_in)
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
        say how the run ended, then end it here."""
        log, job = active.context.log, active.claim.job
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
                event = "run_timed_out" if outcome.status is RunStatus.TIMED_OUT else "run_failed"
                log.error(
                    event,
                    duration_ms=duration_ms,
                    error_type=outcome.failure.type,
                    error=outcome.failure.message,
                    retry_in_s=None if retry_in is None else round(retry_in, 3),
                )
        finally:
            self._done(active)

    def _persist(self, log: FilteringBoundLogger, write: Callable[[], T], default: T) -> T:
        """Retry a write through database faults until the database answers.

        Once the backoff is exhausted (the node is closing), give up and return
        `default`: the lease will expire and another node takes the period.
        """
        backoff = Backoff(self._closing)
        while True:
            try:
                return write()
            except DBAPIError as error:
                if backoff.exhausted:
                    log.error("run_outcome_lost", error=first_line(error.orig))
                    return default
                log.warning(
                    "database_unavailable", error=first_line(error.orig), retry_in=backoff.delay
                )
                backoff.sleep()
