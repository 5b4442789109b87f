"""The long-lived loop: sleep until something is due, claim it in one batch, dispatch.

The loop wakes at the earliest of "next period", "stop requested"; it never polls.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog
from sqlalchemy.exc import DBAPIError

from scheduler.dispatch import Dispatcher
from scheduler.keeper import Keeper
from scheduler.registry import Job
from scheduler.store import nodes, runs
from scheduler.store.database import Database, first_line
from scheduler.store.nodes import NodeIdentity
from scheduler.store.runs import Due
from scheduler.timeline import Timeline

DEFAULT_HEARTBEAT = timedelta(seconds=10)
CLAIM_RETRY_S = 1.0
# Periods still unclaimed this long after they were due are left to catch-up.
LATE_LIMIT = timedelta(minutes=5)


@dataclass(frozen=True)
class DaemonSettings:
    workers: int
    grace: timedelta


class Daemon:
    def __init__(
        self,
        database: Database,
        jobs: Mapping[str, Job],
        node: NodeIdentity,
        settings: DaemonSettings,
    ) -> None:
        self._database = database
        self._jobs = jobs
        self._node = node
        self._settings = settings
        self._stop = threading.Event()
        self._log: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger("scheduler").bind(
            node=node.id
        )
        self._dispatcher = Dispatcher(database, jobs, node.id, settings.workers, self._log)
        heartbeat = min([job.policy.heartbeat for job in jobs.values()] + [DEFAULT_HEARTBEAT])
        self._keeper = Keeper(
            database=database,
            dispatcher=self._dispatcher,
            node_id=node.id,
            interval=heartbeat.total_seconds(),
            stop=self._stop,
            log=self._log,
        )

    def request_stop(self) -> None:
        self._stop.set()

    def run(self) -> int:
        """Serve until asked to stop; return how many runs were abandoned at shutdown."""
        nodes.register(self._database, self._node)
        self._log.info(
            "node_started",
            host=self._node.host,
            pid=self._node.pid,
            version=self._node.version,
            jobs=len(self._jobs),
        )
        self._keeper.start()
        try:
            self._loop()
        finally:
            abandoned = self._shutdown()
        return abandoned

    def _loop(self) -> None:
        timeline = Timeline(self._jobs.values(), datetime.now(UTC))
        pending: list[Due] = []
        while not self._stop.is_set():
            now = datetime.now(UTC)
            pending += [
                Due(job.name, period, job.policy.lease.total_seconds())
                for job, period in timeline.pop_due(now)
            ]
            pending = self._claim(pending, now)
            next_due = timeline.next_due()
            if pending:
                wait = CLAIM_RETRY_S
            elif next_due is None:
                wait = None
            else:
                wait = max(0.0, (next_due - datetime.now(UTC)).total_seconds())
            self._stop.wait(wait)

    def _claim(self, due: list[Due], now: datetime) -> list[Due]:
        """Claim and dispatch; on a database fault keep the periods for the next try."""
        if not due:
            return []
        try:
            won = runs.claim(self._database, due, self._node.id)
        except DBAPIError as error:
            self._log.warning("claim_failed", error=first_line(error.orig), periods=len(due))
            return [item for item in due if now - item.period < LATE_LIMIT]
        won_keys = {(claim.job, claim.period) for claim in won}
        for item in due:
            if (item.job, item.period) not in won_keys:
                self._log.debug("run_claim_lost", job=item.job, period=item.period.isoformat())
        for claim in won:
            self._log.info(
                "run_claimed",
                job=claim.job,
                period=claim.period.isoformat(),
                run_id=claim.id,
                attempt=claim.attempt,
            )
            self._dispatcher.submit(claim)
        return []

    def _shutdown(self) -> int:
        self._stop.set()
        running = len(self._dispatcher.held())
        self._log.info(
            "node_stopping", running=running, grace_s=self._settings.grace.total_seconds()
        )
        abandoned = self._dispatcher.drain(self._settings.grace.total_seconds())
        try:
            nodes.mark_stopped(self._database, self._node.id)
        except DBAPIError as error:
            self._log.warning("node_stop_unrecorded", error=first_line(error.orig))
        self._log.info("node_stopped", abandoned=abandoned)
        if self._keeper.failure is not None:
            raise RuntimeError("the heartbeat thread died") from self._keeper.failure
        return abandoned
