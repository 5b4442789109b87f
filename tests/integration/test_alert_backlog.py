"""Alert delivery of a node's own jobs is not held up by other jobs' pending events (a
removed job's, another fleet's), which end `unrouted` once nobody has run their job for
a day; and a hook slower than its timeout is called once: its late success is
recorded, by one node, on a real database."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import structlog

from scheduler import hooks
from scheduler.model import Due, Event, Failure, Finish, NodeIdentity
from scheduler.node import alerts
from scheduler.node import registration as catalog
from scheduler.node.alerts import Alerts
from scheduler.node.peers import jobs_digest
from scheduler.registry import Job, job
from scheduler.states import Delivery, RunStatus
from scheduler.store import beat, claims, job_sets, nodes, prune, writes
from scheduler.store import deliveries as stored_events
from scheduler.store import requests as asked
from scheduler.store.database import Database, open_database
from scheduler.store.requests import Draft, RequestKind
from tests.sql import insert, rows, update
from tests.waiting import wait_until

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
JOBS = ("removed", "unknown", "elsewhere", "fresh")
BOOM = Failure("ValueError", "boom", "Traceback …")


@pytest.fixture(autouse=True)
def _quick(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(alerts, "FIRST_RETRY_S", 0.2)
    monkeypatch.setattr(alerts, "POLL_S", 0.05)
    monkeypatch.setattr(alerts, "HOOK_TIMEOUT_S", 0.3)
    hooks.clear_global()
    yield
    hooks.clear_global()


def _fail(database: Database, job_name: str, period: datetime) -> None:
    (claim,) = claims.claim(database, [Due(job_name, period, 30)], "node-a").won
    writes.start(database, claim)
    writes.record(database, [Finish(claim, RunStatus.FAILED, 5, BOOM)], [])


def _succeed(database: Database, job_name: str, period: datetime) -> None:
    (claim,) = claims.claim(database, [Due(job_name, period, 30)], "node-a").won
    writes.start(database, claim)
    writes.record(database, [Finish(claim, RunStatus.SUCCEEDED, 5)], [])


def _foreign_events(database: Database, count: int) -> None:
    """Pending events, older than any of this test's own, of jobs no node here knows:
    another fleet's, registered just now (so that nobody counts them abandoned)."""
    others = {f"removed-{n}": job(cron="* * * * *", name=f"removed-{n}")(print) for n in range(7)}
    catalog.register(database, others)
    born = datetime.now(UTC) - timedelta(hours=1)
    with database.transaction() as connection:
        for n in range(count):
            insert(
                connection,
                "scheduler_events",
                job=f"removed-{n % 7}",
                period=PERIOD + timedelta(minutes=n),
                kind="failed",
                subject="",
                created_at=born,
                state="pending",
                tries=0,
                next_try_at=born,
            )


def _threads(
    database: Database, jobs: dict[str, Job], count: int
) -> tuple[threading.Event, list[Alerts]]:
    catalog.register(database, jobs)
    stop = threading.Event()
    threads = [
        Alerts(
            database=database, jobs=jobs, node_id=f"node-{n}", stop=stop, log=structlog.get_logger()
        )
        for n in range(count)
    ]
    for thread in threads:
        thread.start()
    return stop, threads


def _stop(stop: threading.Event, threads: list[Alerts]) -> None:
    stop.set()
    time.sleep(0.2)
    assert [thread.failure for thread in threads] == [None] * len(threads)


def test_events_of_jobs_no_node_knows_do_not_hold_up_a_nodes_own(database: Database) -> None:
    """600 pending events of another fleet's jobs, older than the live job's 12: the node
    reads its own jobs' events, not the oldest of all jobs, and delivers its 12 (six
    failures, each a streak of its own, and six recoveries)."""
    heard: list[str] = []

    def hear(event: Event) -> None:
        heard.append(event.key)

    @job(cron="* * * * *", name="billing", on={"failed": hear, "recovered": hear})
    def billing() -> None: ...

    _foreign_events(database, 600)
    for n in range(12):
        (_succeed if n % 2 else _fail)(database, "billing", PERIOD + timedelta(minutes=n))
    stop, threads = _threads(database, {"billing": billing}, 1)
    try:
        wait_until(lambda: len(heard) == 12, timeout=8)
    finally:
        _stop(stop, threads)
    assert len(set(heard)) == 12
    others = stored_events.count_by_state(database)
    assert others == {"delivered": 12, "pending": 600}, "the other fleet's wait for it"


def test_a_hook_slower_than_its_timeout_is_called_once_and_its_late_success_recorded(
    database: Database,
) -> None:
    """The call passes its timeout (0.3 s) and returns after 1 s: no node calls the hook
    again meanwhile, and the event ends delivered, after one try."""
    calls: list[float] = []

    def slow(event: Event) -> None:
        calls.append(time.monotonic())
        time.sleep(1.0)

    @job(cron="* * * * *", name="billing", on={"failed": slow})
    def billing() -> None: ...

    _fail(database, "billing", PERIOD)
    stop, threads = _threads(database, {"billing": billing}, 2)
    try:
        wait_until(
            lambda: stored_events.recent(database)[0].state is not Delivery.PENDING, timeout=15
        )
        time.sleep(1.5)  # another call would have started by now
    finally:
        _stop(stop, threads)
    (row,) = stored_events.recent(database)
    assert len(calls) == 1, f"called {len(calls)} times; {row}"
    assert row.state is Delivery.DELIVERED, row
    assert row.tries == 1


