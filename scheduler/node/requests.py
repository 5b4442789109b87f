"""Operator requests carried out by a daemon: trigger, rerun and backfill asked for from
the web console, which must not run jobs in its own process.

A node looks (when a notification tells it, when the heartbeat reads that one waits, or
every second when polling) for requests of the jobs it knows that wait for a taker,
takes each with a compare-and-set and a hold (one node only), claims through the same
store functions as the CLI's repairs (`scheduler.node.repair`) in its own name, and
hands the claims to its dispatcher; the runs then go as any other: leases, retries,
outcomes.

A request is carried out at most once, and never left taken for ever. Each claim is
made only while the request is still this node's, and recorded on it in the claim's
own transaction (`store.requests.Fenced`), which renews the hold; a node that met a
database fault gives the request back (saying how far it got); a node that died, or
stalled past its hold, leaves it to be taken again by any node that knows the job. A
backfill taken again goes on after the last period claimed for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from structlog.typing import FilteringBoundLogger

from scheduler.errors import UserError
from scheduler.instants import utc_text
from scheduler.model import Claim
from scheduler.node import repair
from scheduler.node.peers import jobs_digest
from scheduler.node.repair import Action, Step
from scheduler.node.wakeups import Wakeups
from scheduler.registry import Job
from scheduler.run.dispatcher import Dispatcher
from scheduler.store import queries
from scheduler.store import requests as store
from scheduler.store.database import Database
from scheduler.store.faults import StoreError, StoreRejectedError, StoreUnavailableError
from scheduler.store.requests import (
    Fenced,
    Hold,
    Record,
    RequestKind,
    RequestLostError,
    RequestOutcome,
    RequestRow,
)
from scheduler.supervision import SideThread

POLL_S = 1.0
# With wake-ups: a request notifies, and every heartbeat says whether one waits.
SWEEP_S = 300.0
# A request not carried out within this is not run any more: a "trigger now" of a payment
# job must not start hours later, when every node comes back, without anyone watching.
EXPIRES_AFTER = timedelta(hours=1)
# A taken request is held this long past each write of its carrying out (the take, each
# claim); a hold that lapses lets any node take the request again.
HOLD_S = 10.0


@dataclass(frozen=True)
class NodeName:
    id: str


@dataclass(frozen=True)
class NodeHands:
    """A daemon node as `scheduler.node.repair` sees whoever claims a repair."""

    database: Database
    job: Job
    node: NodeName

    def now(self) -> datetime:
        return queries.clock(self.database)


@dataclass(frozen=True)
class Done:
    detail: str
    run_id: str | None = None


class StoppingError(Exception):
    """The node stops in the middle of a backfill: the rest is given back."""


@dataclass
class Backfilled:
    """How far one take of a backfill got: the line the request's row says."""

    node: str
    earlier: str | None  # what earlier takes of it did, as their taker wrote
    resumed_after: datetime | None
    total: int
    claimed: int = 0
    kept: int = 0
    changed: int = 0

    def line(self, *, claimed: int | None = None) -> str:
        count = self.claimed if claimed is None else claimed
        text = f"{count} of {self.total} periods claimed, {self.kept} kept"
        if self.changed:
            text += f", {self.changed} changed meanwhile"
        if self.resumed_after is not None:
            text = f"{self.node} went on after {utc_text(self.resumed_after)}: {text}"
        return _join(self.earlier, text)


