"""Operator requests carried out by a daemon: trigger, rerun and backfill asked for from
the web console, which must not run jobs in its own process.

A node looks (when a notification tells it, or every second when polling) for requests
of the jobs it knows that no node took, takes each with a compare-and-set (one node
only), claims through the same store functions as the CLI's repairs
(`scheduler.node.repair`) in its own name, and hands the claims to its
dispatcher; the runs then go as any other: leases, retries, outcomes.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from structlog.typing import FilteringBoundLogger

from scheduler.errors import UserError
from scheduler.instants import utc_text
from scheduler.node import repair
from scheduler.node.repair import Action
from scheduler.node.wakeups import Wakeups
from scheduler.registry import Job
from scheduler.run.dispatcher import Dispatcher
from scheduler.store import queries
from scheduler.store import requests as store
from scheduler.store.database import Database
from scheduler.store.faults import StoreError
from scheduler.store.requests import RequestKind, RequestOutcome, RequestRow
from scheduler.supervision import SideThread

POLL_S = 1.0
# With wake-ups: a request notifies, and every heartbeat says whether one waits.
SWEEP_S = 300.0
# A request no node took within this is not run any more: a "trigger now" of a payment
# job must not start hours later, when every node comes back, without anyone watching.
EXPIRES_AFTER = timedelta(hours=1)


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
        self._node = NodeName(node_id)

    def step(self) -> float:
        try:
            for request in store.pending(self._database, self._jobs):
                if self._stopping.is_set():
                    break
                if store.take(self._database, request.id, self._node.id):
                    self.carry_out(request)
        except StoreError as error:
            self._log.warning("requests_failed", error=error.message)
            return POLL_S
        return POLL_S if self._wakeups is None or not self._wakeups.listening else SWEEP_S

    def carry_out(self, request: RequestRow) -> None:
        """Do what the request asks, and write down how it went."""
        log = self._log.bind(
            request_id=request.id,
            job=request.job,
            kind=request.kind,
            requested_by=request.requested_by,
        )
        hands = NodeHands(self._database, self._jobs[request.job], self._node)
        outcome, done = RequestOutcome.DONE, Done("")
        try:
            if hands.now() - request.requested_at > EXPIRES_AFTER:
                outcome, done = RequestOutcome.EXPIRED, Done(_expired_line(request))
            else:
                done = self._do(hands, request)
        except UserError as error:
            outcome, done = RequestOutcome.REFUSED, Done(str(error))
        store.finish(
            self._database,
            request.id,
            self._node.id,
            outcome=outcome,
            detail=done.detail,
            run_id=done.run_id,
        )
        event = "request_done" if outcome is RequestOutcome.DONE else "request_refused"
        log.info(event, outcome=outcome.value, detail=done.detail, run_id=done.run_id)

    def _do(self, hands: NodeHands, request: RequestRow) -> Done:
        kind = RequestKind(request.kind)
        if kind is RequestKind.TRIGGER:
            claim = repair.trigger(hands)
            self._dispatcher.submit(claim)
            return Done(f"manual run claimed for {utc_text(claim.period)}", claim.id)
        if kind is RequestKind.RERUN:
            assert request.period is not None, "a rerun request names its period"
            row = repair.rerun_target(hands, request.period, force=request.force)
            retaken = repair.rerun(hands, row)
            if retaken is None:
                period = utc_text(request.period)
                raise UserError(f"job {request.job!r}: {period} changed meanwhile")
            self._dispatcher.submit(retaken)
            detail = f"attempt {retaken.attempt} of {utc_text(retaken.period)} claimed"
            return Done(detail, retaken.id)
        assert request.range_start is not None, "a backfill request names its range"
        assert request.range_end is not None, "a backfill request names its range"
        return self._backfill(hands, request, request.range_start, request.range_end)

    def _backfill(
        self, hands: NodeHands, request: RequestRow, start: datetime, end: datetime
    ) -> Done:
        steps = repair.backfill_steps(hands, start, end, include_failed=request.include_failed)
        claimed = taken = 0
        for step in steps:
            if step.action is Action.KEEP:
                continue
            claim = repair.claim_step(hands, step)
            if claim is None:
                taken += 1
                continue
            self._dispatcher.submit(claim)
            claimed += 1
        kept = len(steps) - claimed - taken
        detail = f"{claimed} of {len(steps)} periods claimed, {kept} kept"
        return Done(detail + (f", {taken} changed meanwhile" if taken else ""))


def _expired_line(request: RequestRow) -> str:
    hours = EXPIRES_AFTER.total_seconds() / 3600
    return f"no node took it within {hours:g}h of {utc_text(request.requested_at)}; not run"