def test_a_late_call_that_raises_is_a_failed_try_and_the_hook_is_called_again_after_it(
    database: Database,
) -> None:
    """The held event is let go when the late call ends: raising, it counts as a failed
    try, and the next try calls the hook again, never beside the first call."""
    spans: list[tuple[float, float]] = []

    def flaky(event: Event) -> None:
        started = time.monotonic()
        try:
            if not spans:
                time.sleep(0.8)
                raise ConnectionError("pager down")
        finally:
            spans.append((started, time.monotonic()))

    @job(cron="* * * * *", name="billing", on={"failed": flaky})
    def billing() -> None: ...

    _fail(database, "billing", PERIOD)
    stop, threads = _threads(database, {"billing": billing}, 2)
    try:
        wait_until(
            lambda: stored_events.recent(database)[0].state is Delivery.DELIVERED, timeout=15
        )
    finally:
        _stop(stop, threads)
    (row,) = stored_events.recent(database)
    assert len(spans) == 2
    (_, first_ended), (second_started, _) = spans
    assert second_started >= first_ended, "not called again while the first call ran"
    assert row.tries == 2


def _node_row(database: Database, node: str, jobs: dict[str, Job], *, stopped: bool) -> None:
    """A node started with these jobs, heard from a moment ago (or stopped)."""
    nodes.register(database, NodeIdentity(node, node, "host", 1, "1"), jobs_digest(jobs.values()))
    if stopped:
        nodes.mark_stopped(database, node)


def test_events_of_a_job_nobody_has_run_for_a_day_become_unrouted_and_are_pruned(
    database: Database,
) -> None:
    """`removed` was last registered two days ago and its node stopped; `unknown` was
    never registered: nobody will deliver their events. `elsewhere` was registered two
    days ago too, but a node that still beats runs it; `fresh` was registered by a
    one-shot command an hour ago: theirs stay pending."""
    defined = {name: job(cron="* * * * *", name=name)(lambda: None) for name in JOBS}
    for name in ("removed", "elsewhere", "fresh"):
        catalog.register(database, {name: defined[name]})
    _node_row(database, "gone-node", {"removed": defined["removed"]}, stopped=True)
    _node_row(database, "live-node", {"elsewhere": defined["elsewhere"]}, stopped=False)
    two_days_ago = datetime.now(UTC) - timedelta(days=2)
    with database.transaction() as connection:
        for name in ("removed", "elsewhere"):
            update(connection, "scheduler_jobs", {"name": name}, last_seen=two_days_ago)
            update(connection, "scheduler_job_sets", {"job": name}, registered_at=two_days_ago)
    for name in JOBS:
        _fail(database, name, PERIOD)
    node = Alerts(
        database=database,
        jobs={"fresh": defined["fresh"]},
        node_id="node-a",
        stop=threading.Event(),
        log=structlog.get_logger(),
    )
    node.unroute_orphans()
    node.unroute_orphans()  # another node, or the next look: nothing more
    states = {row.event.job: row for row in stored_events.recent(database)}
    assert {name: row.state.value for name, row in states.items()} == {
        "removed": "unrouted",
        "unknown": "unrouted",
        "elsewhere": "pending",
        "fresh": "pending",
    }
    assert states["removed"].last_error == (
        "no node has run the job for 24 h: nobody will deliver it"
    )
    # Retention prunes the job sets nobody uses: the stopped node's, two days old.
    assert job_sets.prune(database, datetime.now(UTC) - timedelta(days=1)) == 1
    left = rows(database, "scheduler_job_sets", order_by="job")
    assert [row["job"] for row in left] == ["elsewhere", "fresh"]
    later = datetime.now(UTC) + timedelta(days=1)
    assert prune.prune(database, later).events == 2
    assert sorted(row.event.job for row in stored_events.recent(database)) == [
        "elsewhere",
        "fresh",
    ]


def test_a_nodes_heartbeat_reads_its_own_jobs_events_and_requests_only(postgres_url: str) -> None:
    """Other jobs' pending events and waiting requests are never "due" for this node's
    beat (which would wake its threads for nothing at every beat); its own are."""
    database = open_database(postgres_url)
    try:
        ours = job(cron="* * * * *", name="ours")(lambda: None)
        catalog.register(database, {"ours": ours})
        _node_row(database, "node-a", {"ours": ours}, stopped=False)
        _foreign_events(database, 3)
        asked.add(database, Draft("removed-1", RequestKind.TRIGGER, "bob"))
        quiet = beat.beat(database, "node-a", alive_within=30, liveness=False)
        assert (quiet.alerts_in, quiet.requests_waiting) == (None, False)
        _fail(database, "ours", PERIOD)
        asked.add(database, Draft("ours", RequestKind.TRIGGER, "alice"))
        told = beat.beat(database, "node-a", alive_within=30, liveness=False)
        assert told.alerts_in is not None
        assert told.alerts_in <= 0
        assert told.requests_waiting
    finally:
        database.dispose()
