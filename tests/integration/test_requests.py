"""Console requests carried out by a node's side thread on a real database: taken once,
left to a node that knows the job, refused in one line, expired when nobody took them;
held while carried out, taken again once a hold lapsed, the lost taker fenced."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog

from scheduler import RunContext
from scheduler.node import registration as catalog
from scheduler.node import repair
from scheduler.node import requests as node_requests
from scheduler.node.requests import Requests
from scheduler.registry import Job, job
from scheduler.run.dispatcher import Dispatcher
from scheduler.store import job_sets
from scheduler.store import requests as asked
from scheduler.store.database import Database
from scheduler.store.requests import Draft, Fenced, RequestKind
from tests.acceptance.records import run_rows
from tests.sql import rows, update
from tests.waiting import wait_until

NODE = "node-a"
_NONE = asked.RequestRow(
    "", "", "", None, None, None, False, False, datetime.now(UTC), "", None, None, None, None,
    None, None,
)  # fmt: skip


def _node(
    database: Database,
    jobs: dict[str, Job],
    node: str = NODE,
    stop: threading.Event | None = None,
) -> tuple[Requests, Dispatcher]:
    catalog.register(database, jobs)
    log = structlog.get_logger().bind(node=node)
    dispatcher = Dispatcher(database, jobs, node, 2, log)
    taker = Requests(
        database=database,
        dispatcher=dispatcher,
        jobs=jobs,
        node_id=node,
        stop=stop or threading.Event(),
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
    assert asked.take(database, row, "node-b", 10) is None, "taken once"
    other = asked.get(database, theirs)
    assert other is not None
    assert other.taken_by is None, "no node here knows that job"
    job_sets.record(database, "elsewhere-set", ["elsewhere"])
    assert [row.id for row in asked.pending(database, "elsewhere-set")] == [theirs]


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


HOURS = [datetime(2026, 11, 30, hour, tzinfo=UTC) for hour in range(8)]


def _backfill(database: Database) -> tuple[Job, list[datetime], str]:
    """An hourly job that notes each run and fails, and a request to backfill eight of
    its hours, failed ones too (so that a period run twice for it would show)."""
    ran: list[datetime] = []

    def hourly(ctx: RunContext) -> None:
        ran.append(ctx.period)
        raise RuntimeError("down")

    draft = Draft(
        "hourly",
        RequestKind.BACKFILL,
        "alice",
        range_start=HOURS[0],
        range_end=HOURS[-1],
        include_failed=True,
    )
    return job(cron="0 * * * *", name="hourly")(hourly), ran, asked.add(database, draft)


def _slowed(
    monkeypatch: pytest.MonkeyPatch, pause: Callable[[str, int], float]
) -> list[tuple[str, datetime]]:
    """Each backfill step of a request waits `pause(node, step)` seconds before its
    claim (a node stalled between steps); the steps each node claimed, in order."""
    claimed: list[tuple[str, datetime]] = []
    real = repair.claim_step

    def claim_step(hands: repair.Hands, step: repair.Step, fenced: Fenced | None = None) -> Any:
        node = hands.node.id
        time.sleep(pause(node, sum(1 for who, _ in claimed if who == node)))
        claim = real(hands, step, fenced)
        if claim is not None:
            claimed.append((node, claim.period))
        return claim

    monkeypatch.setattr(repair, "claim_step", claim_step)
    return claimed


def _both(database: Database, jobs: dict[str, Job]) -> tuple[threading.Event, list[Dispatcher]]:
    stop = threading.Event()
    dispatchers = []
    for node in ("node-a", "node-b"):
        taker, dispatcher = _node(database, jobs, node, stop)
        dispatchers.append(dispatcher)
        taker.start()
        time.sleep(0.1)  # node-a looks first
    return stop, dispatchers


def _done(database: Database, request_id: str) -> asked.RequestRow:
    wait_until(lambda: (asked.get(database, request_id) or _NONE).outcome is not None, 20)
    row = asked.get(database, request_id)
    assert row is not None
    return row


def test_a_request_is_not_taken_again_while_its_taker_renews_its_hold(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The false positive of taking again: a backfill carried out for three times its
    hold, each step renewing it, is never taken by the other node, which looks every
    50 ms meanwhile."""
    monkeypatch.setattr(node_requests, "HOLD_S", 0.6)
    monkeypatch.setattr(node_requests, "POLL_S", 0.05)
    claimed = _slowed(monkeypatch, lambda node, step: 0.25)
    hourly, ran, request_id = _backfill(database)
    stop, dispatchers = _both(database, {"hourly": hourly})
    try:
        row = _done(database, request_id)
        wait_until(lambda: len(ran) == len(HOURS))
    finally:
        stop.set()
        for dispatcher in dispatchers:
            dispatcher.drain(1)
    assert (row.outcome, row.taken_by, row.tries) == ("done", "node-a", 1)
    assert row.detail == "8 of 8 periods claimed, 0 kept"
    assert claimed == [("node-a", hour) for hour in HOURS]
    assert sorted(ran) == HOURS


