"""The worker's side of a remote executor: one delivered message, run under its fence.

Whatever the task queue (Celery today), a delivery goes the same way as a run on a node:

1. the message is read and its job found among those the worker imported;
2. `store.handoff.take` starts the run, compare-and-set on the message's fence and
   deadline, under a holder name of this delivery's own: a stale message (an older
   attempt, a run already settled, a second copy, one past its deadline) starts
   nothing and is only logged (`delivery_refused`), so the queue may acknowledge it;
3. the renewal thread renews the lease in that name a third of the way into it, and the
   lease watch gives the run up (`ctx.cancelled`, items refused) by this process's
   clock before the lease can end on the database, when renewals fail;
4. the function is called by the same executors a node uses, under the job's timeout,
   watched by the same observers (a trace span, child of the node's send span by the
   context the message's headers carry; Sentry check-ins);
5. the outcome (with its retry, error and traceback) is written fenced by
   `store.writes`, and logged like a node logs it.

A worker never retakes or resends anything: that stays with the nodes' recovery loop.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from functools import partial
from multiprocessing.process import BaseProcess
from typing import Any

from structlog.typing import FilteringBoundLogger

from scheduler.alerting.propagation import extracted_context
from scheduler.model import Claim, Delivery, Finish, RunKey
from scheduler.registry import Job
from scheduler.remote import TaskMessage
from scheduler.run import observers as run_observers
from scheduler.run import outcomes
from scheduler.run.context import RunContext
from scheduler.run.executors import Executors
from scheduler.run.items import run_context
from scheduler.run.leases import LeaseWatch, valid_until
from scheduler.run.observers import Ending, RunObserver
from scheduler.run.overdue import outlast
from scheduler.run.writer import Settled
from scheduler.states import RunStatus
from scheduler.store import handoff, renewals, writes
from scheduler.store.database import Database
from scheduler.store.faults import StoreError
from scheduler.supervision import persist


class Delivered(Enum):
    """What became of one delivery (the task queue acknowledges it in every case)."""

    RAN = "ran"  # the function was called and its outcome settled
    REFUSED = "refused"  # a stale message: nothing started
    UNREADABLE = "unreadable"  # not a message this worker can read
    UNKNOWN_JOB = "unknown_job"  # no such job imported here: re-sent at its deadline
    UNSTARTED = "unstarted"  # the database did not answer before the message's deadline


@dataclass
class _Held:
    claim: Claim
    context: RunContext
    stop: threading.Event
    # When the renewal thread renews its lease next (monotonic).
    renew_at: float
    lost: bool = False
    # Its function has been called and the renewal thread has yet to say so.
    unsaid: bool = False


class _Deadline(threading.Event):
    """Set by itself once `seconds` have passed: how long a start may be retried."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self._at = time.monotonic() + seconds

    def is_set(self) -> bool:
        return time.monotonic() >= self._at or super().is_set()


