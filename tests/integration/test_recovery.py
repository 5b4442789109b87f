"""The recovery loop on a real database: what it retakes, what it gives up, what it leaves."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import structlog

from scheduler.model import Due, Failure
from scheduler.node import registration as catalog
from scheduler.node.recovery import Recovery
from scheduler.registry import Job, job
from scheduler.run.dispatcher import Dispatcher
from scheduler.states import Reason, RunStatus
from scheduler.store import claims, queries, takeover, writes
from scheduler.store import jobs as job_rows
from scheduler.store.database import Database
from tests.waiting import wait_until

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NODE = "node-a"


def _recovery(database: Database, jobs: dict[str, Job]) -> tuple[Recovery, Dispatcher]:
    log = structlog.get_logger()
    dispatcher = Dispatcher(database, jobs, NODE, 2, log)
    recovery = Recovery(
        database=database,
        dispatcher=dispatcher,
        jobs=jobs,
        node_id=NODE,
        interval=1.0,
        stop=threading.Event(),
        log=log,
    )
    return recovery, dispatcher


def _status(database: Database) -> tuple[str, int]:
    row = queries.run_mapping(database, "report", PERIOD)
    assert row is not None
    return str(row["status"]), int(str(row["attempt"]))


def test_attempts_that_never_started_do_not_count_against_the_period(database: Database) -> None:
    """Three restarts in a row gave the claim back before it started (retries=0): the
    period never ran, so it is not given up but taken again, and runs."""
    ran: list[int] = []
    report = job(cron="* * * * *", name="report")(lambda ctx: ran.append(ctx.attempt))
    jobs = {"report": report}
    (claim,) = claims.claim(database, [Due("report", PERIOD, 30)], "node-x").won
    for _ in range(3):
        assert writes.finish(
            database, claim, RunStatus.ABANDONED, None, reason=Reason.SHUTDOWN, retry_in=0
        )
        (stale,) = takeover.find_stale(database, ["report"], 10)
        taken = takeover.retake(database, stale, "node-x")
        assert taken is not None
        claim = taken
    assert writes.finish(
        database, claim, RunStatus.ABANDONED, None, reason=Reason.SHUTDOWN, retry_in=0
    )
    recovery, dispatcher = _recovery(database, jobs)
    try:
        assert recovery.recover_once() == 1
        wait_until(lambda: _status(database)[0] not in ("claimed", "running"))
    finally:
        dispatcher.drain(1)
    assert _status(database) == (RunStatus.SUCCEEDED, 5)
    assert ran == [5]


def test_a_paused_job_keeps_its_retry_until_it_is_resumed(database: Database) -> None:
    ran: list[int] = []
    report = job(cron="* * * * *", name="report", retries=2)(lambda ctx: ran.append(ctx.attempt))
    jobs = {"report": report}
    catalog.register(database, jobs)
    (claim,) = claims.claim(database, [Due("report", PERIOD, 30)], NODE).won
    writes.start(database, claim)
    failure = Failure("builtins.ValueError", "bad row", "")
    writes.finish(database, claim, RunStatus.FAILED, 3, failure=failure, retry_in=0)
    assert job_rows.set_paused(database, "report", paused=True)
    recovery, dispatcher = _recovery(database, jobs)
    try:
        recovery.recover_once()
        assert _status(database) == (RunStatus.FAILED, 1)
        assert ran == []
        assert job_rows.set_paused(database, "report", paused=False)
        recovery.recover_once()
        wait_until(lambda: _status(database)[0] not in ("claimed", "running"))
    finally:
        dispatcher.drain(1)
    assert _status(database) == (RunStatus.SUCCEEDED, 2)
    assert ran == [2]