class Requests(SideThread):
    """Takes and carries out the operator requests of this node's jobs."""

    def __init__(
        self,
        *,
        database: Database,
        dispatcher: Dispatcher,
        jobs: Mapping[str, Job],
        node_id: str,
        stop: threading.Event,
        log: FilteringBoundLogger,
        wakeups: Wakeups | None = None,
    ) -> None:
        super().__init__("requests", stop, log)
        self._wakeups = wakeups
        if wakeups is not None:
            wakeups.requests = self
        self._database = database
        self._dispatcher = dispatcher
        self._jobs = jobs
        self._job_set = jobs_digest(jobs.values())
        self._node = NodeName(node_id)

    def step(self) -> float:
        try:
            for request in store.pending(self._database, self._job_set):
                if self._stopping.is_set():
                    break
                hold = store.take(self._database, request, self._node.id, HOLD_S)
                if hold is not None:
                    self.carry_out(hold)
        except StoreError as error:
            self._log.warning("requests_failed", error=error.message)
            return POLL_S
        return POLL_S if self._wakeups is None or not self._wakeups.listening else SWEEP_S

    def carry_out(self, hold: Hold) -> None:
        """Do what the request asks, and write down how it went; on a database fault,
        give it back for a node to take again."""
        request = hold.request
        log = self._log.bind(
            request_id=request.id,
            job=request.job,
            kind=request.kind,
            requested_by=request.requested_by,
        )
        if request.tries > 1:
            log.warning("request_retaken", tries=request.tries, detail=request.detail)
        hands = NodeHands(self._database, self._jobs[request.job], self._node)
        backfilled: list[Backfilled] = []  # how far a backfill got, once it is planned
        try:
            if hands.now() - request.requested_at > EXPIRES_AFTER:
                self._finish(hold, log, Record(_expired_line(request), RequestOutcome.EXPIRED))
            else:
                self._do(hands, hold, log, backfilled)
        except UserError as error:
            done = backfilled[0].line() if backfilled else request.detail
            refused = Record(_join(done, str(error)), RequestOutcome.REFUSED)
            self._finish(hold, log, refused)
        except RequestLostError:
            log.warning("request_lost", tries=request.tries)
        except StoreUnavailableError as error:
            why = f"{self._node.id} met a database fault ({error.message})"
            self._give_back(hold, log, backfilled, error.message, why)
        except StoppingError:
            self._give_back(hold, log, backfilled, "stopping", f"{self._node.id} stopped")
        except StoreRejectedError as error:
            done = backfilled[0].line() if backfilled else request.detail
            why = f"the database refused it: {error.message}"
            self._finish(hold, log, Record(_join(done, why), RequestOutcome.REFUSED))

    def _finish(self, hold: Hold, log: FilteringBoundLogger, record: Record) -> None:
        if store.finish(self._database, hold, record):
            self._said(log, record)
        else:
            log.warning("request_lost", tries=hold.request.tries)

    @staticmethod
    def _said(log: FilteringBoundLogger, record: Record) -> None:
        assert record.outcome is not None
        event = "request_done" if record.outcome is RequestOutcome.DONE else "request_refused"
        log.info(event, outcome=record.outcome.value, detail=record.detail, run_id=record.run_id)

    def _give_back(
        self,
        hold: Hold,
        log: FilteringBoundLogger,
        backfilled: list[Backfilled],
        error: str,
        why: str,
    ) -> None:
        """After a fault (or at a stop): give the request back, saying how far it got; if
        even that fails, its hold lapses and any node takes it again."""
        done = backfilled[0].line() if backfilled else hold.request.detail
        detail = _join(done, f"{why}: given back")
        try:
            given = store.give_back(self._database, hold, detail)
        except StoreError:
            given = False
        log.warning("request_given_back", error=error, detail=detail, given_back=given)

    def _do(
        self,
        hands: NodeHands,
        hold: Hold,
        log: FilteringBoundLogger,
        backfilled: list[Backfilled],
    ) -> None:
        request = hold.request
        kind = RequestKind(request.kind)
        if kind is RequestKind.TRIGGER:
            claim = repair.trigger(hands, Fenced(hold, _trigger_record))
            self._claimed(claim, log, _trigger_record([claim]))
            return
        if kind is RequestKind.RERUN:
            assert request.period is not None, "a rerun request names its period"
            row = repair.rerun_target(hands, request.period, force=request.force)
            retaken = repair.rerun(hands, row, Fenced(hold, _rerun_record))
            if retaken is None:
                period = utc_text(request.period)
                raise UserError(f"job {request.job!r}: {period} changed meanwhile")
            self._claimed(retaken, log, _rerun_record([retaken]))
            return
        self._backfill(hands, hold, log, backfilled)

    def _claimed(self, claim: Claim, log: FilteringBoundLogger, record: Record | None) -> None:
        """The claim landed with its record: hand it to the workers."""
        self._dispatcher.submit(claim)
        if record is not None:
            self._said(log, record)

    def _backfill(
        self,
        hands: NodeHands,
        hold: Hold,
        log: FilteringBoundLogger,
        backfilled: list[Backfilled],
    ) -> None:
        request = hold.request
        assert request.range_start is not None, "a backfill request names its range"
        assert request.range_end is not None, "a backfill request names its range"
        steps = repair.backfill_steps(
            hands, request.range_start, request.range_end, include_failed=request.include_failed
        )
        after = request.progress
        if after is not None:  # an earlier take claimed up to there
            steps = [step for step in steps if step.period > after]
        state = Backfilled(self._node.id, request.detail, after, len(steps))
        backfilled.append(state)
        for step in steps:
            if self._stopping.is_set():
                raise StoppingError
            if step.action is Action.KEEP:
                state.kept += 1
                continue
            claim = repair.claim_step(hands, step, Fenced(hold, _progress(state, step)))
            if claim is None:
                state.changed += 1
                continue
            self._dispatcher.submit(claim)
            state.claimed += 1
        self._finish(hold, log, Record(state.line(), RequestOutcome.DONE))


def _trigger_record(won: Sequence[Claim]) -> Record | None:
    if not won:
        return None
    (claim,) = won
    detail = f"manual run claimed for {utc_text(claim.period)}"
    return Record(detail, RequestOutcome.DONE, claim.id)


def _rerun_record(won: Sequence[Claim]) -> Record | None:
    if not won:
        return None
    (claim,) = won
    detail = f"attempt {claim.attempt} of {utc_text(claim.period)} claimed"
    return Record(detail, RequestOutcome.DONE, claim.id)


def _progress(state: Backfilled, step: Step) -> Callable[[Sequence[Claim]], Record | None]:
    """A backfill step's record: how far the take got, with this step, and where a next
    take goes on from."""

    def record(won: Sequence[Claim]) -> Record:
        line = state.line(claimed=state.claimed + len(won))
        return Record(f"{line} so far ({state.node})", progress=step.period)

    return record


def _join(*parts: str | None) -> str:
    return "; ".join(part for part in parts if part)


def _expired_line(request: RequestRow) -> str:
    within = f"within {EXPIRES_AFTER.total_seconds() / 3600:g}h of {utc_text(request.requested_at)}"
    if request.tries <= 1:
        return f"no node took it {within}; not run"
    if request.progress is None:  # nothing of it was claimed by an earlier take
        return _join(request.detail, f"not carried out {within}; not run")
    return _join(request.detail, f"the rest expired: not carried out {within}")