class WorkerRuns:
    """The runs one worker process holds, one per delivery being run."""

    def __init__(
        self,
        database: Database,
        jobs: Mapping[str, Job],
        worker: str,
        log: FilteringBoundLogger,
        observers: Sequence[RunObserver] = (),
    ) -> None:
        self._database = database
        self._observers = list(observers)
        self._jobs = jobs
        self._worker = worker
        self._log = log
        self._executors = Executors(jobs.values())
        self._held: dict[RunKey, _Held] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._leases = LeaseWatch(self._lose)
        threading.Thread(target=self._renew_forever, name="renewals", daemon=True).start()

    def holder_name(self) -> str:
        """A name of this delivery's own: a second copy of the message, even in this very
        process, never passes for the first."""
        return f"{self._worker}/{os.getpid()}/{uuid.uuid4().hex[:8]}"[:200]

    def deliver(self, body: Mapping[str, Any], trace: Mapping[str, str] | None = None) -> Delivered:
        """Run one delivered message, if it is still this attempt's to run. `trace`: the
        sender's trace context, from the message's headers."""
        try:
            message = TaskMessage.from_kwargs(dict(body), trace)
        except ValueError as error:
            self._log.error("delivery_unreadable", error=str(error), body=repr(body)[:500])
            return Delivered.UNREADABLE
        holder = self.holder_name()
        log = self._log.bind(
            job=message.job,
            period=message.period.isoformat(),
            run_id=message.run_id,
            attempt=message.attempt,
            node=holder,
        )
        job = self._jobs.get(message.job)
        if job is None:
            log.error("delivery_unknown_job", known=len(self._jobs))
            return Delivered.UNKNOWN_JOB
        delivery = self._take(message, holder, log)
        if delivery is None:
            return Delivered.UNSTARTED
        if delivery.claim is None:
            assert delivery.refusal is not None
            log.info(
                "delivery_refused",
                refusal=delivery.refusal.value,
                status=delivery.status.value if delivery.status else None,
            )
            return Delivered.REFUSED
        self._run(job, delivery, message.trace, log)
        return Delivered.RAN

    def _take(
        self, message: TaskMessage, holder: str, log: FilteringBoundLogger
    ) -> Delivery | None:
        """Start the run, retried through database faults until its deadline passes."""
        sent = Claim(
            message.run_id,
            message.job,
            message.period,
            message.attempt,
            message.holder,
            message.deadline_s,
            message.origin,
        )
        return persist(
            partial(handoff.take, self._database, sent, holder),
            log=log,
            closing=_Deadline(message.deadline_s),
            default=None,
        )

    def _run(
        self,
        job: Job,
        delivery: Delivery,
        trace: Mapping[str, str],
        log: FilteringBoundLogger,
    ) -> None:
        claim = delivery.claim
        assert claim is not None
        with extracted_context(trace):  # the node's send span is the parent
            watched = run_observers.live(self._observers)
            watching = run_observers.begin(watched, job, claim, claim.holder, log)
        log = log.bind(**watching.fields)
        context = run_context(claim, node=claim.holder, database=self._database, log=log)
        if watching.fields:
            context = replace(context, trace=watching.fields)
        held = _Held(claim, context, threading.Event(), time.monotonic() + claim.lease_seconds / 3)
        with self._lock:
            self._held[claim.key] = held
            self._changed.notify()
        self._leases.watch(claim.key, valid_until(claim.lease_from, claim.lease_seconds))
        try:
            log.info("run_started", origin=claim.origin.value, queued_ms=delivery.queued_ms)
            with self._lock:  # said by the renewal thread once the call is under way
                held.unsaid = True
                self._changed.notify()
            began = time.monotonic()
            with watching.current():
                outcome = self._executors.for_job(job).call(job, context, _no_child)
            duration_ms = round((time.monotonic() - began) * 1000)
            written = outcomes.finish(claim, job.policy, outcome, duration_ms)
            settled = self._write(written, held, log)
            outcomes.report(log, written, outcome, settled)
            watching.ended(
                Ending(
                    outcome.status,
                    outcome.failure,
                    final=written.retry_in is None,
                    written=settled is Settled.WRITTEN,
                    duration_ms=duration_ms,
                )
            )
            if outcome.lingering is not None and settled is Settled.WRITTEN:
                # The work still runs: its retry waits for it (said once if overdue).
                outlast(outcome.lingering, log)
                self._release(claim, held, log)
        finally:
            # A run cut short by a bug of ours still ends its watch (once only).
            watching.ended(Ending(RunStatus.ABANDONED, None, False, False, None))
            held.stop.set()
            self._leases.forget(claim.key)
            with self._lock:
                self._held.pop(claim.key, None)

    def _write(self, written: Finish, held: _Held, log: FilteringBoundLogger) -> Settled:
        """The outcome, fenced; retried through faults while the lease may still be ours."""
        applied = persist(
            lambda: writes.record(self._database, [written], [])[0][0],
            log=log,
            closing=held.context.cancelled,
            default=None,
        )
        if applied is None:
            return Settled.LOST
        return Settled.WRITTEN if applied else Settled.REFUSED

    def _release(self, claim: Claim, held: _Held, log: FilteringBoundLogger) -> None:
        persist(
            partial(writes.release, self._database, claim),
            log=log,
            closing=held.context.cancelled,
            default=False,
        )

    def _renew_forever(self) -> None:
        """One thread renews every run of the process, each a third of the way into its
        lease (a delivery's holder name is its own, so one statement a run), and says
        which bodies have begun (`store.writes.record`)."""
        while True:
            with self._lock:
                now = time.monotonic()
                due = [held for held in self._held.values() if held.renew_at <= now]
                unsaid = [held for held in self._held.values() if held.unsaid]
                if not due and not unsaid:
                    later = [held.renew_at for held in self._held.values()]
                    self._changed.wait(min(later) - now if later else None)
                    continue
                for held in due:
                    held.renew_at = now + held.claim.lease_seconds / 3
                for held in unsaid:
                    held.unsaid = False
            if unsaid:
                self._say_began(unsaid)
            for held in due:
                self._renew(held)

    def _say_began(self, unsaid: Sequence[_Held]) -> None:
        """Only a body said to have begun makes a later period skip; unsaid (the
        database away), the periods wait their turn instead."""
        try:
            writes.began(self._database, [held.claim for held in unsaid])
        except StoreError as error:
            self._log.warning("run_began_unsaid", runs=len(unsaid), error=error.message)

    def _renew(self, held: _Held) -> None:
        claim = held.claim
        sent = time.monotonic()
        try:
            found = renewals.renew_leases(self._database, claim.holder)
        except StoreError as error:  # the lease watch gives the run up in time
            held.context.log.warning("lease_renewal_failed", error=error.message)
            return
        if any(row.key == claim.key for row in found):
            self._leases.extend(claim.key, valid_until(sent, claim.lease_seconds))
        elif not held.stop.is_set():
            self._lose(claim.key)

    def _lose(self, key: RunKey) -> None:
        """The lease is gone, or may be by now: the function must stop, its items and
        checkpoints are refused, and its outcome write will be refused by the fence."""
        with self._lock:
            held = self._held.get(key)
            if held is None or held.lost or held.stop.is_set():
                return
            held.lost = True
        if held.context.run_items is not None:
            held.context.run_items.lose()
        held.context.cancelled.set()
        held.context.log.warning("lease_lost")


def _no_child(_child: BaseProcess) -> None:
    """Workers run no child processes of ours: `isolation="process"` is refused."""
