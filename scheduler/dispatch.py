"""Run claimed periods: a thread pool for functions, one event loop for coroutines.

The dispatcher owns the runs this node holds. Each run marks itself running,
calls the job, and records the outcome, retrying that write through database
faults until it lands or is refused by the fence.
"""

from __future__ import annotations

import asyncio
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial

import structlog
from sqlalchemy.exc import DBAPIError

from scheduler.context import RunContext
from scheduler.registry import Job
from scheduler.states import Reason, RunStatus
from scheduler.store import runs
from scheduler.store.database import Database, first_line
from scheduler.store.runs import Claim, Failure

TRACEBACK_LIMIT = 4000
RETRY_FIRST_DELAY_S = 0.2
RETRY_MAX_DELAY_S = 5.0


@dataclass
class ActiveRun:
    claim: Claim
    context: RunContext
    future: Future[None]


class Dispatcher:
    def __init__(
        self,
        database: Database,
        jobs: Mapping[str, Job],
        node_id: str,
        workers: int,
        log: structlog.stdlib.BoundLogger,
    ) -> None:
        self._database = database
        self._jobs = jobs
        self._node_id = node_id
        self._log = log
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="run")
        self._active: dict[str, ActiveRun] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        if any(job.is_async for job in jobs.values()):
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="coroutines", daemon=True).start()

    def submit(self, claim: Claim) -> None:
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
        )
        with self._lock:
            future = self._pool.submit(self._execute, claim, context)
            self._active[claim.id] = ActiveRun(claim, context, future)
        future.add_done_callback(lambda _: self._forget(claim.id))

    def held(self) -> list[Claim]:
        with self._lock:
            return [active.claim for active in self._active.values()]

    def lose(self, run_id: str) -> None:
        """The lease is gone: tell the job to stop; its outcome write will be refused."""
        with self._lock:
            active = self._active.get(run_id)
        if active and not active.context.cancelled.is_set():
            active.context.log.warning("lease_lost")
            active.context.cancelled.set()

    def drain(self, grace: float) -> int:
        """Wait up to `grace` seconds for running jobs; abandon the rest. Returns how many."""
        with self._lock:
            pending = [active.future for active in self._active.values()]
        wait(pending, timeout=grace)
        self._closing.set()
        with self._lock:
            left = list(self._active.values())
        for active in left:
            active.context.cancelled.set()
            recorded = self._persist(
                active.context.log,
                partial(
                    runs.finish,
                    self._database,
                    active.claim,
                    RunStatus.ABANDONED,
                    0,
                    reason=Reason.SHUTDOWN,
                ),
            )
            if recorded:
                active.context.log.warning("run_abandoned", reason=Reason.SHUTDOWN.value)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        return len(left)

    def _forget(self, run_id: str) -> None:
        with self._lock:
            self._active.pop(run_id, None)

    def _execute(self, claim: Claim, context: RunContext) -> None:
        log, job = context.log, self._jobs[claim.job]
        if not self._persist(log, lambda: runs.start(self._database, claim)):
            log.warning("run_outcome_refused", stage="start")
            return
        log.info("run_started", origin=claim.origin.value)
        began = time.monotonic()
        failure = self._call(job, context)
        duration_ms = round((time.monotonic() - began) * 1000)
        status = RunStatus.FAILED if failure else RunStatus.SUCCEEDED
        if not self._persist(
            log, lambda: runs.finish(self._database, claim, status, duration_ms, failure=failure)
        ):
            log.warning("run_outcome_refused", stage="finish", status=status.value)
        elif failure:
            log.error(
                "run_failed",
                duration_ms=duration_ms,
                error_type=failure.type,
                error=failure.message,
            )
        else:
            log.info("run_succeeded", duration_ms=duration_ms)

    def _call(self, job: Job, context: RunContext) -> Failure | None:
        """Call the job; any exception it raises becomes a Failure, never ours."""
        arguments = (context,) if job.takes_context else ()
        try:
            if job.is_async:
                assert self._loop is not None
                asyncio.run_coroutine_threadsafe(job.func(*arguments), self._loop).result()
            else:
                job.func(*arguments)
        except Exception as error:  # noqa: BLE001 - a job's failure is data, not a crash
            return Failure(
                type=f"{type(error).__module__}.{type(error).__qualname__}",
                message=str(error)[:2000],
                traceback="".join(traceback.format_exception(error))[-TRACEBACK_LIMIT:],
            )
        return None

    def _persist(self, log: structlog.stdlib.BoundLogger, write: Callable[[], bool]) -> bool:
        """Retry a fenced write through database faults until the database answers."""
        delay = RETRY_FIRST_DELAY_S
        while True:
            try:
                return write()
            except DBAPIError as error:
                if self._closing.is_set() and delay >= RETRY_MAX_DELAY_S:
                    log.error("run_outcome_lost", error=first_line(error.orig))
                    return False
                log.warning("database_unavailable", error=first_line(error.orig), retry_in=delay)
                time.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_DELAY_S)
