"""Console requests carried out by a node's side thread on a real database: taken once,
left to a node that knows the job, refused in one line, expired when nobody took them."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import structlog

from scheduler.node import registration as catalog
from scheduler.node.requests import Requests
from scheduler.registry import Job, job
from scheduler.run.dispatcher import Dispatcher
from scheduler.store import requests as asked
from scheduler.store.database import Database
from scheduler.store.requests import Draft, RequestKind
from tests.acceptance.records import run_rows
from tests.sql import update
from tests.waiting import wait_until

NODE = "node-a"


def _node(database: Database, jobs: dict[str, Job]) -> tuple[Requests, Dispatcher]:
    catalog.register(database, jobs)
    log = structlog.get_logger()
    dispatcher = Dispatcher(database, jobs, NODE, 2, log)
    taker = Requests(
        database=database,
        dispatcher=dispatcher,
        jobs=jobs,
        node_id=NODE,
        stop=threading.Event(),
        log=log,
    )
    return taker, dispatcher


def test_a_request_is_taken_once_and_left_for_a_node_that_knows_the_job(
    database: Database, database_url: str
) -> None:
    ran: list[str] = []
    report = job(cron="0 0 * * *", name="report")(lambda ctx: ran.append(ctx.origin))
    taker, dispatcher = _node(database, {"report": report})
    mine = asked.add(database, Draft("report", RequestKind.TRIGGER, "alice"))
    theirs = asked.add(database, Draft("elsewhere", RequestKind.TRIGGER, "bob"))
    try:
        taker.step()
        wait_until(lambda: ran == ["manual"])
    finally:
        dispatcher.drain(1)
    row = asked.get(database, mine)
    assert row is not None
    assert (row.taken_by, row.outcome, row.requested_by) == (NODE, "done", "alice")
    assert row.run_id == run_rows(database_url, "report")[0]["id"]
    assert not asked.take(database, mine, "node-b"), "taken once"
    other = asked.get(database, theirs)
    assert other is not None
    assert other.taken_by is None, "no node here knows that job"
    assert [row.id for row in asked.pending(database, ["elsewhere"])] == [theirs]


def test_a_request_that_cannot_be_done_is_refused_in_one_line(database: Database) -> None:
    report = job(cron="0 0 * * *", name="report")(lambda: None)
    taker, dispatcher = _node(database, {"report": report})
    period = datetime(2026, 11, 30, tzinfo=UTC)
    request_id = asked.add(database, Draft("report", RequestKind.RERUN, "alice", period=period))
    try:
        taker.step()
    finally:
        dispatcher.drain(1)
    row = asked.get(database, request_id)
    assert row is not None
    assert row.outcome == "refused"
    assert row.detail == (
        "job 'report': PERIOD: 2026-11-30T00:00:00Z has no run; use `scheduler backfill`"
    )


def test_a_request_no_node_took_within_an_hour_expires_unrun(
    database: Database, database_url: str
) -> None:
    report = job(cron="0 0 * * *", name="report")(lambda: None)
    taker, dispatcher = _node(database, {"report": report})
    request_id = asked.add(database, Draft("report", RequestKind.TRIGGER, "alice"))
    asked_at = datetime.now(UTC) - timedelta(hours=2)
    with database.transaction() as connection:
        update(connection, "scheduler_requests", {}, requested_at=asked_at)
    try:
        taker.step()
    finally:
        dispatcher.drain(1)
    row = asked.get(database, request_id)
    assert row is not None
    assert row.outcome == "expired"
    assert row.detail is not None
    assert row.detail.startswith("no node took it within 1h of ")
    assert run_rows(database_url, "report") == []


def test_requests_of_jobs_no_node_knows_do_not_hold_up_a_nodes_own(database: Database) -> None:
    """250 requests for jobs no node here knows, asked before the node's own: it reads its
    own jobs' requests, not the oldest of all, and carries its own out."""
    report = job(cron="0 0 * * *", name="report")(lambda: None)
    taker, dispatcher = _node(database, {"report": report})
    with database.transaction() as connection:
        for n in range(250):
            connection.execute(
                """INSERT INTO scheduler_requests (id, job, kind, force, include_failed,
                       requested_at, requested_by)
                   VALUES (:id, :job, 'trigger', FALSE, FALSE, :at, 'bob')""",
                {"id": f"foreign-{n}", "job": f"removed-{n % 7}", "at": datetime.now(UTC)},
            )
    mine = asked.add(database, Draft("report", RequestKind.TRIGGER, "alice"))
    try:
        taker.step()
    finally:
        dispatcher.drain(1)
    row = asked.get(database, mine)
    assert row is not None
    assert (row.taken_by, row.outcome) == (NODE, "done")
