"""`Harness`: the real scheduler, in-process, on a SQLite file of its own, under a virtual
clock, one instant at a time.

It drives the node's own building blocks instead of its threads: at each instant where
something falls due (a period, a retry, a lease's end) it sets the clock there, claims
the due periods (`store.claims`), retakes what recovery would (`node.recovery`), and
runs each claimed body to completion in the calling thread, writing its outcome (with
its retry, if one is due) through `run.outcomes` and `store.writes`. Catch-up is the
node's own pass (`node.catchup_loop.CatchUp`), at each start of the node, then when a
period its budget holds back may start (its pace) or an operator approved deferred
ones (`run_deferred`), as a node told by notifications passes. Nothing here
decides who claims, skips, retries or takes over: the store and the node's functions do.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import structlog

from scheduler.admin import Admin
from scheduler.durations import Duration, parse_duration
from scheduler.model import Claim, NodeIdentity, Started
from scheduler.node import registration
from scheduler.node.alerts import Alerts
from scheduler.node.catchup_loop import CatchUp
from scheduler.node.claimed import log_claims
from scheduler.node.peers import jobs_digest
from scheduler.node.recovery import BATCH, SETTLE_S, Recovery
from scheduler.policy import Overlap
from scheduler.registry import Job
from scheduler.run import calling, outcomes
from scheduler.run.executors import timeout_of
from scheduler.run.failures import Outcome, timed_out
from scheduler.run.items import run_context
from scheduler.run.writer import Settled
from scheduler.store import claims, nodes, renewals, takeover, writes
from scheduler.testing import faults
from scheduler.testing.clock import VirtualClock
from scheduler.testing.database import fresh_database
from scheduler.testing.logs import LogCapture
from scheduler.testing.records import Records

DEFAULT_START = "2026-01-01T00:00:00Z"
# A harness that meets this many instants in one move is taken to be looping.
MOST_INSTANTS = 1_000_000
# The seed of a harness's retry jitter (`retry_jitter=True`): the same draws every run.
RETRY_SEED = 46


@dataclass(frozen=True)
class Fault:
    """A fault the harness injected: `node_died` (crash_here) or `timed_out` (elapse past
    the timeout), with the run it hit and the virtual instant."""

    kind: str
    job: str
    period: datetime
    attempt: int
    node: str
    at: datetime


@dataclass
class _Body:
    """The body running now: its claim, when it began, its deadline, its next beat."""

    harness: Harness
    claim: Claim
    began: datetime
    deadline: datetime | None
    beat: timedelta
    next_beat: datetime
    fault: str | None = None

    def elapse(self, duration: timedelta) -> None:
        target = self.harness.clock.now + duration
        if self.deadline is not None and target >= self.deadline:
            self.harness._run_until(self.deadline, body=self)
            self.fault = "timed_out"
            raise faults.TimedOut
        self.harness._run_until(target, body=self)

    def crash(self) -> None:
        self.fault = "node_died"
        raise faults.NodeDied


def collect_jobs(jobs: ModuleType | Iterable[Job] | Mapping[str, Job]) -> dict[str, Job]:
    """The jobs of a module (every `@job` in it), or those given."""
    if isinstance(jobs, ModuleType):
        found = [value for value in vars(jobs).values() if isinstance(value, Job)]
    elif isinstance(jobs, Mapping):
        found = list(jobs.values())
    else:
        found = list(jobs)
    for candidate in found:
        if not isinstance(candidate, Job):
            raise TypeError(f"{candidate!r} is not a job: decorate it with @scheduler.job(...)")
        if candidate.remote is not None:
            raise ValueError(
                f"job {candidate.name!r}: executor: a harness runs jobs in-process, "
                "not on a task queue"
            )
    if not found:
        raise ValueError("a harness needs at least one job")
    return {candidate.name: candidate for candidate in found}


@dataclass
class _Node:
    identity: NodeIdentity
    recovery: Recovery
    alerts: Alerts
    catch_up: CatchUp
    log: structlog.typing.FilteringBoundLogger
    pending: list[Claim] = field(default_factory=list)


class Harness(Records):
    """The scheduler with a virtual clock. `harness.clock.advance("1d")` runs every
    period, retry and takeover due within the day, deterministically and at once.

    `jobs`: a module (its `@job` functions) or the jobs themselves. `start`: the virtual
    time at which the node starts (UTC). `node`: the node's name; after a death its
    replacement is `NAME-2`, then `NAME-3`. `folder`: where its SQLite file goes (a
    temporary folder of its own by default, removed by `close`). `retry_jitter`: False
    (the default), a retry is due exactly at its backoff; True, up to 25 % later as on a
    node, drawn from a generator of the harness's own with a fixed seed, so the same
    test sees the same instants on every run.
    """

    def __init__(
        self,
        jobs: ModuleType | Iterable[Job] | Mapping[str, Job],
        *,
        start: datetime | str = DEFAULT_START,
        node: str = "node",
        folder: Path | None = None,
        retry_jitter: bool = False,
    ) -> None:
        self.jobs = collect_jobs(jobs)
        draws = random.Random(RETRY_SEED)
        self._retry_jitter = (
            (lambda: draws.uniform(0, outcomes.RETRY_JITTER)) if retry_jitter else (lambda: 0.0)
        )
        self.clock = VirtualClock(start)
        self.clock.drive_with(self._run_until)
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        if folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="scheduler-testing-")
            folder = Path(self._folder.name)
        database, self.database_url = fresh_database(folder, self.clock)
        self.logs = LogCapture()
        self.faults: list[Fault] = []
        super().__init__(database, self.logs)
        self._log = self.logs.logger
        self._name = node
        self._incarnation = 0
        self._stop = threading.Event()
        self._upcoming: dict[str, datetime | None] = {}
        self._closed = False
        # The body running now, if any (the clock moves inside it only through `elapse`).
        self._body: _Body | None = None
        registration.register(self.database, self.jobs)
        self._admin = Admin(self.database)
        self._node: _Node | None = None
        self._start_node()

    # -- the node's life ------------------------------------------------------------

    @property
    def node_id(self) -> str:
        """The id of the node running now."""
        assert self._node is not None, "the node is down"
        return self._node.identity.id

    def _start_node(self) -> None:
        """A node starts: registered, its live loop from now on, then a catch-up pass
        for what passed while none ran (as the daemon does at start)."""
        self._incarnation += 1
        suffix = "" if self._incarnation == 1 else f"-{self._incarnation}"
        identity = NodeIdentity(self._name + suffix, self._name, "harness", 0, "testing")
        nodes.register(self.database, identity, jobs_digest(self.jobs.values()))
        log = self._log.bind(node=identity.id)
        now = self.clock.now
        recovery = Recovery(
            database=self.database,
            dispatcher=self,
            jobs=self.jobs,
            node_id=identity.id,
            interval=1.0,
            stop=self._stop,
            log=log,
        )
        alerts = Alerts(
            database=self.database, jobs=self.jobs, node_id=identity.id, stop=self._stop, log=log
        )
        catch_up = CatchUp(self.database, self.jobs, identity.id, self.submit, log, live_since=now)
        self._node = _Node(identity, recovery, alerts, catch_up, log)
        for job in self.jobs.values():
            if job.schedule is not None:
                self._upcoming[job.name] = job.schedule.next_after(now)
        while catch_up.run_pass(now):
            pass
        self._drain()
        self._deliver()

    def _die(self, body: _Body) -> None:
        """The node died in `body`: what it held stays held, and a replacement starts."""
        assert self._node is not None
        self.faults.append(
            Fault(
                "node_died",
                body.claim.job,
                body.claim.period,
                body.claim.attempt,
                self._node.identity.id,
                self.clock.now,
            )
        )
        self._node = None
        self._start_node()

    def outage(self, duration: Duration) -> datetime:
        """Every node is down for `duration`: nothing is claimed meanwhile; then a node
        starts and its catch-up pass decides what the gap owes (the job's `catchup`)."""
        assert self._node is not None
        if self._body is not None:
            raise RuntimeError(
                f"job {self._body.claim.job!r}: an outage begins between runs; inside a "
                "body, scheduler.testing.crash_here() ends its node"
            )
        nodes.mark_stopped(self.database, self._node.identity.id)
        self._node = None
        self.clock.set(self.clock.now + parse_duration(duration))
        self._start_node()
        return self.clock.now

    def pause(self, job: str) -> None:
        """Pause a job as an operator would (`scheduler pause`): its periods are recorded
        skipped, reason paused."""
        self._admin.pause(job)

    def resume(self, job: str) -> None:
        """Resume a job (`scheduler resume`); what passed while it was paused is not run."""
        self._admin.resume(job)

    def run_deferred(self, job: str, *, oldest: int | None = None) -> int:
        """Run the job's periods its catch-up budget deferred (`scheduler deferred run`),
        the `oldest` N or all: the node's catch-up claims them now, as a node told by
        the operator's notification does, and they run. How many were approved."""
        approved = self._admin.run_deferred(job, oldest=oldest)
        self._look_for_deferred()
        return approved

    def skip_deferred(self, job: str, *, oldest: int | None = None) -> int:
        """Skip the job's deferred periods (`scheduler deferred skip`): recorded
        `skipped (budget)`, never run. How many."""
        return self._admin.skip_deferred(job, oldest=oldest)

    def _look_for_deferred(self) -> None:
        if self._body is not None:
            raise RuntimeError("an operator answers between runs, not inside a body")
        assert self._node is not None
        self._node.catch_up.look_for_deferred = True
        self._run_until(self.clock.now)

    def close(self) -> None:
        """Close the database and remove its folder."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self.database.dispose()
        if self._folder is not None:
            self._folder.cleanup()

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- what recovery and catch-up hand over (`RunsInHand`) ---------------------------

    def returned(self) -> list[str]:
        """No function returns here without its outcome written in the same step."""
        return []

    def submit(self, claim: Claim) -> None:
        """A claim to run at this instant (retaken, or written by catch-up)."""
        assert self._node is not None
        self._node.pending.append(claim)

    # -- moving through time ------------------------------------------------------------

    def _next_instant(self, body: _Body | None) -> datetime | None:
        """The earliest instant at which something falls due: a period, a lease's end
        or a retry (as the recovery loop would wake), the running body's next beat."""
        now = self.clock.now
        candidates = [period for period in self._upcoming.values() if period is not None]
        if self._node is not None and self._node.catch_up.next_start is not None:
            candidates.append(self._node.catch_up.next_start)  # a catch-up run's pace
        seconds = takeover.seconds_until_recovery(self.database, None)
        if seconds is not None:
            candidates.append(now + timedelta(seconds=seconds + SETTLE_S))
        if body is not None:
            candidates.append(body.next_beat)
        return max(now, min(candidates)) if candidates else None

    def _run_until(self, target: datetime, body: _Body | None = None) -> None:
        """Move to `target` instant by instant; outside a body, run what was claimed."""
        if body is None and self._body is not None:
            raise RuntimeError(
                f"job {self._body.claim.job!r}: the clock moves inside a body through "
                "scheduler.testing.elapse(...), not clock.advance or clock.to"
            )
        if target < self.clock.now:
            self.clock.set(target)  # refused, with the clock's own message
        for _ in range(MOST_INSTANTS):
            instant = self._next_instant(body)
            if instant is None or instant > target:
                break
            self.clock.set(instant)
            self._step(body)
        else:
            raise RuntimeError(f"more than {MOST_INSTANTS} instants before {target.isoformat()}")
        self.clock.set(target)
        self._step(body)

    def _step(self, body: _Body | None) -> None:
        """One instant: the heartbeat's renewals (while a body runs), the due periods
        claimed, recovery's takeovers, then (outside a body) the claimed bodies run."""
        node = self._node
        assert node is not None
        now = self.clock.now
        if body is not None and body.next_beat <= now:
            renewals.renew_leases(self.database, node.identity.id)
            body.next_beat = now + body.beat
        due = []
        for name, first in self._upcoming.items():
            job, period = self.jobs[name], first
            assert job.schedule is not None
            while period is not None and period <= now:
                due.append(job.due(period))
                period = job.schedule.next_after(period)
            self._upcoming[name] = period
        if due:
            result = claims.claim(self.database, due, node.identity.id)
            log_claims(node.log, result)
            node.pending.extend(result.won)
        while node.recovery.recover_once() == BATCH:
            pass
        # The catch-up loop's passes after the node's first: when a period that waits
        # its budget's pace may start, or deferred periods are to be looked for (an
        # operator approved some, or a schedule's wait their pace).
        paced = node.catch_up.next_start
        if node.catch_up.look_for_deferred or (paced is not None and paced <= now):
            while node.catch_up.run_pass(now):
                pass
        if body is None:
            self._drain()
            self._deliver()

    def _deliver(self) -> None:
        """Call the alert hooks of the events due now, as the node's alerts thread would."""
        if self._node is not None:
            self._node.alerts.deliver_due()

    def _drain(self) -> None:
        """Run what this node holds, earliest period first, until nothing more can start
        (a claim that must wait its turn behind a run held elsewhere stays held)."""
        node = self._node
        progress = True
        while node is not None and node is self._node and node.pending and progress:
            progress = False
            for claim in sorted(node.pending, key=lambda held: (held.period, held.job)):
                if node is not self._node:
                    return
                if self._execute(node, claim):
                    node.pending.remove(claim)
                    progress = True

    def _execute(self, node: _Node, claim: Claim) -> bool:
        """Start and run one claim here, and write its outcome; False if it must wait."""
        job = self.jobs[claim.job]
        in_turn = job.policy.overlap is not Overlap.ALLOW
        started = writes.start(self.database, claim, in_turn=in_turn)
        if started in (Started.WAIT, Started.POOLED):
            return False
        if started is not Started.STARTED:
            return True
        log = node.log.bind(
            job=claim.job, period=claim.period.isoformat(), run_id=claim.id, attempt=claim.attempt
        )
        context = run_context(
            claim, node=node.identity.id, database=self.database, log=log, args=job.args
        )
        log.info("run_started", origin=claim.origin.value)
        writes.began(self.database, [claim])
        now = self.clock.now
        timeout = timeout_of(job)
        beat = job.policy.heartbeat
        body = _Body(
            self,
            claim,
            now,
            None if timeout is None else now + timedelta(seconds=timeout),
            beat,
            now + beat,
        )
        faults.running(body)
        self._body = body
        try:
            outcome = self._call(job, context)
        finally:
            faults.running(None)
            self._body = None
        if body.fault == "node_died":
            self._die(body)
            return True
        if body.fault == "timed_out":
            assert timeout is not None
            self.faults.append(
                Fault(
                    "timed_out",
                    claim.job,
                    claim.period,
                    claim.attempt,
                    node.identity.id,
                    self.clock.now,
                )
            )
            outcome = timed_out(timeout)
        duration_ms = round((self.clock.now - body.began).total_seconds() * 1000)
        written = outcomes.finish(
            claim, job.policy, outcome, duration_ms, jitter=self._retry_jitter
        )
        (applied,), _ = writes.record(self.database, [written], [])
        outcomes.report(log, written, outcome, Settled.WRITTEN if applied else Settled.REFUSED)
        return True

    @staticmethod
    def _call(job: Job, context: Any) -> Outcome:
        if job.is_async:
            return asyncio.run(calling.call_async(job, context))
        return calling.call(job, context)
