"""Alert events are born with the run row they are about, once per (job, period, kind,
subject), on both backends: final failures, retries, timeouts, recoveries, overlap
skips, catch-up's missed periods; and one node takes each delivery try."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from functools import partial

import structlog

from scheduler.model import Claim, Due, Entry, Failure, Finish
from scheduler.node.alerts import Alerts
from scheduler.registry import job
from scheduler.states import Delivery, EventKind, Origin, Reason, RunStatus
from scheduler.store import claims, job_sets, periods, prune, writes
from scheduler.store import deliveries as stored_events
from scheduler.store import jobs as stored_jobs
from scheduler.store.database import Database
from tests.sql import began_at, insert

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NODE = "node-a"
BOOM = Failure("ValueError", "boom", "Traceback …")


def _held(database: Database, job: str, period: datetime, overlap_limit: int | None = 1) -> Claim:
    (claim,) = claims.claim(database, [Due(job, period, 30, overlap_limit)], NODE).won
    writes.start(database, claim)
    began_at(database, claim.id, period)
    return claim


def _kinds(database: Database, job: str) -> list[tuple[str, str, str]]:
    rows = stored_events.recent(database, job=job, limit=100)
    return sorted(
        (row.event.period.isoformat(), row.event.kind.value, row.event.subject) for row in rows
    )


def test_a_final_failure_is_one_failed_event_even_when_its_write_is_repeated(
    database: Database,
) -> None:
    claim = _held(database, "billing", PERIOD)
    outcome = Finish(claim, RunStatus.FAILED, 12, BOOM)
    assert writes.record(database, [outcome], [])[0] == [True]
    # The same write again (its reply was lost): the row shows it, no second event.
    assert writes.record(database, [outcome], [])[0] == [True]
    (row,) = stored_events.recent(database, job="billing")
    assert row.event.kind is EventKind.FAILED
    assert row.event.key == "billing/2026-11-30T12:00:00Z/failed"
    assert row.event.run_id == claim.id
    assert row.event.attempt == 1
    assert row.event.detail == "ValueError: boom"
    assert row.state is Delivery.PENDING


def test_a_retried_timeout_is_retrying_and_timed_out_for_that_attempt(database: Database) -> None:
    claim = _held(database, "sync", PERIOD)
    outcome = Finish(claim, RunStatus.TIMED_OUT, 5000, BOOM, retry_in=30.0)
    writes.record(database, [outcome], [])
    assert _kinds(database, "sync") == [
        (PERIOD.isoformat(), "retrying", "1"),
        (PERIOD.isoformat(), "timed_out", "1"),
    ]


def test_a_refused_outcome_gives_rise_to_no_event(database: Database) -> None:
    claim = _held(database, "sync", PERIOD)
    stranger = Claim(
        claim.id, claim.job, claim.period, claim.attempt, "node-b", 30, Origin.SCHEDULE
    )
    assert writes.record(database, [Finish(stranger, RunStatus.FAILED, 1, BOOM)], [])[0] == [False]
    assert _kinds(database, "sync") == []


def test_the_first_success_after_a_failed_period_is_recovered(database: Database) -> None:
    periods_ = [PERIOD + timedelta(minutes=n) for n in range(4)]
    statuses = [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.SUCCEEDED, RunStatus.SUCCEEDED]
    for period, status in zip(periods_, statuses, strict=True):
        claim = _held(database, "report", period)
        failure = BOOM if status is RunStatus.FAILED else None
        writes.record(database, [Finish(claim, status, 3, failure)], [])
    assert _kinds(database, "report") == [
        (periods_[1].isoformat(), "failed", ""),
        (periods_[2].isoformat(), "recovered", ""),
    ]


def test_an_overlap_skip_is_an_event_and_a_paused_one_is_not(database: Database) -> None:
    _held(database, "long", PERIOD)
    result = claims.claim(database, [Due("long", PERIOD + timedelta(minutes=1), 30)], NODE)
    assert [result.reasons[claim.id] for claim in result.skipped] == [Reason.OVERLAP]
    assert _kinds(database, "long") == [
        ((PERIOD + timedelta(minutes=1)).isoformat(), "skipped", ""),
    ]
    definition = stored_jobs.JobDefinitionRow("quiet", "* * * * *", "UTC", 30.0, None, 0, 60.0)
    stored_jobs.register(database, [definition])
    stored_jobs.set_paused(database, "quiet", paused=True)
    result = claims.claim(database, [Due("quiet", PERIOD, 30)], NODE)
    assert [result.reasons[claim.id] for claim in result.skipped] == [Reason.PAUSED]
    assert _kinds(database, "quiet") == []


def test_catch_up_missing_a_day_of_periods_is_one_missed_event(database: Database) -> None:
    missed = [
        Entry(PERIOD + timedelta(seconds=n), RunStatus.MISSED, Reason.WINDOW) for n in range(500)
    ]
    paused = [
        Entry(PERIOD - timedelta(seconds=n + 1), RunStatus.SKIPPED, Reason.PAUSED) for n in range(3)
    ]
    write = partial(
        periods.write, database, "tick", holder=NODE, lease_seconds=30.0, origin=Origin.CATCHUP
    )
    write(missed + paused)
    (row,) = stored_events.recent(database, job="tick")
    assert row.event.kind is EventKind.MISSED
    assert row.event.period == PERIOD
    assert row.event.reason == "window"
    assert row.event.detail is not None
    assert row.event.detail.startswith("500 period(s) missed (window)")
    # Another node writing the same periods finds them written: nothing new.
    write(missed)
    assert len(stored_events.recent(database, job="tick")) == 1


def test_one_node_takes_each_delivery_try(database: Database) -> None:
    claim = _held(database, "billing", PERIOD)
    writes.record(database, [Finish(claim, RunStatus.FAILED, 1, BOOM)], [])
    job_sets.record(database, "billing-set", ["billing"])
    job_sets.record(database, "another-set", ["another-job"])
    (seen_by_a,) = stored_events.due(database, "billing-set")
    (seen_by_b,) = stored_events.due(database, "billing-set")
    assert stored_events.take(database, seen_by_a, "node-a", 60)
    assert not stored_events.take(database, seen_by_b, "node-b", 60)
    assert stored_events.due(database, "billing-set") == []
    # node-b cannot settle a try it does not hold; node-a records a failed try.
    assert not stored_events.settle(
        database, seen_by_b, "node-b", state=Delivery.DELIVERED, delivered_to=(), error=None
    )
    assert stored_events.settle(
        database,
        seen_by_a,
        "node-a",
        state=Delivery.PENDING,
        delivered_to=["hook-one"],
        error="hook-two: down",
        retry_in=0.0,
    )
    (again,) = stored_events.due(database, "billing-set")
    assert (again.tries, again.delivered_to, again.last_error) == (
        1,
        ("hook-one",),
        "hook-two: down",
    )
    assert stored_events.due(database, "another-set") == []


def test_stuck_items_are_one_event_each_and_outlive_retention_while_stuck(
    database: Database,
) -> None:
    claim = _held(database, "ledger", PERIOD)
    with database.transaction() as connection:
        insert(
            connection,
            "scheduler_items",
            job="ledger",
            key="invoice-7",
            state="claimed",
            period=PERIOD,
            run_id=claim.id,
            attempt=1,
            node=NODE,
            claimed_at=PERIOD,
        )
    writes.record(database, [Finish(claim, RunStatus.FAILED, 1, BOOM)], [])
    ledger = job(cron="* * * * *", name="ledger")(lambda: None)
    scanner = Alerts(
        database=database,
        jobs={"ledger": ledger},
        node_id=NODE,
        stop=threading.Event(),
        log=structlog.get_logger(),
    )
    scanner.record_stuck()
    scanner.record_stuck()  # another pass, or another node: the key holds
    stuck = [
        row
        for row in stored_events.recent(database, job="ledger")
        if row.event.kind is EventKind.STUCK_ITEM
    ]
    assert [row.event.key for row in stuck] == ["ledger/2026-11-30T12:00:00Z/stuck_item/invoice-7"]
    for row in stored_events.recent(database, job="ledger"):
        assert stored_events.take(database, row, NODE, 60)
        stored_events.settle(
            database, row, NODE, state=Delivery.DELIVERED, delivered_to=["x"], error=None
        )
    later = datetime.now(UTC) + timedelta(days=1)
    assert prune.prune(database, later, dry_run=True).events == 1  # the failure, not the item
    assert prune.prune(database, later).events == 1
    assert [row.event.kind for row in stored_events.recent(database, job="ledger")] == [
        EventKind.STUCK_ITEM
    ]
