"""Alert delivery on a real database to a real HTTP receiver: each event reaches its
hooks once across two nodes' delivery threads, signed; a failing hook is tried again
with a pause and only it; a hook that hangs costs its timeout and nothing else."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import structlog

from scheduler import hooks
from scheduler.alerting.webhook import KEY_HEADER, SIGNATURE_HEADER, Webhook, verify_signature
from scheduler.model import ClockReading, Due, Event, Failure, Finish
from scheduler.node import alerts
from scheduler.node import registration as catalog
from scheduler.node.alerts import Alerts
from scheduler.node.wakeups import Mode as WakeupMode
from scheduler.node.wakeups import Wakeups
from scheduler.registry import Job, job
from scheduler.states import Delivery, RunStatus
from scheduler.store import claims, writes
from scheduler.store import deliveries as stored_events
from scheduler.store.beat import Beat
from scheduler.store.database import Database
from tests.receivers import receiver
from tests.waiting import wait_until

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
BOOM = Failure("ValueError", "boom", "Traceback …")
SECRET = "s3cret"


@pytest.fixture(autouse=True)
def _quick(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(alerts, "FIRST_RETRY_S", 0.2)
    monkeypatch.setattr(alerts, "POLL_S", 0.05)
    monkeypatch.setattr(alerts, "HOOK_TIMEOUT_S", 0.5)
    hooks.clear_global()
    yield
    hooks.clear_global()


def _fail(database: Database, job_name: str, node: str = "node-a") -> None:
    (claim,) = claims.claim(database, [Due(job_name, PERIOD, 30)], node).won
    writes.start(database, claim)
    writes.record(database, [Finish(claim, RunStatus.FAILED, 5, BOOM)], [])


def _nodes(
    database: Database, jobs: dict[str, Job], count: int
) -> tuple[threading.Event, list[Alerts]]:
    catalog.register(database, jobs)  # as a node does before it delivers
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
    # SideThread keeps its stop event as `_stop`, which hides Thread's own: neither join
    # nor is_alive work on it, so give the threads a moment to see the stop.
    time.sleep(0.2)
    assert [thread.failure for thread in threads] == [None] * len(threads)


def test_two_nodes_deliver_a_failure_once_signed(database: Database) -> None:
    with receiver() as http:
        webhook = Webhook(http.url + "/hook", secret=SECRET)

        @job(cron="* * * * *", name="billing", on={"failed": webhook})
        def billing() -> None: ...

        _fail(database, "billing")
        stop, threads = _nodes(database, {"billing": billing}, 2)
        try:
            wait_until(lambda: stored_events.recent(database)[0].state is Delivery.DELIVERED)
            time.sleep(0.3)  # a second delivery would show by now
        finally:
            _stop(stop, threads)
    (request,) = http.requests
    payload = request.json()
    assert payload["key"] == "billing/2026-11-30T12:00:00Z/failed"
    assert payload["kind"] == "failed"
    assert payload["detail"] == "ValueError: boom"
    assert request.headers[KEY_HEADER] == payload["key"]
    assert verify_signature(SECRET, request.body, request.headers[SIGNATURE_HEADER])
    assert not verify_signature("another", request.body, request.headers[SIGNATURE_HEADER])
    (row,) = stored_events.recent(database)
    assert row.delivered_to == (webhook.hook_name,)
    assert row.tries == 1


def test_a_failing_hook_is_tried_again_alone_until_it_takes_the_event(database: Database) -> None:
    heard: list[str] = []
    attempts: list[int] = []

    def flaky(event: Event) -> None:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("pager down")
        heard.append(event.key)

    def steady(event: Event) -> None:
        heard.append("steady:" + event.key)

    @job(cron="* * * * *", name="sync", on={"failed": [flaky, steady]})
    def sync() -> None: ...

    _fail(database, "sync")
    stop, threads = _nodes(database, {"sync": sync}, 1)
    try:
        wait_until(lambda: stored_events.recent(database)[0].state is Delivery.DELIVERED)
    finally:
        _stop(stop, threads)
    assert heard == [
        "steady:sync/2026-11-30T12:00:00Z/failed",
        "sync/2026-11-30T12:00:00Z/failed",
    ]
    (row,) = stored_events.recent(database)
    assert row.tries == 3
    assert row.last_error is None


def test_a_hook_that_hangs_times_out_and_the_next_event_still_goes(database: Database) -> None:
    """The hanging call costs its timeout; the event stays held while it runs, and the
    hook is not called again beside it."""
    release = threading.Event()
    heard: list[str] = []
    calls: list[str] = []

    def hangs(event: Event) -> None:
        calls.append(event.key)
        release.wait(30)

    @job(cron="* * * * *", name="stuck", on={"failed": hangs})
    def stuck() -> None: ...

    @hooks.on_event("failed")
    def everywhere(event: Event) -> None:
        heard.append(event.job)

    _fail(database, "stuck")
    _fail(database, "other")
    jobs = {"stuck": stuck, "other": job(cron="* * * * *", name="other")(lambda: None)}
    stop, threads = _nodes(database, jobs, 1)
    try:
        wait_until(lambda: "other" in heard)
        wait_until(
            lambda: (stored_events.recent(database, job="stuck")[0].last_error or "").endswith(
                "did not return within 0.5 s; still running"
            )
        )
        time.sleep(1.0)  # retries come every 0.2 s and more: none calls it again
        (row,) = stored_events.recent(database, job="stuck")
    finally:
        release.set()
        _stop(stop, threads)
    assert calls == ["stuck/2026-11-30T12:00:00Z/failed"]
    # The global hook took it the first time; the hanging one's call is still open.
    assert row.state is Delivery.PENDING
    assert row.taken_by == "node-0"
    assert any(name.endswith("everywhere") for name in row.delivered_to)


def test_an_event_no_hook_listens_to_is_unrouted(database: Database) -> None:
    @job(cron="* * * * *", name="quiet")
    def quiet() -> None: ...

    _fail(database, "quiet")
    stop, threads = _nodes(database, {"quiet": quiet}, 1)
    try:
        wait_until(lambda: stored_events.recent(database)[0].state is Delivery.UNROUTED)
    finally:
        _stop(stop, threads)


def test_tries_run_out_and_the_event_is_failed(database: Database) -> None:
    with receiver() as http:
        http.statuses = [500] * 10
        webhook = Webhook(http.url, retries=1, format="slack")

        @job(cron="* * * * *", name="billing", on={"failed": webhook})
        def billing() -> None: ...

        _fail(database, "billing")
        stop, threads = _nodes(database, {"billing": billing}, 1)
        try:
            wait_until(lambda: stored_events.recent(database)[0].state is Delivery.FAILED)
        finally:
            _stop(stop, threads)
    assert len(http.requests) == 2
    text = http.requests[0].json()["text"]
    assert text.startswith("*failed*: `billing` period 2026-11-30T12:00:00Z: ValueError: boom")
    assert "billing/2026-11-30T12:00:00Z/failed" in text
    (row,) = stored_events.recent(database)
    assert row.last_error is not None
    assert "answered 500" in row.last_error


def _beat(alerts_in: float | None) -> Beat:
    clock = ClockReading.host(datetime.now(UTC), time.monotonic())
    return Beat([], clock, [], [], [], None, False, alerts_in, False, True)


def test_a_listening_node_asks_once_a_minute_about_events_only_others_can_deliver(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event of a job this node does not run is due on every heartbeat until a node
    that runs the job delivers it; this node looks once, then lets the beats' "due"
    pass for a minute. Its own events still wake it at once (their notification)."""
    asked: list[float] = []
    real_due = stored_events.due

    def counting_due(*args: object, **kwargs: object) -> list[stored_events.EventRow]:
        asked.append(time.monotonic())
        return real_due(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(stored_events, "due", counting_due)
    heard: list[Event] = []

    @job(cron="* * * * *", name="ours", on={"failed": heard.append})
    def ours() -> None: ...

    _fail(database, "theirs")  # pending; no live node here runs "theirs"
    catalog.register(database, {"ours": ours})
    wakeups = Wakeups(structlog.get_logger())
    wakeups.choose(WakeupMode.EVENTS, "test")
    stop = threading.Event()
    thread = Alerts(
        database=database,
        jobs={"ours": ours},
        node_id="node-a",
        stop=stop,
        log=structlog.get_logger(),
        wakeups=wakeups,
    )
    thread.start()
    try:
        wait_until(lambda: len(asked) == 1, timeout=5)  # the first look, at start
        for _ in range(5):  # five heartbeats, each reading an event due
            wakeups.beat(_beat(-1.0))
            time.sleep(0.2)
        assert len(asked) == 2, "the first beat's 'due' is looked at, the next four not"
        _fail(database, "ours")
        wakeups.heard("alert")  # what its birth notifies
        wait_until(lambda: len(heard) == 1, timeout=5)
    finally:
        _stop(stop, [thread])