def test_a_taker_that_lost_its_hold_claims_nothing_more(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """node-a stalls before its third step for longer than its hold: node-b takes the
    request again and goes on after the two periods node-a claimed (which failed: taken
    from the start, failed ones too, they would run again); node-a's next claim is
    refused by the fence. Every period is claimed and run once."""
    monkeypatch.setattr(node_requests, "HOLD_S", 0.6)
    monkeypatch.setattr(node_requests, "POLL_S", 0.05)
    claimed = _slowed(monkeypatch, lambda node, step: 2.0 if (node, step) == ("node-a", 2) else 0)
    hourly, ran, request_id = _backfill(database)
    stop, dispatchers = _both(database, {"hourly": hourly})
    try:
        row = _done(database, request_id)
        wait_until(lambda: len(ran) == len(HOURS))
        time.sleep(2.5)  # node-a's stalled step has come and gone
    finally:
        stop.set()
        for dispatcher in dispatchers:
            dispatcher.drain(1)
    assert claimed == [("node-a", hour) for hour in HOURS[:2]] + [
        ("node-b", hour) for hour in HOURS[2:]
    ]
    assert sorted(ran) == HOURS, "each period run once"
    assert (row.outcome, row.taken_by, row.tries) == ("done", "node-b", 2)
    assert row.detail == (
        "2 of 8 periods claimed, 0 kept so far (node-a); "
        "node-b went on after 2026-11-30T01:00:00Z: 6 of 6 periods claimed, 0 kept"
    )
    assert {run["attempt"] for run in rows(database, "scheduler_runs")} == {1}


def test_a_trigger_whose_taker_lost_its_hold_runs_once(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """node-a stalls between taking a trigger and claiming its run, past its hold: node-b
    takes it again and claims the manual run; node-a's claim, when it comes, is refused
    by the fence (a manual run's period is new each time: nothing else would stop it)."""
    monkeypatch.setattr(node_requests, "HOLD_S", 0.6)
    monkeypatch.setattr(node_requests, "POLL_S", 0.05)
    real = repair.trigger
    lost: list[str] = []

    def trigger(hands: repair.Hands, fenced: Fenced | None = None) -> Any:
        if hands.node.id == "node-a":
            time.sleep(2.0)
        try:
            return real(hands, fenced)
        except asked.RequestLostError:
            lost.append(hands.node.id)
            raise

    monkeypatch.setattr(repair, "trigger", trigger)
    ran: list[str] = []
    report = job(cron="0 0 * * *", name="report")(lambda ctx: ran.append(ctx.node))
    request_id = asked.add(database, Draft("report", RequestKind.TRIGGER, "alice"))
    stop, dispatchers = _both(database, {"report": report})
    try:
        row = _done(database, request_id)
        wait_until(lambda: lost == ["node-a"], timeout=5)
        time.sleep(0.5)
    finally:
        stop.set()
        for dispatcher in dispatchers:
            dispatcher.drain(1)
    assert (row.outcome, row.taken_by, row.tries) == ("done", "node-b", 2)
    assert ran == ["node-b"]
    assert [run["holder"] for run in rows(database, "scheduler_runs")] == ["node-b"]
