"""A claim that starts what it claims (`Due.start`): on PostgreSQL the period is marked
running by the claim itself when it is its job's turn, one transaction sooner; never
out of turn, never two of one job, and a lost reply is taken as won and started."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import structlog

from scheduler.model import Due, Started
from scheduler.registry import job
from scheduler.run.context import RunContext
from scheduler.run.dispatcher import Dispatcher
from scheduler.states import RunStatus
from scheduler.store import claims, queries, writes
from scheduler.store.database import Database, open_database
from tests.waiting import wait_until

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NODE = "node-a"


@pytest.fixture
def postgres(postgres_url: str) -> Iterator[Database]:
    opened = open_database(postgres_url)
    yield opened
    opened.dispose()


def _row(database: Database, period: datetime) -> tuple[object, ...]:
    row = queries.run_mapping(database, "sync", period)
    assert row is not None
    return (row["status"], row["started_attempts"], row["started_at"] is not None)


def test_a_claim_asked_to_start_marks_the_run_running(postgres: Database) -> None:
    result = claims.claim(postgres, [Due("sync", PERIOD, 30, start=True)], NODE)
    (won,) = result.won
    assert result.started == {won.id}
    assert _row(postgres, PERIOD) == (RunStatus.RUNNING, 1, True)
    # Its own start write, were it sent again, finds it running under its fence.
    assert writes.start(postgres, won, in_turn=True) is Started.STARTED
    assert _row(postgres, PERIOD) == (RunStatus.RUNNING, 1, True)


def test_a_claim_does_not_start_a_period_out_of_its_turn(postgres: Database) -> None:
    """An earlier period of a `queue` job is claimed elsewhere, not started yet: the
    later one is claimed but not started; it waits for the earlier one, as a start would."""
    later = PERIOD + timedelta(seconds=1)
    claims.claim(postgres, [Due("sync", PERIOD, 30, overlap_limit=2)], "node-b")
    result = claims.claim(postgres, [Due("sync", later, 30, overlap_limit=2, start=True)], NODE)
    assert len(result.won) == 1
    assert result.started == set()
    assert _row(postgres, later) == (RunStatus.CLAIMED, 0, False)


def test_a_claim_does_not_start_beside_a_running_period(postgres: Database) -> None:
    """A later period runs elsewhere and this earlier one is claimed late: claimed, not
    started, for `queue`; an `allow` job starts side by side."""
    later = PERIOD + timedelta(seconds=1)
    (running,) = claims.claim(postgres, [Due("sync", later, 30, overlap_limit=2)], "node-b").won
    assert writes.start(postgres, running, in_turn=True) is Started.STARTED
    queued = claims.claim(postgres, [Due("sync", PERIOD, 30, overlap_limit=2, start=True)], NODE)
    assert len(queued.won) == 1
    assert queued.started == set()
    side = claims.claim(
        postgres,
        [Due("sync", PERIOD - timedelta(seconds=1), 30, overlap_limit=None, start=True)],
        NODE,
    )
    assert side.started == {side.won[0].id}


def test_of_one_job_only_the_earliest_period_of_a_batch_is_started(postgres: Database) -> None:
    due = [Due("sync", PERIOD + timedelta(seconds=n), 30, start=True) for n in (2, 0, 1)]
    result = claims.claim(postgres, due, NODE)
    assert len(result.won) == 3
    (started,) = [claim for claim in result.won if claim.id in result.started]
    assert started.period == PERIOD
    assert _row(postgres, PERIOD + timedelta(seconds=1)) == (RunStatus.CLAIMED, 0, False)


def test_a_started_claim_whose_reply_was_lost_is_adopted_as_started(postgres: Database) -> None:
    """The claim committed but its reply never came: the retry finds the row running in
    this node's name at its first attempt, and takes it as won and started."""
    (first,) = claims.claim(postgres, [Due("sync", PERIOD, 30, start=True)], NODE).won
    again = claims.claim(postgres, [Due("sync", PERIOD, 30, start=True)], NODE, adopt=True)
    (adopted,) = again.won
    assert (adopted.id, adopted.starts_before) == (first.id, 0)
    assert again.started == {first.id}
    other = claims.claim(postgres, [Due("sync", PERIOD, 30, start=True)], "node-b", adopt=True)
    assert other.won == []


def test_sqlite_claims_and_leaves_the_start_to_the_node(sqlite_url: str) -> None:
    database = open_database(sqlite_url)
    try:
        result = claims.claim(database, [Due("sync", PERIOD, 30, start=True)], NODE)
        assert len(result.won) == 1
        assert result.started == set()
        assert _row(database, PERIOD) == (RunStatus.CLAIMED, 0, False)
    finally:
        database.dispose()


def test_a_run_started_by_its_claim_is_called_on_the_worker_set_aside(
    postgres: Database,
) -> None:
    """`reserve` sets a worker aside, the claim starts the run, `submit_started` calls
    its function there, with no start write of its own; the slot comes back after."""
    calls: list[datetime] = []
    release = threading.Event()

    @job(cron="* * * * * *", name="sync", lease="30s")
    def sync(ctx: RunContext) -> None:
        calls.append(ctx.period)
        release.wait(10)

    dispatcher = Dispatcher(postgres, {"sync": sync}, NODE, 1, structlog.get_logger())
    try:
        assert dispatcher.reserve(["sync"]) == ["sync"]
        # The only worker is set aside: nothing more is, until it comes back.
        assert dispatcher.reserve(["sync"]) == []
        result = claims.claim(postgres, [Due("sync", PERIOD, 30, start=True)], NODE)
        (won,) = result.won
        assert won.id in result.started
        assert dispatcher.submit_started(won)
        assert not dispatcher.submit_started(won)  # in hand already: not taken twice
        wait_until(lambda: calls == [PERIOD])
        release.set()
        wait_until(lambda: _row(postgres, PERIOD)[0] == RunStatus.SUCCEEDED)
        assert _row(postgres, PERIOD) == (RunStatus.SUCCEEDED, 1, True)
        # Once the run is over, its worker (and the job) can be set aside again.
        slots: list[str] = []

        def set_aside() -> bool:
            slots.extend(dispatcher.reserve(["sync"]))
            return slots == ["sync"]

        wait_until(set_aside)
        dispatcher.unreserve(len(slots))
    finally:
        release.set()
        dispatcher.drain(1)
