"""The runs this node holds, from claim to outcome.

`submit` takes a claim in and keeps it as an `ActiveRun` until its outcome is settled;
runs of a job whose overlap is not `allow` wait here behind the job's earlier period.
The threads around it (see `scheduler/run/__init__.py` for the drawing):

- the starter marks waiting runs running in one statement as workers free up, and hands
  each to a worker; a run it could not start (not its turn, lost, a fault) is handed
  over all the same and starts itself the slow way, waiting and retrying;
- a worker calls the function on the job's executor and hands the outcome to the
  outcome writer, then takes the next run;
- the outcome writer writes outcomes together and calls back `_recorded`, which logs
  how the run ended; once the batch's lines are out, `_end` ends it here (starting the
  next waiting period of its job);
- the lease watch gives a run up when its holder's deadline passes (`lose`); the
  heartbeat's renewals push those deadlines forward (`renewed`).
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, wait
from dataclasses import replace
from datetime import datetime
from functools import partial
from multiprocessing.process import BaseProcess
from typing import TypeVar

from structlog.typing import FilteringBoundLogger

from scheduler import logs, metrics
from scheduler.errors import JobDefinitionError
from scheduler.model import Claim, Finish, Held, QueueRequest, RunKey, Started, StartRequest
from scheduler.policy import Isolation, Overlap, key_for
from scheduler.registry import Job
from scheduler.remote import Remote
from scheduler.run import observers, orphans, outcomes, remote
from scheduler.run.active import ActiveRun, Phase
from scheduler.run.executors import Executors
from scheduler.run.failures import Lingering, Outcome, describe
from scheduler.run.items import run_context
from scheduler.run.leases import LeaseWatch, lease_margin, valid_until
from scheduler.run.observers import Ending, RunObserver
from scheduler.run.orphans import Orphan
from scheduler.run.overdue import outlast
from scheduler.run.pooled import PoolWaiters
from scheduler.run.starter import Starter
from scheduler.run.threads import RunThreads
from scheduler.run.writer import RunWriter, Settled
from scheduler.states import Reason, RunStatus
from scheduler.store import concurrency, writes
from scheduler.store.database import Database
from scheduler.supervision import persist

QUEUE_POLL_S = 0.25
# Another node may retry a run given back at shutdown this long after the write, by
# which time this process, whose thread may still be inside the job, has exited.
ABANDON_RETRY_S = 1.0
# How long a draining node waits, after its grace, for outcomes already with the writer.
OUTCOME_FLUSH_S = 15.0
# Runs ended here in the last while: a renewal that read them just before they ended
# must not take them for strays.
RECENT_S = 60.0
# Connections a node's jobs hold at once for their items and checkpoints, however many
# workers it has: a worker waits for one beyond that. Three nodes of 16 plus their own
# threads stay under PostgreSQL's default of 100 connections.
JOB_CONNECTIONS = 16
T = TypeVar("T")


class Dispatcher:
    def __init__(
        self,
        database: Database,
        jobs: Mapping[str, Job],
        node_id: str,
        workers: int,
        log: FilteringBoundLogger,
        *,
        observers: Sequence[RunObserver] = (),
    ) -> None:
        self._database = database
        # What jobs write (items, checkpoints) goes through its own share of the pool.
        self._jobs_database = database.shared(min(workers, JOB_CONNECTIONS), holders="jobs")
        self._observers = list(observers)
        self._jobs = jobs
        self._node_id = node_id
        self._log = log
        self._pool = RunThreads(workers, "run")
        self._executors = Executors(jobs.values())
        self._active: dict[RunKey, ActiveRun] = {}
        self._recent: dict[RunKey, float] = {}
        # Runs whose outcome is written with no retry to come (a lingering one may still
        # be in its function): nothing more will happen to their period here.
        self._settled: set[RunKey] = set()
        # Jobs with a run in turn (overlap not `allow`) launched here; their later
        # periods (a catch-up backlog, retries) wait in `_waiting`, earliest first.
        self._busy: set[str] = set()
        self._waiting: dict[str, list[tuple[datetime, RunKey]]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._closing = threading.Event()
        self._leases = LeaseWatch(self.lose)
        # How long after giving its runs up for its liveness the peers may take them
        # over, at the soonest (set by the daemon from the recovery's confirmation).
        self.liveness_grace = 1.0
        self._writer = RunWriter(database, self._closing, log)
        self._starter: Starter[ActiveRun] = Starter(workers, self._start_batch, self._hand, log)
        self._pools: PoolWaiters[ActiveRun] = PoolWaiters(self._relaunch, log)

    # -- taking runs in --------------------------------------------------------------

    def submit(self, claim: Claim) -> Future[None]:
        """Run a claim this node holds; submitting one it already runs changes nothing."""
        with self._lock:
            known = self._active.get(claim.key)
            if known is not None:
                return known.future
        log = self._log.bind(
            job=claim.job, period=claim.period.isoformat(), run_id=claim.id, attempt=claim.attempt
        )
        job = self._jobs[claim.job]
        context = run_context(
            claim, node=self._node_id, database=self._jobs_database, log=log, args=job.args
        )
        in_turn = job.policy.overlap is not Overlap.ALLOW
        pool, pool_key = _pool_of(job)
        active = ActiveRun(claim, context, in_turn, job, pool=pool, pool_key=pool_key)
        if self._stopping.is_set():
            # Claimed by a side thread while the node drains: give it straight back.
            self._give_back_unstarted(active)
            active.future.set_result(None)
            return active.future
        with self._lock:
            if claim.key in self._active:
                return self._active[claim.key].future
            self._active[claim.key] = active
            self._leases.watch(claim.key, valid_until(claim.lease_from, claim.lease_seconds))
            if in_turn and claim.job in self._busy:
                heapq.heappush(self._waiting.setdefault(claim.job, []), (claim.period, claim.key))
            else:
                if in_turn:
                    self._busy.add(claim.job)
                self._launch(active)
        return active.future

    def prepare(self, runs: int) -> None:
        """`runs` periods of this node are due in a moment: have the threads they will
        need ready before the instant rather than start them in it."""
        if not self._stopping.is_set():
            self._pool.warm(runs)

    def reserve(self, jobs: Sequence[str]) -> list[str]:
        """Of these jobs (due now, at most one period each), those whose next period a
        worker is set aside for, so that its claim may mark it running at once: local
        jobs with nothing of theirs in hand here, while workers are idle and no run
        waits for one. Each slot goes to the run its claim started (`submit_started`) or
        back with `unreserve`."""
        if self._stopping.is_set():
            return []
        with self._lock:
            free = [
                name
                for name in jobs
                if self._jobs[name].remote is None
                and self._jobs[name].policy.pool is None  # a pool's start decides
                and name not in self._busy
            ]
        taken = self._starter.take(len(free))
        return free[:taken]

    def unreserve(self, count: int) -> None:
        """Give back workers set aside by `reserve` that no started claim used."""
        for _ in range(count):
            self._starter.release()

    def submit_started(self, claim: Claim) -> bool:
        """Run a claim that its claim statement already marked running, on a worker set
        aside by `reserve`. False when this node has the run in hand already (its slot
        is then the caller's to give back)."""
        log = self._log.bind(
            job=claim.job, period=claim.period.isoformat(), run_id=claim.id, attempt=claim.attempt
        )
        job = self._jobs[claim.job]
        context = run_context(
            claim, node=self._node_id, database=self._jobs_database, log=log, args=job.args
        )
        in_turn = job.policy.overlap is not Overlap.ALLOW
        pool, pool_key = _pool_of(job)
        active = ActiveRun(claim, context, in_turn, job, pool=pool, pool_key=pool_key)
        with self._lock:
            if claim.key in self._active:
                return False
            self._active[claim.key] = active
            self._leases.watch(claim.key, valid_until(claim.lease_from, claim.lease_seconds))
            if in_turn:
                self._busy.add(claim.job)
            active.launched = True
        self._hand(active, True)
        return True

    def _launch(self, active: ActiveRun) -> None:
        active.launched = True
        self._starter.add(active)

    def _start_batch(self, batch: Sequence[ActiveRun]) -> list[bool]:
        """Mark runs running together, as workers free up; those not started here (not
        their turn, lost, a database fault, a node that drains) take the slow way."""
        if self._stopping.is_set():
            return [False] * len(batch)
        with self._lock:  # a run given up while it waited is not started (see below)
            live = [active for active in batch if not active.lost]
        here = [active for active in live if self._remote(active) is None]
        pooled = [active for active in live if active.pool is not None]
        plain = [active for active in here if active.pool is None]
        away = [a for a in live if self._remote(a) is not None and a.pool is None]
        results: dict[RunKey, Started] = {}
        try:
            if plain:
                started = self._writer.start_many([_start_request(a) for a in plain])
                results |= {a.claim.key: r for a, r in zip(plain, started, strict=True)}
            if pooled:
                started = self._start_pooled_many(pooled)
                results |= {a.claim.key: r for a, r in zip(pooled, started, strict=True)}
                for active in pooled:
                    # Parked by `_hand`, once the starter is done with it: parked here,
                    # the waiters could launch it again before the starter handed it on.
                    active.held_back = results[active.claim.key] is Started.POOLED
            if away:
                queued = self._writer.queue_many([self._queue_request(a) for a in away])
                results |= {a.claim.key: r for a, r in zip(away, queued, strict=True)}
        except Exception:  # noqa: BLE001 - any fault here leaves the run to the slow path
            return [False] * len(batch)
        # A start leaves the lease as it was: the claim or the last renewal set it, and
        # they moved the watch's deadlines too.
        begun = [active for active in here if results[active.claim.key] is Started.STARTED]
        if begun and not observers.live(self._observers):
            # Said here, in one write, before the workers get them: a worker that wrote
            # its own line gave up the GIL and took the handler's lock in the middle of
            # a burst, where both are contended (bench.run_path: 0.78 of the CPU a run).
            # With observers watching (`observers.live`) the worker says it, with the
            # trace ids they bind.
            with logs.together():
                for active in begun:
                    active.context.log.info("run_started", origin=active.claim.origin.value)
                    active.said_started = True
        return [results.get(active.claim.key) is Started.STARTED for active in batch]

    def _remote(self, active: ActiveRun) -> Remote | None:
        return active.job.remote

    def _queue_request(self, active: ActiveRun) -> QueueRequest:
        job_remote = self._remote(active)
        assert job_remote is not None
        return remote.queue_request(active.claim, job_remote, in_turn=active.in_turn)

    def _hand(self, active: ActiveRun, started: bool) -> None:
        held_back = active.held_back and not started
        active.held_back = False
        if held_back:  # it waits for its pool on no thread: the slot is free again
            self._park(active)
            self._starter.release()
            return
        try:
            self._pool.submit(self._run, active, started)
        except RuntimeError:  # the pool is shut down: drain gives the run back
            self._starter.release()

    # -- running them ----------------------------------------------------------------

    def _run(self, active: ActiveRun, started: bool) -> None:
        handed_over = False
        try:
            handed_over = self._execute(active, started)
        except Exception as error:  # a pool thread would swallow it silently; make it seen
            active.context.log.exception("dispatch_crashed")
            self._settle_crashed(active, error)
        finally:
            if not handed_over:
                self._done(active)
            self._starter.release()

    def _settle_crashed(self, active: ActiveRun, error: Exception) -> None:
        """A bug in dispatch must not leave the run held: one whose function may have been
        called is recorded failed with the bug's traceback (retried as its job allows);
        one that never got that far is given back for its next attempt. Fenced: a no-op
        once another node holds it."""
        with self._lock:
            phase = active.phase
            active.phase = Phase.ABANDONED
        if phase in (Phase.RECORDING, Phase.SENDING, Phase.ABANDONED):
            return  # its outcome is with the writer, or it is another's to settle
        claim = active.claim
        if phase is Phase.WAITING:
            settle = outcomes.abandon(claim, 0.0, reason=Reason.LEASE_EXPIRED)
        else:
            policy = active.job.policy
            settle = outcomes.finish(claim, policy, Outcome(RunStatus.FAILED, describe(error)), 0)
        if self._persist(active, partial(self._writer.finish_now, settle), False):
            active.context.log.warning(
                "run_settled_after_crash", status=settle.status.value, phase=phase.value
            )

    def _execute(self, active: ActiveRun, started_already: bool) -> bool:
        """Run one claim. True: the run goes on elsewhere (it went back to wait behind an
        earlier period, or its outcome is with the writer, which ends it); False: it is
        over here."""
        claim, job = active.claim, active.job
        if not started_already:
            started = self._wait_and_start(active)
            # WAIT: gave its thread to an earlier period of its job; POOLED: parked until
            # its pool has a slot.
            if started in (Started.WAIT, Started.POOLED):
                return True
            if started is not Started.STARTED:
                return False
        if job.remote is not None:
            self._send(active, job.remote)
            return False
        with self._lock:
            if active.phase is not Phase.WAITING:  # given back meanwhile
                return False
            # Checked by this process's own clock just before the call, not after it: a
            # node frozen between its start and here may wake with its lease gone.
            late = active.lost or not self._leases.valid(claim.key)
            if not late:
                active.phase = Phase.RUNNING
        if late:
            self._give_back_late(active)
            return False
        return self._call(active, job)

    def _call(self, active: ActiveRun, job: Job) -> bool:
        """Call the function of a run marked RUNNING here, and hand its outcome to the
        writer; False if the node abandoned it meanwhile (the end of a drain)."""
        claim, context = active.claim, active.context
        watching = observers.begin(
            observers.live(self._observers), job, claim, self._node_id, context.log
        )
        if watching.fields:  # a trace's ids, on every line of the run from here on
            context = replace(
                context, log=context.log.bind(**watching.fields), trace=watching.fields
            )
            active.context = context
        if not active.said_started:
            context.log.info("run_started", origin=claim.origin.value)
        metrics.record_start(claim.job, claim.period)
        # Said once the call is under way (the writer lingers before it writes), never
        # before: a start the database has is no proof that the body ever ran.
        self._writer.began(claim)
        began = time.monotonic()
        with watching.current():
            outcome = self._executors.for_job(job).call(job, context, partial(self._attach, active))
        duration_ms = round((time.monotonic() - began) * 1000)
        # Returned after its lease may have ended on the database (its deadline and the
        # margin passed by this process's clock: the node froze, a paused VM): a
        # takeover may have run it meanwhile. Said as an orphan.
        deadline = self._leases.deadline(claim.key)
        margin = lease_margin(claim.lease_seconds)
        past_lease = deadline is not None and time.monotonic() > deadline + margin
        if active.orphan is not None:
            active.orphan.returned(past_lease=past_lease)
        elif past_lease:
            orphans.returned_late(context.log)
        with self._lock:
            if active.phase is not Phase.RUNNING:  # abandoned at the end of a drain
                watching.ended(Ending(RunStatus.ABANDONED, None, False, False, duration_ms))
                return False
            active.phase = Phase.LINGERING if outcome.lingering else Phase.RECORDING
            lost = active.lost
        if outcome.lingering is None:
            self._leases.forget(claim.key)  # nothing of it runs any more to be stopped
        if lost and outcome.lingering is None:
            # Told to stop: whatever it returned, it may not have done its work. As if its
            # node had died, the period runs again as its next attempt (if the row is
            # still this attempt's: a takeover made it another's, and refuses this).
            outcome = Outcome(RunStatus.ABANDONED)
            written = outcomes.abandon(claim, 0.0, reason=Reason.LEASE_EXPIRED)
            written = replace(written, duration_ms=duration_ms)
        else:
            written = outcomes.finish(claim, job.policy, outcome, duration_ms)
        recorded = partial(self._recorded, active, written, outcome, watching)
        self._writer.finish_later(written, recorded)
        return True

    def _send(self, active: ActiveRun, job_remote: Remote) -> None:
        """The run is marked queued: send its message; the run ends here either way (a
        worker holds it from its start on; an unsent one is retaken and sent again)."""
        with self._lock:
            if active.phase is not Phase.WAITING:
                return
            active.phase = Phase.SENDING
        # The queued lease is the message's deadline, renewed by nobody: nothing to watch.
        self._leases.forget(active.claim.key)
        claim, log = active.claim, active.context.log
        around = observers.sending(
            self._observers, active.job, claim, self._node_id, job_remote.queue, log=log
        )
        remote.send(self._database, claim, job_remote, log, around)

    def _wait_and_start(self, active: ActiveRun) -> Started:
        """Start once no earlier period of the job is active, unless its overlap is `allow`.

        WAIT: an earlier period of the job arrived here meanwhile (say, retaken from a
        dead node) and took this thread; this claim waits behind it instead of blocking it.
        LOST: not ours any more, or given back because the node drains.
        """
        claim, context = active.claim, active.context
        while True:
            with self._lock:
                lost = active.lost
            if lost:
                # Its lease was given up while it waited (see `lose`): it must not start
                # here. If the row is still this attempt's, give it back so that any
                # node may take it at once (fenced: a no-op once somebody else holds it).
                self._give_back_unstarted(active, Reason.LEASE_EXPIRED)
                return Started.LOST
            if self._stopping.is_set():
                # A run that has not started does not start once the node is draining.
                self._give_back_unstarted(active)
                return Started.LOST
            started = self._persist(active, self._start_write(active), Started.LOST)
            if started is Started.POOLED:
                self._park(active)
            if started in (Started.STARTED, Started.POOLED):
                return started
            if started is Started.LOST:
                if not self._stopping.is_set():
                    context.log.warning("run_outcome_refused", stage="start")
                return started
            if self._give_way(claim):
                return Started.WAIT
            if context.cancelled.wait(QUEUE_POLL_S):
                with self._lock:
                    lost = active.lost
                if not lost:
                    return Started.LOST
                # Lost while it polled: the top of the loop gives it back unstarted.

    def _give_back_late(self, active: ActiveRun) -> None:
        """A run started in the database whose lease this node gave up (or, by its own
        clock, has lost) before its function was called: it is not called here. Given
        back for its next attempt, fenced: refused once another node holds it."""
        self.lose(active.claim.key)
        abandon = outcomes.abandon(active.claim, 0.0, reason=Reason.LEASE_EXPIRED)
        if self._persist(active, partial(self._writer.finish_now, abandon), False):
            active.context.log.info(
                "run_given_back", reason=Reason.LEASE_EXPIRED.value, stage="before_call"
            )
        with self._lock:
            active.phase = Phase.ABANDONED

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

    def _start_write(self, active: ActiveRun) -> Callable[[], Started]:
        """The write that starts this run: through its pool, here, or to a task queue."""
        if active.pool is not None:
            return partial(self._start_pooled, active)
        if self._remote(active) is None:
            return partial(self._writer.start_one, active.claim, in_turn=active.in_turn)
        return partial(self._writer.queue_one, self._queue_request(active))

    def _start_pooled(self, active: ActiveRun) -> Started:
        (started,) = self._start_pooled_many([active])
        return started

    def _start_pooled_many(self, pooled: Sequence[ActiveRun]) -> list[Started]:
        """Start (or, for a remote executor, queue) pooled runs as their pools admit."""
        queues = {
            active.claim.id: self._queue_request(active)
            for active in pooled
            if self._remote(active) is not None
        }
        return concurrency.start(self._database, [_start_request(a) for a in pooled], queues)

    def _park(self, active: ActiveRun) -> None:
        """Its pool is full: wait for a slot on no thread, saying so the first time. A
        run lost or drained meanwhile is launched instead: the slow path gives it back."""
        with self._lock:
            if active.lost or self._stopping.is_set():
                self._launch(active)
                return
            first = not active.said_waiting
            active.parked = True
            active.said_waiting = True
            active.launched = False
            # Under the dispatcher's lock: `lose` and `drain` find it parked and listed,
            # or not parked at all.
            self._pools.park(active)
        if first:
            active.context.log.info("run_waiting", pool=active.pool, pool_key=active.pool_key)

    def _relaunch(self, active: ActiveRun) -> None:
        """A parked run's turn to try its pool again."""
        with self._lock:
            if not active.parked or self._stopping.is_set():
                return
            active.parked = False
            self._launch(active)

    def _attach(self, active: ActiveRun, child: BaseProcess) -> None:
        """The run's child process exists: kill it at once if the run was lost meanwhile."""
        with self._lock:
            active.child = child
            doomed = active.lost or active.phase is Phase.ABANDONED
        if doomed:
            _kill(child)

    def _recorded(
        self,
        active: ActiveRun,
        written: Finish,
        outcome: Outcome,
        watching: observers.Watching,
        settled: Settled,
    ) -> Callable[[], None]:
        """The writer settled the outcome: say how the run ended. What this returns, once
        the line is out, tells the observers and ends the run here (a lingering one once
        its thread ends)."""
        if settled is Settled.WRITTEN and written.retry_in is None:
            with self._lock:
                self._settled.add(active.claim.key)
        ending = Ending(
            outcome.status,
            outcome.failure,
            final=written.retry_in is None,
            written=settled is Settled.WRITTEN,
            duration_ms=written.duration_ms,
        )
        # A timed-out function still in its thread holds the run until it returns, once
        # its outcome is written; unwritten, the run is retaken and nothing waits here.
        lingering = outcome.lingering if settled is Settled.WRITTEN else None
        end = partial(self._end, active, watching, ending, lingering)
        try:
            outcomes.report(active.context.log, written, outcome, settled)
        except Exception:
            end()
            raise
        return end

    def _end(
        self,
        active: ActiveRun,
        watching: observers.Watching,
        ending: Ending,
        lingering: Lingering | None,
    ) -> None:
        try:
            watching.ended(ending)
        finally:
            if lingering is not None:
                threading.Thread(
                    target=self._outlast, args=(active, lingering), name="lingering", daemon=True
                ).start()
            else:
                self._done(active)

    def _outlast(self, active: ActiveRun, lingering: Lingering) -> None:
        """Wait for a timed-out function to return in its thread (saying once if it is
        overdue), then let its retry go."""
        outlast(lingering, active.context.log)
        try:
            self._persist(active, partial(writes.release, self._database, active.claim), False)
        finally:
            self._done(active)

    def _done(self, active: ActiveRun) -> None:
        """Forget a finished run and start the next waiting period of its job, if any."""
        job = active.claim.job
        self._leases.forget(active.claim.key)
        if active.pool is not None:
            self._pools.wake()  # a slot of its pool may be free
        with self._lock:
            self._active.pop(active.claim.key, None)
            self._recent[active.claim.key] = time.monotonic()
            waiting = self._waiting.get(job)
            if active.in_turn and waiting and not self._stopping.is_set():
                _, key = heapq.heappop(waiting)
                self._launch(self._active[key])
            elif active.in_turn:
                self._busy.discard(job)
        if not active.future.done():
            active.future.set_result(None)

    # -- leases ----------------------------------------------------------------------

    def returned(self) -> list[str]:
        """Ids of the runs held here whose function has returned, their outcome not yet
        written: no later period of their job is skipped behind them (`store.claims`)."""
        with self._lock:
            return [a.claim.id for a in self._active.values() if a.phase is Phase.RECORDING]

    def in_hand(self) -> int:
        """How many runs this node holds now, from claim to settled outcome."""
        with self._lock:
            return len(self._active)

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
        self._leases.extend(active.claim.key, valid_until(lease_from, active.claim.lease_seconds))

    def renewed(self, held: Sequence[Held], sent: float) -> None:
        """A renewal sent at `sent` found these rows in this node's name: push their
        deadlines forward, give up the runs it did not find, and settle the rows this
        node did not know it held (a claim or start whose reply was lost).

        A run counts as not found only if it was taken in here before the renewal was
        sent: the write that gave its lease may have been sent earlier but committed
        after the renewal's snapshot (a takeover waiting for the job's lock), and its
        row is then rightly missing from the answer."""
        found = {row.key: row for row in held}
        lost: list[RunKey] = []
        with self._lock:
            for key, active in self._active.items():
                if key in found:
                    self._extend(active, sent)
                elif active.known_from < sent and active.phase in (
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
            self.lose(key, cause="renewal")
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
            return
        if row.status is RunStatus.RUNNING:
            write = partial(self._writer.finish_now, outcomes.abandon(claim, 0.0))
        else:
            write = partial(writes.release, self._database, claim)
        persist(write, log=log, closing=self._closing, default=False)

    def lose_all(self) -> None:
        """The peers may take this node for dead (its liveness lock went and no new one
        could be taken in time): give every run up."""
        with self._lock:
            keys = list(self._active)
        for key in keys:
            self.lose(key, cause="liveness")

    def lose(self, key: RunKey, cause: str = "lease") -> None:
        """The lease is gone, or may be gone by now: the job must stop; its child process is
        killed, its items and checkpoints refused, and it is given back for its next
        attempt (a write refused once another node holds it). A run whose function has
        returned has nothing left to stop. `cause`: `lease` (its deadline passed by this
        process's clock), `renewal` (a renewal no longer found it), `liveness`."""
        with self._lock:
            active = self._active.get(key)
            if active is None or active.lost or active.phase is Phase.RECORDING:
                return
            active.lost = True
            child = active.child
            running = active.phase in (Phase.RUNNING, Phase.LINGERING)
            if active.parked:
                # This call, not the waiters, launches it now, under the lock as every
                # launch is (so that `drain` sees it launched or not): the slow path
                # gives it back.
                active.parked = False
                self._pools.unpark(active)
                self._launch(active)
        if active.context.run_items is not None:
            active.context.run_items.lose()
        active.context.cancelled.set()
        if child is not None:
            _kill(child)
        late = {"late_s": round(self._leases.late_s, 3)} if cause == "lease" else {}
        active.context.log.warning("lease_lost", cause=cause, **late)
        metrics.record_lease_lost(active.claim.job)
        job = active.job
        if running and job.policy.isolation is not Isolation.PROCESS:
            active.orphan = Orphan(active.context.log, cause, self._grace(cause, active))
            orphans.watch(active.orphan, partial(self._still_running, active))

    def _grace(self, cause: str, active: ActiveRun) -> float:
        """How long after a run is given up another node may take it over, at the soonest:
        the lease's margin (the lease ends on the database no sooner), the time the peers
        give a live holder whose lock went (`liveness_grace`), or none at all (a renewal
        no longer found it: it may be another's already)."""
        if cause == "liveness":
            return self.liveness_grace
        if cause == "lease":
            return lease_margin(active.claim.lease_seconds)
        return 0.0

    def _still_running(self, active: ActiveRun) -> bool:
        with self._lock:
            return active.phase in (Phase.RUNNING, Phase.LINGERING)

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
                active.parked = False
        for active in unlaunched:
            self._pools.unpark(active)
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
            release = partial(writes.release, self._database, active.claim, after=ABANDON_RETRY_S)
            self._persist(active, release, False)
        self._close()
        return len(given_back) + sum(1 for active in unlaunched if active.phase is Phase.ABANDONED)

    def _give_back_unstarted(self, active: ActiveRun, reason: Reason = Reason.SHUTDOWN) -> None:
        """Give back a run that never started here: it may be retried at once, and no
        attempt is counted against it. Fenced on `claimed`, so that a start that landed
        meanwhile keeps the run (its worker runs it). The caller ends the run here."""
        abandon = outcomes.abandon(active.claim, 0.0, waiting_only=True, reason=reason)
        if self._persist(active, partial(self._writer.finish_now, abandon), False):
            with self._lock:
                active.phase = Phase.ABANDONED
            active.context.cancelled.set()
            active.context.log.info("run_given_back", reason=reason.value)

    def _give_back(self, active: ActiveRun) -> bool:
        """Give back a run whose function still ran when the grace ended."""
        abandon = outcomes.abandon(active.claim, ABANDON_RETRY_S)
        written = self._persist(active, partial(self._writer.finish_now, abandon), False)
        if written:
            active.context.log.warning("run_abandoned", reason=Reason.SHUTDOWN.value)
            metrics.record_finish(active.claim.job, RunStatus.ABANDONED, None)
        if not active.future.done():
            active.future.set_result(None)
        return written

    def _close(self) -> None:
        self._pools.close()
        self._starter.close()
        self._writer.close()
        self._pool.shutdown()
        self._executors.close()

    def _persist(self, active: ActiveRun, write: Callable[[], T], default: T) -> T:
        """A write this run owes the database, retried through faults (`persist`)."""
        return persist(write, log=active.context.log, closing=self._closing, default=default)


def _pool_of(job: Job) -> tuple[str | None, str | None]:
    """A pooled job's pool and its run's concurrency key (a schedule's from its
    arguments; one its arguments cannot fill is taken as written: a cap for all such)."""
    member = job.policy.pool
    if member is None:
        return None, None
    template = job.policy.concurrency_key
    try:
        key = key_for(job.name, template, job.args or {})
    except JobDefinitionError:
        key = template
    return member.name, key


def _start_request(active: ActiveRun) -> StartRequest:
    member = active.job.policy.pool
    if member is None:
        return StartRequest(active.claim, active.in_turn)
    return StartRequest(
        active.claim,
        active.in_turn,
        pool=member.name,
        pool_key=active.pool_key,
        pool_limit=member.limit,
        pool_per_key=member.per_key,
    )


def _kill(child: BaseProcess) -> None:
    """Kill a run's child process and wait for it to be gone."""
    if child.is_alive():
        child.kill()
    child.join(timeout=5)
